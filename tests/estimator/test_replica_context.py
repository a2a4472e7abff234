"""The replica-coordinator protocol: every way of building replicas implements it, and `cross_replica_sum` and
`CrossShardOptimizer` reach the other replicas only through it (`replica_context.py`)."""

import contextlib
import inspect

import numpy as np
import pytest
import tensorflow as tf

from tpu_estimator.replicas import replication, stamping
from tpu_estimator.replicas.replica_context import ReplicaContext, ReplicaCoordinator, current_replica_context


@pytest.mark.parametrize("coordinator", [replication.ThreadedCoordinator, stamping.StampingCoordinator])
def test_every_coordinator_implements_the_protocol(coordinator):
    assert issubclass(coordinator, ReplicaCoordinator)
    assert not inspect.isabstract(coordinator)


class RecordingCoordinator(ReplicaCoordinator):
    """A coordinator of its own: each reduction sums the caller's value with fixed values of the other replicas."""

    def __init__(self, others):
        self.devices = ["/device:CPU:0"] * (1 + len(others))
        self.num_replicas = len(self.devices)
        self.others = others
        self.calls = []

    def reduce(self, replica_id, value, merge_fn):
        self.calls.append(("reduce", replica_id))
        values = [None] * self.num_replicas
        values[replica_id] = value
        rest = iter(self.others)
        for r in range(self.num_replicas):
            if values[r] is None:
                values[r] = tf.constant(next(rest), value.dtype, shape=value.shape)
        return merge_fn(values)[replica_id]

    @contextlib.contextmanager
    def building_update(self, optimizer):
        self.calls.append(("building_update", type(optimizer).__name__))
        yield

    def skip_update(self, replica_id):
        self.calls.append(("skip_update", replica_id))
        return self.optimizer_of_replica0


def _minimize_in(context, optimizer):
    with replication.building_replica(context):
        assert current_replica_context() is context
        var = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]), use_resource=True)
        loss = tf.reduce_sum(var * tf.constant([3.0, 4.0]))
        train_op = optimizer.minimize(loss)
    assert current_replica_context() is None
    return var, train_op


def test_cross_shard_optimizer_reduces_and_updates_through_the_coordinator():
    with tf.Graph().as_default():
        coordinator = RecordingCoordinator(others=[10.0])
        context = ReplicaContext(0, 2, "/device:CPU:0", coordinator)
        sgd = tf.compat.v1.train.GradientDescentOptimizer(0.5)
        var, train_op = _minimize_in(context, replication.CrossShardOptimizer(sgd))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train_op)
            value = session.run(var)
    # MEAN over 2 replicas: this replica's gradient [3, 4] / 2 plus the other's 10 per element.
    np.testing.assert_allclose(value, np.array([1.0, 2.0]) - 0.5 * (np.array([1.5, 2.0]) + 10.0))
    assert coordinator.calls == [("reduce", 0), ("building_update", "GradientDescentOptimizer")]


def test_replicas_other_than_0_skip_their_update_through_the_coordinator():
    with tf.Graph().as_default():
        coordinator = RecordingCoordinator(others=[0.0])
        coordinator.optimizer_of_replica0 = tf.compat.v1.train.AdamOptimizer(0.1)
        context = ReplicaContext(1, 2, "/device:CPU:0", coordinator)
        optimizer = replication.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(0.1))
        _, train_op = _minimize_in(context, optimizer)
        assert train_op.type == "NoOp"
        assert optimizer.get_slot_names() == coordinator.optimizer_of_replica0.get_slot_names()
    assert coordinator.calls == [("reduce", 1), ("skip_update", 1)]


def test_replicas_traced_once_never_skip_an_update():
    with tf.Graph().as_default():
        stamper = stamping.StampingCoordinator(tf.compat.v1.get_default_graph(), ["/device:CPU:0"] * 2, [[], []])
        with pytest.raises(RuntimeError, match="Replica 1 was built by calling model_fn"):
            stamper.skip_update(1)
