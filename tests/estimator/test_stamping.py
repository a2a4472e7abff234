"""Replicas traced once (`tpu_estimator/replicas/stamping.py`): replica 0 is built, the other replicas are copies of its ops.

Oracles: NumPy on each replica's own input; training on 2 shards against 1 shard on the same global batch (with
v1 conds and loops inside `model_fn`, whose copies need their own loop frames); independent random draws.
"""

from typing import Any, Callable, NamedTuple

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import _tf_internal
from tpu_estimator.replicas import stamping

DEVICES = ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
INPUTS = [np.array([[1.0, 2.0]], np.float32), np.array([[-1.0, 0.5]], np.float32), np.array([[3.0, -2.0]], np.float32)]
W = np.array([[0.5, -1.0], [0.25, 2.0]], np.float32)


class _Stamped(NamedTuple):
    output: Any
    num_reductions: int
    to_replica: Callable[[int, Any], Any]


def _stamp_replicas(fn, devices, inputs) -> _Stamped:
    """`fn(0)` built as replica 0, the other replicas copies of its ops."""
    with stamping.building_replica0(devices, inputs) as stamper:
        output = fn(0)
    return _Stamped(output, stamper.num_reductions, stamper.to_replica)


def _session(graph: tf.Graph) -> tf.compat.v1.Session:
    return tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(device_count={"CPU": len(DEVICES)}))


