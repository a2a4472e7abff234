"""Shard and loop invariance of training (the same parameters on any shard count and loop length), checkpoints."""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import models


def _sgd_reference(steps, batch=32, lr=0.1):
    """Plain TF2 training of the same model on the global batch: the single-device oracle."""
    w1 = tf.Variable(np.full((5, 4), 0.1, np.float32))
    b1 = tf.Variable(np.zeros(4, np.float32))
    w2 = tf.Variable(np.ones((4, 1), np.float32))
    b2 = tf.Variable(np.zeros(1, np.float32))
    variables = [w1, b1, w2, b2]
    for step in range(steps):
        start = (step * batch) % len(models.X)
        x, y = models.X[start : start + batch], models.Y[start : start + batch]
        with tf.GradientTape() as tape:
            out = tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) + b2
            loss = tf.reduce_mean(tf.square(out - y))
        for var, grad in zip(variables, tape.gradient(loss, variables)):
            var.assign_sub(lr * grad)
    return dict(zip(["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"], [v.numpy() for v in variables]))


@pytest.mark.parametrize(
    "wrapper", [te.CrossShardOptimizer, tf.compat.v1.tpu.CrossShardOptimizer], ids=["ours", "upstream"]
)
@pytest.mark.quick
def test_same_variables_on_1_2_4_shards(tmp_path, wrapper):
    reference = _sgd_reference(10)
    results = {}
    for shards in (1, 2, 4):
        estimator = models.make_estimator(
            tmp_path / str(shards), num_shards=shards, model_fn=models.make_model_fn(wrapper)
        )
        estimator.train(models.dataset_input_fn, max_steps=10)
        results[shards] = models.variables_of(estimator)
        assert results[shards]["global_step"] == 10
    for shards in (1, 2, 4):
        for name, expected in reference.items():
            np.testing.assert_allclose(results[shards][name], expected, atol=1e-5, err_msg=name)
    # The model really moved away from its initial values.
    assert np.abs(results[4]["dense_1/kernel"] - 1.0).max() > 0.05


def test_replicas_are_built_on_their_own_devices(tmp_path):
    record = []
    matmul_devices = {}

    class GraphHook(tf.compat.v1.train.SessionRunHook):
        def begin(self):
            for op in tf.compat.v1.get_default_graph().get_operations():
                if op.type == "MatMul" and "gradients" not in op.name:
                    replica = op.name.split("/")[0] if op.name.startswith("replica_") else "replica_0"
                    matmul_devices.setdefault(replica, set()).add(op.device)

    estimator = models.make_estimator(tmp_path, num_shards=4, model_fn=models.make_model_fn(record=record))
    estimator.train(models.dataset_input_fn, max_steps=4, hooks=[GraphHook()])
    # model_fn is traced once, on replica 0's device; replicas 1-3 are copies of its ops on their own devices.
    assert [(entry[1], entry[2]) for entry in record] == [(8, "/device:CPU:0")]
    assert matmul_devices == {"replica_%d" % i: {"/device:CPU:%d" % i} for i in range(4)}


def test_same_variables_for_iterations_per_loop_1_4_and_time(tmp_path):
    results = {}
    for ipl in (1, 4, "1s"):
        estimator = models.make_estimator(tmp_path / str(ipl), num_shards=2, iterations_per_loop=ipl)
        estimator.train(models.dataset_input_fn, max_steps=10)
        results[ipl] = models.variables_of(estimator)
        assert results[ipl]["global_step"] == 10
    for name in results[1]:
        np.testing.assert_allclose(results[4][name], results[1][name], atol=1e-6, err_msg=name)
        np.testing.assert_allclose(results["1s"][name], results[1][name], atol=1e-6, err_msg=name)


def test_checkpoints_at_loop_boundaries(tmp_path):
    config = te.RunConfig(
        model_dir=str(tmp_path),
        save_checkpoints_steps=4,
        keep_checkpoint_max=10,
        tpu_config=te.TPUConfig(iterations_per_loop=4, num_shards=2),
    )
    estimator = te.TPUEstimator(model_fn=models.make_model_fn(), config=config, train_batch_size=32)
    estimator.train(models.dataset_input_fn, max_steps=10)
    state = tf.train.get_checkpoint_state(str(tmp_path))
    steps = sorted(int(path.rsplit("-", 1)[1]) for path in state.all_model_checkpoint_paths)
    assert [s for s in steps if s > 0] == [4, 8, 10]
    # train(steps=) continues from the checkpoint and stops exactly.
    estimator.train(models.dataset_input_fn, steps=3)
    assert estimator.get_variable_value("global_step") == 13


class _XlaMarksHook(tf.compat.v1.train.SessionRunHook):
    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        self.marked = [
            op.name for op in graph.get_operations() if op.node_def.attr["_XlaCompile"].b and op.type == "MatMul"
        ]


def test_xla_compiled_shards_agree_with_plain_runs(tmp_path):
    hook = _XlaMarksHook()
    results = {}
    for xla in (False, True):
        config = te.RunConfig(
            model_dir=str(tmp_path / str(xla)),
            xla_compile_shards=xla,
            tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=2),
        )
        estimator = te.TPUEstimator(model_fn=models.make_model_fn(), config=config, train_batch_size=32)
        estimator.train(models.dataset_input_fn, max_steps=4, hooks=[hook] if xla else None)
        results[xla] = models.variables_of(estimator)
    assert len(hook.marked) >= 4  # forward and gradient matmuls of both replicas are compiled
    for name in results[False]:
        np.testing.assert_allclose(results[True][name], results[False][name], rtol=1e-5, atol=1e-6)
