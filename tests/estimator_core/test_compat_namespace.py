"""compat.install() where TensorFlow has no tf.estimator (2.16+; simulated on 2.15): our namespace behind it."""

import sys

import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import compat
from tpu_estimator import estimator as estimator_lib
from tpu_estimator.compat import patching

_MISSING = object()


@pytest.fixture
def without_tf_estimator(monkeypatch):
    """Makes install() take the TensorFlow-2.16+ path even where tf.estimator exists."""
    for namespace in (tf, tf.compat.v1, tf.compat.v2):
        # TF 2.15's lazy loaders replace themselves by the module when first used (install() uses them): resolve
        # them now, so that the snapshot before install() is what uninstall() restores.
        getattr(getattr(namespace, "estimator", None), "Estimator", None)
    monkeypatch.setattr(patching, "_our_estimator_namespaces", lambda: True)


def _module_name(entry):
    # TF 2.15 binds tf.compat.v1.estimator to a LazyLoader that some reads replace by the module it loads: both
    # are the same namespace, named alike.
    return getattr(entry, "__name__", entry)


def _estimator_attributes():
    return {
        "tf": _module_name(tf.__dict__.get("estimator", _MISSING)),
        "v1": _module_name(tf.compat.v1.__dict__.get("estimator", _MISSING)),
        "v2": _module_name(tf.compat.v2.__dict__.get("estimator", _MISSING)),
        "modules": sorted(m for m in sys.modules if m.startswith(("tensorflow.estimator", "tensorflow.compat.v"))),
    }


def test_install_puts_our_estimator_namespace_behind_tf_estimator(without_tf_estimator):
    before = _estimator_attributes()
    compat.install()
    try:
        for namespace in (tf.estimator, tf.compat.v1.estimator, tf.compat.v2.estimator):
            assert namespace.Estimator is estimator_lib.Estimator
            assert namespace.ModeKeys is estimator_lib.ModeKeys and namespace.ModeKeys.PREDICT == "infer"
            assert namespace.RunConfig is estimator_lib.RunConfig
            assert namespace.train_and_evaluate is estimator_lib.train_and_evaluate
            assert namespace.export.ServingInputReceiver is estimator_lib.export.ServingInputReceiver
            assert namespace.export.PredictOutput is estimator_lib.export.PredictOutput
            assert namespace.tpu.TPUEstimator is te.TPUEstimator and namespace.tpu.RunConfig is te.RunConfig
            assert namespace.tpu.experimental.EmbeddingConfigSpec.__module__.startswith("tpu_estimator.")
            assert namespace.LoggingTensorHook is tf.compat.v1.train.LoggingTensorHook
            assert namespace.SessionRunHook is tf.compat.v1.train.SessionRunHook
        from tensorflow.compat.v1.estimator import tpu as v1_tpu
        from tensorflow.estimator.export import TensorServingInputReceiver

        assert v1_tpu.TPUEstimatorSpec is te.TPUEstimatorSpec
        assert TensorServingInputReceiver is estimator_lib.export.TensorServingInputReceiver
        with pytest.raises(AttributeError, match="tensorflow.estimator.DNNClassifier is not provided by tpu_estimator"):
            tf.estimator.DNNClassifier
    finally:
        compat.uninstall()
    assert _estimator_attributes() == before


def test_unmodified_estimator_program_runs_through_tf_estimator(without_tf_estimator, tmp_path):
    compat.install()
    try:
        # What a TF1/TF2 Estimator program writes, spelled through tf.estimator only.
        def model_fn(features, labels, mode):
            w = tf.compat.v1.get_variable("w", [2, 1], initializer=tf.compat.v1.ones_initializer())
            y = tf.matmul(features["x"], w)
            if mode == tf.estimator.ModeKeys.PREDICT:
                return tf.estimator.EstimatorSpec(mode, predictions={"y": y})
            loss = tf.reduce_mean(tf.square(y - labels))
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=tf.compat.v1.train.get_global_step()
            )
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

        def input_fn():
            x = [[1.0, 0.0], [0.0, 1.0]]
            return tf.data.Dataset.from_tensor_slices(({"x": x}, [[2.0], [3.0]])).batch(2).repeat()

        estimator = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path), config=tf.estimator.RunConfig())
        tf.estimator.train_and_evaluate(
            estimator, tf.estimator.TrainSpec(input_fn, max_steps=200), tf.estimator.EvalSpec(input_fn, steps=1)
        )
        weights = estimator.get_variable_value("w")[:, 0]
        assert abs(weights[0] - 2.0) < 1e-3 and abs(weights[1] - 3.0) < 1e-3
        export_dir = estimator.export_saved_model(
            str(tmp_path / "export"),
            tf.estimator.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 2])}),
        )
        assert tf.compat.v1.saved_model.contains_saved_model(export_dir.decode())
    finally:
        compat.uninstall()
