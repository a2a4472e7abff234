"""PER_HOST_V1 hands the embedding inputs of a host batch unsplit to the host's replicas (`WholeHostBatch`): the
embedding host stage joins a host's ids anyway, so splitting them and concatenating them again was wasted work (a
`SparseSplit` and a `SparseConcat` per sparse feature per step). The other features are still split."""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import experimental
from tpu_estimator.embedding_stage import embedding_bridge
from tpu_estimator.inputs.input_pipeline import WholeHostBatch

ROWS, DIM, BATCH = 10, 2, 8


def _input_fn(params):
    ids = np.arange(16, dtype=np.int64) % ROWS
    dense = np.linspace(0.0, 1.0, 16, dtype=np.float32).reshape(16, 1)
    labels = np.linspace(-1.0, 1.0, 16, dtype=np.float32)

    def to_features(i, x, y):
        sparse = tf.SparseTensor(tf.zeros([1, 1], tf.int64), tf.reshape(i, [1]), [1])
        return {"ids": sparse, "x": x}, y

    dataset = tf.data.Dataset.from_tensor_slices((ids, dense, labels)).map(to_features)
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def _model_fn(features, labels, mode, params):
    column = _column()
    net = tf.concat([tf.compat.v1.keras.layers.DenseFeatures([column])(features), features["x"]], axis=1)
    prediction = tf.squeeze(tf.compat.v1.layers.dense(net, 1, kernel_initializer=tf.ones_initializer()), 1)
    loss = tf.reduce_mean(tf.square(prediction - labels))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def _column():
    return tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("ids", ROWS),
        DIM,
        combiner="sum",
        initializer=tf.compat.v1.constant_initializer(0.1),
    )


class _OpTypes(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.types = []

    def after_create_session(self, session, coord):
        self.types = [op.type for op in session.graph.get_operations()]


def _train(model_dir, shards):
    column = _column()
    estimator = te.TPUEstimator(
        model_fn=_model_fn,
        config=te.RunConfig(
            model_dir=str(model_dir), tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=shards)
        ),
        train_batch_size=BATCH,
        embedding_config_spec=experimental.EmbeddingConfigSpec(
            feature_columns=[column], optimization_parameters=experimental.StochasticGradientDescentParameters(0.1)
        ),
    )
    ops = _OpTypes()
    estimator.train(_input_fn, max_steps=4, hooks=[ops])
    names = [n for n in estimator.get_variable_names() if "dummy" not in n and "global_step" not in n]
    return ops.types, {n: estimator.get_variable_value(n) for n in names}


def test_two_shards_read_the_ids_unsplit_and_train_as_one_shard(tmp_path):
    one_types, one = _train(tmp_path / "one", 1)
    two_types, two = _train(tmp_path / "two", 2)
    assert "SparseSplit" not in two_types and "SparseConcat" not in two_types
    assert two_types.count("Split") + two_types.count("SplitV") > one_types.count("Split") + one_types.count("SplitV")
    assert sorted(one) == sorted(two)
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_join_reads_a_whole_host_batch_once_and_refuses_two():
    with tf.Graph().as_default():
        batch = tf.constant([1, 2, 3, 4])
        whole = WholeHostBatch(batch)
        assert embedding_bridge._join_replicas([whole, whole]) is batch
        with pytest.raises(ValueError, match="different host batches"):
            embedding_bridge._join_replicas([whole, WholeHostBatch(batch)])
