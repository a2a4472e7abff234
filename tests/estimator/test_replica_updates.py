"""Replicas other than 0 build no optimizer update (it would never run: only replica 0's `train_op` does).

Their `CrossShardOptimizer.apply_gradients` builds the gradient sums and returns a no-op; the variables replica 0's
update created (slots) are theirs too, so the variables created after it still pair up, and `get_slot` works.
"""

import numpy as np
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import models
from tpu_estimator.replicas import replication

DEVICES = ["/device:CPU:0", "/device:CPU:0"]


def _build(replica_id):
    x = tf.constant([[1.0, 2.0]])
    w = tf.compat.v1.get_variable("w", initializer=tf.ones([2, 1]))
    loss = tf.reduce_sum(tf.matmul(x, w))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(0.1))
    train_op = optimizer.minimize(loss)
    after = tf.compat.v1.get_variable("after", initializer=tf.zeros([3]))  # Created after the update.
    return train_op, w, after, optimizer.get_slot(w, "m"), optimizer.get_slot_names()


def test_replicas_after_the_first_build_no_update():
    with tf.Graph().as_default() as graph:
        built = replication.build_replicas(_build, DEVICES)
        (op0, w0, after0, m0, names0), (op1, w1, after1, m1, names1) = built.outputs
        types = [op.type for op in graph.get_operations() if op.name.startswith("replica_1/")]
    assert op1.type == "NoOp" and not op1.control_inputs and op0.control_inputs  # Replica 0's update groups its ops.
    assert "ResourceApplyAdam" not in types and "AddN" in types  # The gradient sum is built.
    assert w1 is w0 and after1 is after0
    assert m1 is m0 and m0 is not None and names1 == names0 == ["m", "v"]


def test_training_on_two_shards_is_unchanged(tmp_path):
    """Two replicas train as one on the global batch (the model's numbers are those of the NumPy reference)."""
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=2))
    estimator = te.TPUEstimator(model_fn=models.make_model_fn(), config=config, train_batch_size=16)
    estimator.train(models.dataset_input_fn, max_steps=2)
    reader = tf.train.load_checkpoint(str(tmp_path))
    assert reader.get_tensor("global_step") == 2
    variables = {name: reader.get_tensor(name) for name in ("dense/kernel", "dense/bias", "dense_1/kernel")}
    assert all(np.all(np.isfinite(v)) for v in variables.values())
    # One SGD step per global batch: replica 1's update never ran, replica 0's did once per step.
    single = te.TPUEstimator(
        model_fn=models.make_model_fn(),
        config=te.RunConfig(
            model_dir=str(tmp_path / "one"), tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=1)
        ),
        train_batch_size=16,
    )
    single.train(models.dataset_input_fn, max_steps=2)
    one = tf.train.load_checkpoint(str(tmp_path / "one"))
    for name, value in variables.items():
        np.testing.assert_allclose(value, one.get_tensor(name), rtol=1e-5, atol=1e-6, err_msg=name)
