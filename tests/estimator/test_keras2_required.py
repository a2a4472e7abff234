"""TPU embedding columns with `tf.keras` already Keras 3 (TF >= 2.16 without TF_USE_LEGACY_KERAS): one clear error.

Each case runs in a fresh interpreter, since the variable only matters before TensorFlow is first imported.
"""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = """
import sys
if {hide_tf_keras}:
    sys.modules["tf_keras"] = None  # as if tf-keras were not installed
import tensorflow as tf
from tpu_estimator import experimental as tex
from tpu_estimator._keras2 import Keras2RequiredError

column = tf.compat.v1.tpu.experimental.embedding_column(
    tf.feature_column.categorical_column_with_identity("a", 10), 4
)
try:
    spec = tex.EmbeddingConfigSpec(feature_columns=[column], optimization_parameters=tex.AdagradParameters(0.1))
    print("BUILT", [c.name for c in spec.feature_columns])
except Keras2RequiredError as error:
    print("ERROR", error)
try:
    print("KERAS", "2" if hasattr(tf.keras.layers, "DenseFeatures") else "3")
except (ImportError, RecursionError):
    print("KERAS", "none")
"""


def _run(legacy_keras, hide_tf_keras=False):
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(hide_tf_keras=hide_tf_keras)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(
        line.split(" ", 1)
        for line in result.stdout.splitlines()
        if line.split(" ", 1)[0] in {"KERAS", "BUILT", "ERROR"}
    )


def test_keras3_gives_one_error_saying_to_set_tf_use_legacy_keras():
    out = _run(legacy_keras=False)
    if out["KERAS"] == "2":  # TF 2.15: tf.keras is Keras 2 without the variable.
        assert out["BUILT"] == "['a_embedding']"
        return
    assert "BUILT" not in out
    assert out["ERROR"].startswith(
        "EmbeddingConfigSpec(feature_columns=...) (TPU embedding columns) needs Keras 2 "
        "(tf.keras.layers.DenseFeatures), but tf.keras is Keras 3."
    )
    assert "Set the environment variable TF_USE_LEGACY_KERAS=1 before TensorFlow is first imported" in out["ERROR"]
    assert "pip install 'tf-keras==2." in out["ERROR"]


def test_legacy_keras_builds_the_spec():
    out = _run(legacy_keras=True)
    assert out == {"KERAS": "2", "BUILT": "['a_embedding']"}


def test_missing_tf_keras_says_to_install_it():
    if tuple(int(p) for p in tf.__version__.split(".")[:2]) < (2, 16):
        pytest.skip("TF 2.15's tf.keras is its keras 2.15 package: tf-keras is not what provides Keras 2 there")
    out = _run(legacy_keras=True, hide_tf_keras=True)
    assert out["ERROR"].startswith(
        "EmbeddingConfigSpec(feature_columns=...) (TPU embedding columns) needs Keras 2 "
        "(tf.keras.layers.DenseFeatures), but tf.keras cannot be imported ("
    )
    assert "install tf-keras matching your TensorFlow" in out["ERROR"]
