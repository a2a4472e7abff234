"""Keras 2 chosen for the user, and one clear error where `tf.keras` is already Keras 3.

`import tpu_estimator` sets TF_USE_LEGACY_KERAS=1 (TF >= 2.16, tf-keras installed, variable unset) before the program
first uses `tf.keras`, even after `import tensorflow`. A program that used `tf.keras` (Keras 3) before importing us
gets one error saying what to do, from TPU embedding columns and from `tf.compat.v1.layers` in a model_fn. Each case
runs in a fresh interpreter, since TensorFlow resolves `tf.keras` once per process.
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
if {touch_keras_first}:
    hasattr(tf.compat.v1.layers if {touch_keras_first} == "layers" else tf.keras, "Layer")  # used before tpu_estimator
from tpu_estimator import experimental as tex
from tpu_estimator.specs import spec
from tpu_estimator._keras2 import Keras2RequiredError

def model_fn(features, labels, mode, params):
    return tf.compat.v1.layers.dense(features, 1)

with tf.Graph().as_default():
    try:
        spec.call_user_model_fn(model_fn, tf.zeros([2, 3]), None, "train", None, {{}})
        print("LAYERS ok")
    except Keras2RequiredError as error:
        print("LAYERS", error)
    except (ImportError, RecursionError) as error:  # tf-keras hidden: TensorFlow's own error
        print("LAYERS", type(error).__name__)

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


def _run(legacy_keras, hide_tf_keras=False, touch_keras_first=False):
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(hide_tf_keras=hide_tf_keras, touch_keras_first=touch_keras_first)],
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
        if line.split(" ", 1)[0] in {"KERAS", "BUILT", "ERROR", "LAYERS"}
    )


def test_importing_tpu_estimator_after_tensorflow_selects_keras_2():
    # The variable unset, `import tensorflow` first (as the examples do): tpu_estimator still selects Keras 2.
    assert _run(legacy_keras=False) == {"LAYERS": "ok", "BUILT": "['a_embedding']", "KERAS": "2"}


@pytest.mark.parametrize("used_first", ["keras", "layers"])
def test_keras3_already_in_use_gives_one_error_saying_what_to_do(used_first):
    # tf.keras or tf.compat.v1.layers (each resolved on its first use) already Keras 3: no half-switch to Keras 2.
    out = _run(legacy_keras=False, touch_keras_first=repr(used_first))
    if out["KERAS"] == "2":  # TF 2.15: tf.keras is Keras 2 without the variable.
        assert out == {"LAYERS": "ok", "BUILT": "['a_embedding']", "KERAS": "2"}
        return
    assert "BUILT" not in out
    assert out["ERROR"].startswith(
        "EmbeddingConfigSpec(feature_columns=...) (TPU embedding columns) needs Keras 2 (tf-keras), but tf.keras is "
        "Keras 3."
    )
    assert out["LAYERS"].startswith(
        "model_fn's Keras 2 API (`dense` is not available with Keras 3.) needs Keras 2 (tf-keras), but tf.keras is "
        "Keras 3."
    )
    for error in (out["ERROR"], out["LAYERS"]):
        assert "Import tpu_estimator before your program first uses tf.keras" in error
        assert "TF_USE_LEGACY_KERAS=1 before TensorFlow is imported" in error
        assert "pip install 'tf-keras==2." in error


def test_legacy_keras_builds_the_spec():
    out = _run(legacy_keras=True)
    assert out == {"LAYERS": "ok", "KERAS": "2", "BUILT": "['a_embedding']"}


def test_missing_tf_keras_says_to_install_it():
    if tuple(int(p) for p in tf.__version__.split(".")[:2]) < (2, 16):
        pytest.skip("TF 2.15's tf.keras is its keras 2.15 package: tf-keras is not what provides Keras 2 there")
    out = _run(legacy_keras=True, hide_tf_keras=True)
    assert out["ERROR"].startswith(
        "EmbeddingConfigSpec(feature_columns=...) (TPU embedding columns) needs Keras 2 "
        "(tf-keras), but tf.keras cannot be imported ("
    )
    assert "install tf-keras matching your TensorFlow" in out["ERROR"]
