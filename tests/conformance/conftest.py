"""Options and markers of the conformance suite.

`pytest tests/conformance` runs the pairwise covering subset (the default, also in `make test`).
`pytest tests/conformance --conformance=full` runs the whole product of the axes (millions of cases: see
docs/CONFORMANCE.md), `--conformance=sample:N` a seeded random sample of N cases of it. The environment variable
`TPU_ESTIMATOR_CONFORMANCE` (same values) does the same where the option is not registered (`pytest tests`).
"""

import os

import pytest

from tests.conformance import cases

ENV = "TPU_ESTIMATOR_CONFORMANCE"


def pytest_addoption(parser):
    parser.addoption(
        "--conformance",
        default=None,
        help="conformance cases to run: pairwise (default), full, or sample:N (env {})".format(ENV),
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "conformance: a generated conformance case (tests/conformance)")
    config.addinivalue_line(
        "markers", "upstream: compares with upstream's TPUEstimator(use_tpu=False) CPU path (TensorFlow 2.15 only)"
    )


def conformance_level(config) -> str:
    level = config.getoption("--conformance", default=None) or os.environ.get(ENV) or "pairwise"
    if level not in ("pairwise", "full") and not (level.startswith("sample:") and level[7:].isdigit()):
        raise pytest.UsageError("--conformance / {} must be pairwise, full or sample:N; got {!r}".format(ENV, level))
    return level


def pytest_generate_tests(metafunc):
    if "conformance_case" not in metafunc.fixturenames:
        return
    selected = cases.select(conformance_level(metafunc.config))
    params = []
    for case in selected:
        marks = [pytest.mark.conformance]
        reason = cases.known_failure(case)
        if reason is not None:
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        params.append(pytest.param(case, id=cases.case_id(case), marks=marks))
    metafunc.parametrize("conformance_case", params)