def test_each_replica_computes_on_its_own_input_on_its_own_device():
    calls = []

    def fn(replica_id):
        calls.append(replica_id)
        x = inputs[replica_id]
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(W))
        y = tf.tanh(tf.matmul(x, w))
        loss = tf.reduce_sum(y * y)
        return loss, te.cross_replica_sum(loss)

    with tf.Graph().as_default() as graph:
        inputs = [tf.constant(x) for x in INPUTS]
        built = _stamp_replicas(fn, DEVICES, inputs)
        outputs = [built.output] + [built.to_replica(r, built.output) for r in (1, 2)]
        copies = [op for op in graph.get_operations() if op.name.startswith("replica_2/")]
        with _session(graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = session.run(outputs)
    assert calls == [0] and built.num_reductions == 1
    expected = [float(np.sum(np.tanh(x @ W) ** 2)) for x in INPUTS]
    for (loss, total), own in zip(values, expected):
        np.testing.assert_allclose(loss, own, rtol=1e-6)
        np.testing.assert_allclose(total, sum(expected), rtol=1e-6)
    # Variable reads have no device of their own (they go where the variable is); every other copy is on CPU:2.
    placed = [op for op in copies if op.type != "ReadVariableOp"]
    assert placed and all(op.device == "/device:CPU:2" for op in placed), [(op.name, op.device) for op in copies]
    assert not any(op.type == "VarHandleOp" for op in copies)  # the variable is shared, not copied


def test_copies_are_colocated_with_their_own_replica():
    def fn(replica_id):
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(W))
        a = tf.matmul(inputs[replica_id], w)
        with tf.compat.v1.colocate_with(a):
            b = a * 2.0
        with tf.compat.v1.colocate_with(w.handle):
            c = b + 1.0
        return c

    with tf.Graph().as_default() as graph:
        inputs = [tf.constant(x) for x in INPUTS[:2]]
        built = _stamp_replicas(fn, DEVICES[:2], inputs)
        c1 = built.to_replica(1, built.output)
        b1 = c1.op.inputs[0].op
        a1 = b1.inputs[0].op
        with _session(graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            value = session.run(c1)
    assert a1.name.startswith("replica_1/") and b1.colocation_groups() == [b"loc:@" + a1.name.encode()]
    assert c1.op.colocation_groups() == [b"loc:@w"]  # colocated with the shared variable, as replica 0's is
    np.testing.assert_allclose(value, INPUTS[1] @ W * 2.0 + 1.0, rtol=1e-6)


def test_copies_of_host_computations_stay_on_the_host():
    def fn(replica_id):
        y = inputs[replica_id] * 3.0
        on_host = te.outside_compilation(lambda t: tf.reduce_sum(t, name="host_sum"), y)
        return on_host + 1.0

    with tf.Graph().as_default() as graph:
        inputs = [tf.constant(x) for x in INPUTS[:2]]
        built = _stamp_replicas(fn, ["/device:CPU:1", "/device:CPU:2"], inputs)
        out1 = built.to_replica(1, built.output)
        with _session(graph) as session:
            value = session.run(out1)
        ops = {op.name: op.device for op in graph.get_operations()}
    assert ops["host_sum"] == ops["replica_1/host_sum"] == "/device:CPU:0"
    assert ops["mul"] == "/device:CPU:1" and ops["replica_1/mul"] == ops["replica_1/add"] == "/device:CPU:2"
    np.testing.assert_allclose(value, INPUTS[1].sum() * 3.0 + 1.0, rtol=1e-6)


def test_seeded_random_ops_draw_differently_on_each_replica():
    def fn(replica_id):
        return tf.random.uniform([64], seed=7) + inputs[replica_id]

    with tf.Graph().as_default() as graph:
        tf.compat.v1.set_random_seed(1)
        inputs = [tf.constant(0.0) for _ in DEVICES]
        built = _stamp_replicas(fn, DEVICES, inputs)
        outputs = [built.output] + [built.to_replica(r, built.output) for r in (1, 2)]
        seeds = [op.get_attr("seed2") for op in graph.get_operations() if op.type == "RandomUniform"]
        with _session(graph) as session:
            values = session.run(outputs)
    assert len(set(seeds)) == 3
    assert not np.allclose(values[0], values[1]) and not np.allclose(values[1], values[2])


def _model_fn(features, labels, mode, params):
    """A model whose loss goes through a v1 cond and a v1 loop (the training loop builds TF1 control flow)."""
    w = tf.compat.v1.get_variable("w", [2, 1], initializer=tf.compat.v1.constant_initializer([[0.5], [-0.25]]))
    y = tf.matmul(features, w)
    y = tf.cond(tf.reduce_sum(features) > -1e9, lambda: y * 2.0, lambda: y)  # always the first branch

    def body(i, value):
        return i + 1, value * 0.5 + y

    _, y = tf.compat.v1.while_loop(lambda i, _: i < tf.shape(features)[0] // tf.shape(features)[0] + 2, body, [0, y])
    loss = tf.reduce_mean(tf.square(y - labels))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def _input_fn(params):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(64, 2)).astype(np.float32)
    y = rng.normal(size=(64, 1)).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(params["batch_size"], drop_remainder=True)


def _numpy_training(steps: int, batch: int) -> np.ndarray:
    """SGD of w on mean((f x w - t)^2): the cond doubles xw, the loop runs v <- v/2 + y 3 times from v = y."""
    rng = np.random.RandomState(0)
    x = rng.normal(size=(64, 2)).astype(np.float64)
    t = rng.normal(size=(64, 1)).astype(np.float64)
    w = np.array([[0.5], [-0.25]])
    factor = 2.0 * (1.0 + 0.5 + 0.25 + 0.125)  # y = 2xw; after 3 iterations v = y + y/2 + y/4 + y/8
    for step in range(steps):
        xb, tb = x[step * batch : (step + 1) * batch], t[step * batch : (step + 1) * batch]
        out = factor * xb @ w
        grad = xb.T @ (2.0 * (out - tb) * factor) / batch
        w = w - 0.1 * grad
    return w


@pytest.mark.parametrize("num_shards", [1, 2])
def test_training_through_v1_cond_and_loop_matches_numpy(tmp_path, num_shards):
    config = te.RunConfig(
        model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=3, num_shards=num_shards)
    )
    estimator = te.TPUEstimator(model_fn=_model_fn, config=config, train_batch_size=8)
    estimator.train(_input_fn, max_steps=3)
    w = tf.train.load_checkpoint(str(tmp_path)).get_tensor("w")
    np.testing.assert_allclose(w, _numpy_training(3, 8), rtol=1e-5, atol=1e-6)


def test_copied_loops_run_in_frames_of_their_own():
    def fn(replica_id):
        _, total = tf.compat.v1.while_loop(lambda i, _: i < 3, lambda i, v: (i + 1, v + inputs[replica_id]), [0, 0.0])
        return total

    with tf.Graph().as_default() as graph, _tf_internal.v1_control_flow():
        inputs = [tf.constant(float(r + 1)) for r in range(2)]
        built = _stamp_replicas(fn, DEVICES[:2], inputs)
        outputs = [built.output, built.to_replica(1, built.output)]
        frames = {op.get_attr("frame_name") for op in graph.get_operations() if op.type == "Enter"}
        with _session(graph) as session:
            values = session.run(outputs)
    assert len(frames) == 2 and any(f.startswith(b"replica_1/") for f in frames)
    assert values == [3.0, 6.0]


