"""The generated conformance cases (see cases.py for the axes and oracles, conftest.py for the subsets)."""

from tests.conformance import cases


def test_case_meets_the_oracles_or_raises_its_one_clear_error(conformance_case, tmp_path):
    cases.run_case(conformance_case, str(tmp_path / "model"))
