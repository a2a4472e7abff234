"""An error TensorFlow raises in a program run by `tpu-estimator-run` is a few lines: the program's line that
called into TensorFlow, then the error's cause; `--traceback` gives the full traceback (issue 47 item 5)."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EAGER = """\
import tensorflow as tf


def add(a, b):
    return a + b


print(add(tf.constant([1, 2]), tf.constant([1, 2, 3])))
"""

# A TF1 graph whose op fails in Session.run, deep below the program's call (TensorFlow's session, our patches).
GRAPH = """\
import tensorflow as tf

tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, [None])
y = tf.reshape(x, [3])


def main():
    with tf.compat.v1.Session() as session:
        session.run(y, {x: [1.0, 2.0]})


main()
"""


def run_launcher(tmp_path, program, *options):
    path = tmp_path / "program.py"
    path.write_text(program)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-m", "tpu_estimator.compat.launcher", *options, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return path, result


@pytest.mark.quick
def test_an_eager_tensorflow_error_is_the_programs_line_and_the_cause(tmp_path):
    path, result = run_launcher(tmp_path, EAGER)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "tpu-estimator-run: TensorFlow raised an error (--traceback shows the full traceback)",
        f'  File "{path}", line 5, in add',
        "    return a + b",
        "InvalidArgumentError: Incompatible shapes: [2] vs. [3]",
    ]


def test_a_session_run_error_is_the_programs_line_and_the_cause_and_traceback_gives_all(tmp_path):
    path, result = run_launcher(tmp_path, GRAPH)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[:3] == [
        "tpu-estimator-run: TensorFlow raised an error (--traceback shows the full traceback)",
        f'  File "{path}", line 10, in main',
        "    session.run(y, {x: [1.0, 2.0]})",
    ]
    assert len(lines) == 4 and lines[3].startswith("InvalidArgumentError: Input to reshape is a tensor with 2 values")
    assert "[[" not in lines[3] and "Traceback" not in result.stderr

    _, full = run_launcher(tmp_path, GRAPH, "--traceback")
    assert full.returncode == 1
    assert "Traceback (most recent call last)" in full.stderr and f'File "{path}", line 10, in main' in full.stderr
    assert len(full.stderr.splitlines()) > 15


def test_the_programs_own_error_keeps_its_traceback(tmp_path):
    _, result = run_launcher(tmp_path, "def main():\n    return 1 / 0\n\n\nmain()\n")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr and "ZeroDivisionError" in result.stderr