def test_the_gradient_sums_of_one_update_cost_one_import_per_replica(imports):
    def fn(replica_id):
        x = inputs[replica_id]
        weights = [tf.compat.v1.get_variable("w%d" % i, initializer=tf.constant(W)) for i in range(10)]
        loss = tf.add_n([tf.reduce_sum(tf.matmul(x, w)) for w in weights])
        optimizer = te.CrossShardOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1.0), reduction=tf.compat.v1.losses.Reduction.SUM
        )
        return optimizer.minimize(loss), weights

    with tf.Graph().as_default() as graph:
        inputs = [tf.constant(x) for x in INPUTS]
        built = _stamp_replicas(fn, DEVICES, inputs)
        train_op, weights = built.output
        with _session(graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train_op)
            trained = session.run(weights)
    assert built.num_reductions == 10
    assert sorted(imports) == ["replica_1/", "replica_2/"]  # one import per replica for the 10 sums
    # d(sum(x w))/dw = x^T 1, summed over the replicas' inputs.
    gradient = sum(x.T @ np.ones((1, 2), np.float32) for x in INPUTS)
    for value in trained:
        np.testing.assert_allclose(value, W - gradient, rtol=1e-6)


def test_a_sum_of_a_value_that_needs_an_earlier_sum():
    def fn(replica_id):
        x = tf.reduce_sum(inputs[replica_id])
        first = te.cross_replica_sum(x)
        return first, te.cross_replica_sum(first * x)

    with tf.Graph().as_default() as graph:
        inputs = [tf.constant(x) for x in INPUTS]
        built = _stamp_replicas(fn, DEVICES, inputs)
        outputs = [built.output] + [built.to_replica(r, built.output) for r in (1, 2)]
        with _session(graph) as session:
            values = session.run(outputs)
    sums = [float(x.sum()) for x in INPUTS]
    for first, second in values:
        np.testing.assert_allclose(first, sum(sums), rtol=1e-6)
        np.testing.assert_allclose(second, sum(sums) * sum(sums), rtol=1e-6)


def test_sums_in_the_forward_pass_and_the_gradient_sums_are_built_in_few_imports(imports):
    """A cross-replica mean in the forward pass (as cross-replica batch norm) needs its sum before the gradients'
    values exist: its batch is built first, and the gradient sums of the update still share one import."""

    def fn(replica_id):
        x = inputs[replica_id]
        weights = [tf.compat.v1.get_variable("w%d" % i, initializer=tf.constant(W)) for i in range(6)]
        h = tf.matmul(x, weights[0])
        h = h - te.cross_replica_sum(tf.reduce_sum(h, axis=0)) / 3.0  # the mean over the 3 replicas' rows
        loss = tf.add_n([tf.reduce_sum(tf.matmul(h, w)) for w in weights[1:]])
        optimizer = te.CrossShardOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1.0), reduction=tf.compat.v1.losses.Reduction.SUM
        )
        return optimizer.minimize(loss), weights, loss

    with tf.Graph().as_default() as graph:
        inputs = [tf.constant(x) for x in INPUTS]
        built = _stamp_replicas(fn, DEVICES, inputs)
        train_op, weights, loss = built.output
        losses = [loss] + [built.to_replica(r, loss) for r in (1, 2)]
        with _session(graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            before = session.run(losses)
            session.run(train_op)
            trained = session.run(weights)
    # The forward sum, its gradient's sum in the backward pass, the 6 gradient sums (3 batches), the loss: 4 imports
    # per replica (one per reduction would be 9).
    assert built.num_reductions == 8
    assert len([name for name in imports if name == "replica_1/"]) <= 4, imports
    mean = sum(x @ W for x in INPUTS).sum(axis=0) / 3.0
    centred = [x @ W - mean for x in INPUTS]
    ones = np.ones((1, 2), np.float32)
    for value, h in zip(before, centred):
        np.testing.assert_allclose(value, 5 * float((h @ W).sum()), rtol=1e-5)
    # d loss_total / d w_k (k >= 1) = sum over replicas of h_r^T 1.
    gradient = sum(h.T @ ones for h in centred)
    for value in trained[1:]:
        np.testing.assert_allclose(value, W - gradient, rtol=1e-5, atol=1e-5)


@pytest.fixture
def imports(monkeypatch):
    """The name prefix of each `import_graph_def` call (one per copy made), in call order."""
    calls = []
    real_import = tf.graph_util.import_graph_def

    def counting_import(*args, **kwargs):
        calls.append(kwargs.get("name"))
        return real_import(*args, **kwargs)

    monkeypatch.setattr(tf.graph_util, "import_graph_def", counting_import)
    return calls
