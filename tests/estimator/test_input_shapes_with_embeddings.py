"""Input shapes the embedding path must accept (issue 14): sparse first features under PER_HOST_V2 with 2+ shards,
and `input_fn`s that yield only a features dict (labels inside it, `model_fn` without `labels`).

Each program is checked against the same program in a shape that was already supported: trained tables and dense
variables, evaluation metrics and predictions must be equal.
"""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import experimental as tex

RNG = np.random.RandomState(11)
N, G = 64, 16
A = RNG.randint(0, 10, size=(N, 3)).astype(np.int64)
B = RNG.randint(0, 7, size=(N, 1)).astype(np.int64)
X = RNG.randn(N, 2).astype(np.float32)
Y = RNG.randn(N).astype(np.float32)


def _sparse(ids: np.ndarray) -> tf.SparseTensor:
    rows, cols = np.nonzero(np.ones_like(ids))
    return tf.SparseTensor(np.stack([rows, cols], 1).astype(np.int64), ids.reshape(-1), ids.shape)


def spec(pipelined: bool = False) -> tex.EmbeddingConfigSpec:
    return tex.EmbeddingConfigSpec(
        table_to_config_dict={
            "t1": tex.TableConfig(10, 4, initializer=tf.compat.v1.constant_initializer(0.1)),
            "t2": tex.TableConfig(7, 4, initializer=tf.compat.v1.constant_initializer(0.2)),
        },
        feature_to_config_dict={"a": tex.FeatureConfig("t1"), "b": tex.FeatureConfig("t2")},
        optimization_parameters=tex.AdagradParameters(0.5, initial_accumulator=0.1),
        pipeline_execution_with_tensor_core=pipelined,
    )


def _logit(features):
    acts = tf.concat([features["a"], features["b"], features["x"]], axis=1)
    weights = tf.compat.v1.get_variable("w", [10, 1], initializer=tf.compat.v1.constant_initializer(0.3))
    return tf.squeeze(tf.matmul(acts, weights), 1)


def _spec_for(mode, logit, labels):
    if mode == te.estimator.ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(mode, predictions={"logit": logit})
    loss = tf.reduce_mean(tf.square(logit - labels))
    if mode == te.estimator.ModeKeys.EVAL:
        metric_fn = lambda logit, labels: {"mse": tf.compat.v1.metrics.mean_squared_error(labels, logit)}
        return te.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [logit, labels]))
    opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))


def model_fn_with_labels(features, labels, mode, params):
    return _spec_for(mode, _logit(features), labels)


def model_fn_without_labels(features, mode, params):
    features = dict(features)
    labels = features.pop("y", None)
    return _spec_for(mode, _logit(features), labels)


def estimator(model_dir, model_fn, num_shards=2, input_config=te.InputPipelineConfig.PER_HOST_V2, pipelined=False):
    config = te.RunConfig(
        model_dir=str(model_dir),
        tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=num_shards, per_host_input_for_training=input_config),
    )
    return te.TPUEstimator(
        model_fn=model_fn,
        config=config,
        train_batch_size=G,
        eval_batch_size=G,
        predict_batch_size=G,
        embedding_config_spec=spec(pipelined),
    )


def _values(est):
    return {name: est.get_variable_value(name) for name in est.get_variable_names()}


def _assert_same_values(ours, reference):
    assert set(ours) == set(reference)
    for name in reference:
        np.testing.assert_allclose(ours[name], reference[name], rtol=1e-6, atol=1e-6, err_msg=name)


def _predictions(est, input_fn):
    return np.array([p["logit"] for p in est.predict(input_fn, yield_single_examples=True)])


# ---- issue 14.1: a SparseTensor as the first feature under PER_HOST_V2 ---------------------------------------------


def _sparse_first_input_fn(params):
    # "a" sorts first, so it is the first tensor of the flattened element.
    features = {"a": _sparse(A), "b": B, "x": X}
    return tf.data.Dataset.from_tensor_slices((features, Y)).repeat().batch(params["batch_size"], True)


def _dense_input_fn(params):
    features = {"a": A, "b": B, "x": X}
    return tf.data.Dataset.from_tensor_slices((features, Y)).repeat().batch(params["batch_size"], True)


def _sparse_first_predict_input_fn(params):
    return tf.data.Dataset.from_tensor_slices({"a": _sparse(A), "b": B, "x": X}).batch(params["batch_size"])


def _dense_predict_input_fn(params):
    return tf.data.Dataset.from_tensor_slices({"a": A, "b": B, "x": X}).batch(params["batch_size"])


@pytest.mark.parametrize("num_shards", [2, 4])
def test_per_host_v2_with_a_sparse_first_feature_trains_as_dense_ids(tmp_path, num_shards):
    sparse = estimator(tmp_path / "sparse", model_fn_with_labels, num_shards)
    dense = estimator(tmp_path / "dense", model_fn_with_labels, num_shards)
    sparse.train(_sparse_first_input_fn, max_steps=3)
    dense.train(_dense_input_fn, max_steps=3)
    _assert_same_values(_values(sparse), _values(dense))
    assert not np.allclose(sparse.get_variable_value("t1"), 0.1)  # the tables did train
    np.testing.assert_allclose(
        sparse.evaluate(_sparse_first_input_fn, steps=2)["mse"], dense.evaluate(_dense_input_fn, steps=2)["mse"]
    )
    np.testing.assert_allclose(
        _predictions(sparse, _sparse_first_predict_input_fn),
        _predictions(dense, _dense_predict_input_fn),
        rtol=1e-6,
    )


# ---- issue 14.2: an input_fn that yields only a features dict, model_fn without labels -----------------------------


def _features_only_input_fn(params):
    features = {"a": A, "b": B, "x": X, "y": Y}
    return tf.data.Dataset.from_tensor_slices(features).repeat().batch(params["batch_size"], True)


def _features_only_predict_input_fn(params):
    return tf.data.Dataset.from_tensor_slices({"a": A, "b": B, "x": X}).batch(params["batch_size"])


@pytest.mark.parametrize(
    "input_config, pipelined",
    [
        (te.InputPipelineConfig.PER_HOST_V1, False),
        (te.InputPipelineConfig.PER_HOST_V2, False),
        (te.InputPipelineConfig.PER_HOST_V2, True),
    ],
    ids=["v1", "v2", "v2-pipelined"],
)
def test_features_only_input_trains_evaluates_and_predicts_as_features_and_labels(tmp_path, input_config, pipelined):
    features_only = estimator(tmp_path / "features_only", model_fn_without_labels, 2, input_config, pipelined)
    with_labels = estimator(tmp_path / "with_labels", model_fn_with_labels, 2, input_config, pipelined)
    features_only.train(_features_only_input_fn, max_steps=3)
    with_labels.train(_dense_input_fn, max_steps=3)
    _assert_same_values(_values(features_only), _values(with_labels))
    assert not np.allclose(features_only.get_variable_value("t2"), 0.2)
    np.testing.assert_allclose(
        features_only.evaluate(_features_only_input_fn, steps=2)["mse"],
        with_labels.evaluate(_dense_input_fn, steps=2)["mse"],
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        _predictions(features_only, _features_only_predict_input_fn),
        _predictions(with_labels, _dense_predict_input_fn),
        rtol=1e-6,
    )
