"""Predict with padding on shards, and export_saved_model served by plain TensorFlow (docs/SEMANTICS.md 6-7)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import models
from tpu_estimator import estimator as tf_estimator

IPC = te.InputPipelineConfig


def _predict_input_fn(params):
    return tf.data.Dataset.from_tensor_slices(models.X[:10]).take(10).batch(params["batch_size"])


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("trained")
    estimator = models.make_estimator(model_dir, num_shards=2)
    estimator.train(models.dataset_input_fn, max_steps=4)
    return model_dir


def _estimator(model_dir, mode=IPC.PER_HOST_V1, num_shards=2, **kwargs):
    config = te.RunConfig(
        model_dir=str(model_dir), tpu_config=te.TPUConfig(num_shards=num_shards, per_host_input_for_training=mode)
    )
    return te.TPUEstimator(
        model_fn=models.make_model_fn(), config=config, train_batch_size=32, predict_batch_size=4, **kwargs
    )


@pytest.mark.parametrize("mode", [IPC.PER_HOST_V1, IPC.PER_HOST_V2, IPC.BROADCAST])
def test_predict_returns_one_row_per_input_in_order(trained_dir, mode):
    estimator = _estimator(trained_dir, mode)
    expected = models.numpy_forward(models.variables_of(estimator), models.X[:10])
    predictions = list(estimator.predict(_predict_input_fn))
    assert len(predictions) == 10
    np.testing.assert_allclose(np.stack([p["y"] for p in predictions]), expected, rtol=1e-5)


def test_predict_batches_and_tensor_predictions(trained_dir):
    def model_fn(features, labels, mode, params):
        spec = models.make_model_fn()(features, labels, mode, params)
        return spec._replace(predictions=spec.predictions["y"])

    config = te.RunConfig(model_dir=str(trained_dir), tpu_config=te.TPUConfig(num_shards=2))
    estimator = te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=32, predict_batch_size=4)
    batches = list(estimator.predict(_predict_input_fn, yield_single_examples=False))
    assert [b.shape[0] for b in batches] == [4, 4, 2]
    expected = models.numpy_forward(models.variables_of(estimator), models.X[:10])
    np.testing.assert_allclose(np.concatenate(batches), expected, rtol=1e-5)


def test_predict_needs_a_dataset(trained_dir):
    estimator = _estimator(trained_dir)
    with pytest.raises(TypeError, match="For mode PREDICT, `input_fn` must return `Dataset`"):
        list(estimator.predict(lambda params: tf.constant(models.X[:4])))


def _serving_input_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 5], name="x")
    return tf_estimator.export.TensorServingInputReceiver(x, {"x": x})


@pytest.mark.parametrize("api", [te.ExportSavedModelApiVersion.V1, te.ExportSavedModelApiVersion.V2])
def test_export_serves_what_predict_predicts(trained_dir, tmp_path, api):
    estimator = _estimator(trained_dir, export_saved_model_api_version=api)
    export_dir = estimator.export_saved_model(str(tmp_path / "export"), _serving_input_fn).decode()
    predicted = np.stack([p["y"] for p in estimator.predict(_predict_input_fn)])
    loaded = tf.saved_model.load(export_dir, tags=["serve"])
    served = loaded.signatures["serving_default"](x=tf.constant(models.X[:10]))["y"].numpy()
    np.testing.assert_allclose(served, predicted, rtol=1e-5)
    # The {serve, tpu} metagraph loads by its tags and computes the same.
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve", "tpu"], export_dir)
        signature = meta.signature_def["serving_default"]
        out = session.run(signature.outputs["y"].name, {signature.inputs["x"].name: models.X[:10]})
    np.testing.assert_allclose(out, predicted, rtol=1e-5)


def test_export_to_cpu_only_and_saved_model_cli(trained_dir, tmp_path):
    estimator = _estimator(trained_dir, export_to_tpu=False)
    export_dir = estimator.export_saved_model(str(tmp_path / "export"), _serving_input_fn).decode()
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        with pytest.raises(RuntimeError):
            tf.compat.v1.saved_model.loader.load(session, ["serve", "tpu"], export_dir)
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    rows = models.X[:3].tolist()
    outdir = tmp_path / "outputs"
    result = subprocess.run(
        [
            cli,
            "run",
            "--dir",
            export_dir,
            "--tag_set",
            "serve",
            "--signature_def",
            "serving_default",
            "--input_exprs",
            "x={}".format(json.dumps(rows)),
            "--outdir",
            str(outdir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    expected = models.numpy_forward(models.variables_of(estimator), models.X[:3])
    np.testing.assert_allclose(np.load(outdir / "y.npy"), expected, rtol=1e-5)


def test_export_flags_validation(tmp_path):
    with pytest.raises(ValueError, match="One of export_to_cpu and export_to_tpu must be true."):
        _estimator(tmp_path, export_to_cpu=False, export_to_tpu=False)


def test_warm_start_from_checkpoint(trained_dir, tmp_path):
    source = models.variables_of(_estimator(trained_dir))
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(num_shards=2))
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(learning_rate=0.0),
        config=config,
        train_batch_size=32,
        warm_start_from=str(trained_dir),
    )
    estimator.train(models.dataset_input_fn, max_steps=1)
    for name in ("dense/kernel", "dense_1/kernel", "dense_1/bias"):
        np.testing.assert_allclose(estimator.get_variable_value(name), source[name])
