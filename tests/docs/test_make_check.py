"""`make check`, the quick check (issue 47 item 1): the lint, a sample of every test directory and the README's first
program, on TF 2.21 alone, in minutes; the README names it beside `make test`, with both durations.

The sample is the tests marked `quick` (`@pytest.mark.quick`, or `pytest.param(..., marks=pytest.mark.quick)` for one
case of a parametrized test, or a module's `pytestmark`). These tests keep it a sample of every directory: a new test
directory fails `test_every_test_directory_has_quick_tests` until some of its tests are marked.
"""

import ast
import re
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from tests.docs.test_readme import BLOCKS, README, REPO

pytestmark = pytest.mark.quick

TESTS = REPO / "tests"


def directories_with_tests() -> List[Path]:
    return sorted(d for d in TESTS.iterdir() if d.is_dir() and any(d.glob("test_*.py")))


def quick_tests(path: Path) -> List[str]:
    """The tests of a file marked `quick` (a test with one quick case counts; a module's `pytestmark`: all)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module_quick = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and "mark.quick" in ast.unparse(node.value)
        for node in tree.body
    )
    tests = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    return [t.name for t in tests if module_quick or any("mark.quick" in ast.unparse(d) for d in t.decorator_list)]


def quick_by_directory() -> Dict[str, List[str]]:
    return {
        d.name: [f"{f.name}::{name}" for f in sorted(d.glob("test_*.py")) for name in quick_tests(f)]
        for d in directories_with_tests()
    }


def test_quick_tests_are_found():
    found = quick_tests(Path(__file__))
    assert "test_every_test_directory_has_quick_tests" in found
    assert "test_the_readme_names_both_commands_their_durations_and_what_they_prove" in found
    assert "test_config_errors_name_the_key_path" in quick_tests(TESTS / "cli" / "test_cli.py")
    assert "test_hosts_in_processes_of_their_own_equal_one_host" in quick_tests(
        TESTS / "cluster" / "test_host_processes.py"
    )
    assert "test_a_killed_host_fails_the_others_within_60s_and_the_job_resumes" not in quick_tests(
        TESTS / "cluster" / "test_host_processes.py"
    )


def test_every_test_directory_has_quick_tests():
    by_directory = quick_by_directory()
    assert {"cli", "cluster", "compat", "conformance", "embedding", "estimator", "models"} <= set(by_directory)
    unsampled = sorted(name for name, tests in by_directory.items() if not tests)
    assert not unsampled, f"tests/{unsampled}: mark a few representative tests @pytest.mark.quick (make check)"


def test_no_quick_test_runs_on_tf215_only():
    """`make check` deselects `upstream` tests (TF 2.21): a quick test marked `upstream` would never run there."""
    both = []
    for directory in directories_with_tests():
        for path in directory.glob("test_*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    marks = " ".join(ast.unparse(d) for d in node.decorator_list)
                    if "mark.quick" in marks and "mark.upstream" in marks:
                        both.append(f"{path.relative_to(REPO)}::{node.name}")
    assert not both, f"quick tests that run on TF 2.15 only: {both}"


def make_check_commands() -> str:
    """The commands `make check` runs (a dry run; the environments count as installed)."""
    result = subprocess.run(
        ["make", "-n", "-C", str(REPO), "-o", ".venv/.installed", "-o", ".venv-tf215/.installed", "check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_check_runs_the_lint_the_quick_sample_and_the_readmes_first_program_on_tf221_alone():
    commands = make_check_commands()
    assert ".venv/bin/ruff format --check ." in commands
    assert ".venv/bin/ruff check ." in commands
    assert re.search(r"\.venv/bin/python -m pytest .*-m \"quick and not upstream\" tests", commands), commands
    first_program = next(b.include for b in BLOCKS if b.language == "python" and b.include)
    assert f".venv/bin/python {first_program}" in commands
    assert ".venv-tf215" not in commands  # TF 2.21 only: no second environment


def test_make_test_stays_the_full_suite_of_ci():
    assert (REPO / ".ci" / "run").read_text().strip().endswith("make -k test")
    makefile = (REPO / "Makefile").read_text()
    test_rule = re.search(r"^test: ((?:[^\n]*\\\n)*[^\n]*)", makefile, flags=re.M).group(1)
    assert "check" not in test_rule and "test-tf215-engine" in test_rule and "test-tf221-cluster" in test_rule


def test_the_readme_names_both_commands_their_durations_and_what_they_prove():
    top = README.read_text(encoding="utf-8").split("\n## ", 1)[0]
    check = re.search(r"`make check`[^\n]*", top)
    full = re.search(r"`make test`[^\n]*", top)
    assert check and full, top
    paragraph = top[top.index(BLOCKS[0].code) + len(BLOCKS[0].code) :]
    assert re.search(r"`make check`.{0,400}?\b\d+(\.\d+)? ?(minutes|min|s)\b", paragraph, flags=re.S), paragraph
    assert re.search(r"`make test`.{0,400}?\b\d+ ?(minutes|min|hours?)\b", paragraph, flags=re.S), paragraph
    assert "lint" in paragraph and "examples/feature_columns.py" in paragraph
