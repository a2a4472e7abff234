"""Every program in examples/ runs in a few seconds with small sizes and passes its own checks.

Each example asserts its results itself (served SavedModel == `predict()` / the training path, a learned model);
the README's example is run by test_readme.py.
"""

from pathlib import Path

import pytest

from tests.docs.test_readme import BLOCKS, REPO, our_warnings, run_served_program

INCLUDED_IN_README = {b.include for b in BLOCKS if b.include}
EXAMPLES = sorted(p.name for p in (REPO / "examples").glob("*.py"))


def test_examples_exist_and_the_readme_shows_one():
    assert {"feature_columns.py", "dict_config.py", "tpu_embedding_tf2.py"} <= set(EXAMPLES)
    assert "examples/feature_columns.py" in INCLUDED_IN_README


@pytest.mark.parametrize("name", [n for n in EXAMPLES if f"examples/{n}" not in INCLUDED_IN_README])
def test_example_runs_and_checks_itself(name, tmp_path: Path):
    result = run_served_program(REPO / "examples" / name, tmp_path, f"examples/{name}")
    assert (tmp_path / "model").is_dir()  # EXAMPLE_MODEL_DIR is honoured
    # No deprecation (or other) warning from our code or the example at default settings.
    assert our_warnings(result.stderr) == []


def test_our_warnings_finds_the_lines_of_our_files():
    stderr = (
        f"{REPO}/examples/x.py:64: UserWarning: `tf.layers.dense` is deprecated\n  net = ...\n"
        "/usr/lib/python3/site-packages/tf_keras/src/backend.py:452: UserWarning: elsewhere\n"
        f"{REPO}/tpu_estimator/y.py:3: DeprecationWarning: old\n"
    )
    assert our_warnings(stderr) == [
        f"{REPO}/examples/x.py:64: UserWarning: `tf.layers.dense` is deprecated",
        f"{REPO}/tpu_estimator/y.py:3: DeprecationWarning: old",
    ]
