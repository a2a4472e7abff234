"""The launcher selects Keras 2 (TF_USE_LEGACY_KERAS=1) on TensorFlow 2.16+ before the program's TensorFlow loads."""

import tensorflow as tf

from tests.helpers.launcher import run_launcher

PROGRAM = """
import os
import tensorflow as tf
print("RESULT", os.environ.get("TF_USE_LEGACY_KERAS"), tf.keras.layers.Dense.__module__.split(".")[0])
"""


def _tf_at_least_2_16():
    major, minor = (int(p) for p in tf.__version__.split(".")[:2])
    return (major, minor) >= (2, 16)


def _run_launcher(tmp_path, **env_overrides):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    completed = run_launcher(script, TF_CPP_MIN_LOG_LEVEL="3", **env_overrides)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return [line.split()[1:] for line in completed.stdout.splitlines() if line.startswith("RESULT")][-1]


def test_launcher_uses_keras_2_on_tf_2_16_and_later(tmp_path):
    env_value, keras_package = _run_launcher(tmp_path)
    if _tf_at_least_2_16():
        # `python -m tpu_estimator.compat.launcher` imported TensorFlow first: the launcher restarted itself.
        assert (env_value, keras_package) == ("1", "tf_keras")
    else:
        assert env_value == "None" and keras_package in ("keras", "tf_keras")


def test_launcher_keeps_a_users_choice(tmp_path):
    env_value, _ = _run_launcher(tmp_path, TF_USE_LEGACY_KERAS="0")
    assert env_value == "0"
