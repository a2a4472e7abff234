"""What one graph builds once and reuses (issue 21 item 4): the lookup's rows in the update of the same ids, the
shards' initial values' constants, the reads a checkpoint saves.

Each reuse leaves the values as they were; these tests pin the op counts and the values.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

from embedding import config, optimizers
from embedding.engine import EmbeddingEngine
from embedding.sharded_table import ShardedTable

VOCAB, DIM = 10, 3
GRAPH_CPUS = ["/cpu:0", "/cpu:1"]
IDS = np.array([1, 4, 6, 9], np.int64)  # Ascending, on both 'div' shards (rows 0-4 and 5-9).
GRADS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
FULL = np.random.RandomState(5).normal(size=(VOCAB, DIM)).astype(np.float32)


def _session_config():
    return tf.compat.v1.ConfigProto(device_count={"CPU": 2})


def _table(opt=None):
    tc = config.TableConfig(VOCAB, DIM, initializer=tf.constant_initializer(FULL), name="t")
    return ShardedTable(tc, opt or optimizers.Adagrad(0.1), 2, GRAPH_CPUS, "div")


def _adagrad(params, accum, ids, grads, lr=0.1, steps=1):
    params, accum = params.copy(), accum.copy()
    for _ in range(steps):
        accum[ids] += grads * grads
        params[ids] -= lr * grads / np.sqrt(accum[ids])
    return params, accum


def _op_types(ops) -> "collections.Counter":
    return collections.Counter(op.type for op in ops)


@pytest.fixture
def gather_rule_scatter(monkeypatch):
    """The update path of TF >= 2.20 (gather, the optimizer's rule, scatter) on every TensorFlow version."""
    monkeypatch.setattr(optimizers, "prefer_fused_sparse_apply", lambda: False)


def test_update_of_the_looked_up_ids_uses_the_lookups_rows(gather_rule_scatter):
    with tf.Graph().as_default() as graph:
        table = _table()
        ids = tf.constant(IDS)
        before = len(graph.get_operations())
        rows = table.lookup(ids, sorted_ids=True)
        lookup_ops = graph.get_operations()[before:]
        update = table.apply_gradients(ids, tf.constant(GRADS), sorted_ids=True)
        update_ops = graph.get_operations()[before + len(lookup_ops) :]
        with tf.compat.v1.Session(config=_session_config()) as sess:
            sess.run(table.initializer)
            looked_up, _ = sess.run([rows, update])
            params, accum = sess.run([table.read_full_table(), table.read_full_slot("accumulators")])
    assert _op_types(lookup_ops)["ResourceGather"] == 2  # One per shard.
    assert _op_types(update_ops)["ResourceGather"] == 2  # The accumulators' rows only: the table's are the lookup's.
    np.testing.assert_array_equal(looked_up, FULL[IDS])
    want_params, want_accum = _adagrad(FULL, np.full_like(FULL, 0.1), IDS, GRADS)
    np.testing.assert_allclose(params, want_params, rtol=1e-6)
    np.testing.assert_allclose(accum, want_accum, rtol=1e-6)


def test_a_second_update_of_the_same_ids_reads_what_the_first_wrote(gather_rule_scatter):
    with tf.Graph().as_default() as graph:
        table = _table()
        ids = tf.constant(IDS)
        table.lookup(ids, sorted_ids=True)
        first = table.apply_gradients(ids, tf.constant(GRADS), sorted_ids=True)
        before = len(graph.get_operations())
        with tf.control_dependencies([first]):
            second = table.apply_gradients(ids, tf.constant(GRADS), sorted_ids=True)
        second_ops = graph.get_operations()[before:]
        with tf.compat.v1.Session(config=_session_config()) as sess:
            sess.run(table.initializer)
            sess.run(second)
            params = sess.run(table.read_full_table())
    assert _op_types(second_ops)["ResourceGather"] == 4  # Its own reads of the table and the accumulators.
    want, _ = _adagrad(FULL, np.full_like(FULL, 0.1), IDS, GRADS, steps=2)
    np.testing.assert_allclose(params, want, rtol=1e-6)


def test_functions_read_the_rows_again(gather_rule_scatter):
    """In a `tf.function`, automatic control dependencies order the update's reads after any write in between."""
    table = _table()

    @tf.function
    def step(ids, grads):
        table.lookup(ids, sorted_ids=True)
        table.apply_gradients(ids, grads, sorted_ids=True)

    graph = step.get_concrete_function(tf.constant(IDS), tf.constant(GRADS)).graph
    assert _op_types(graph.get_operations())["ResourceGather"] == 2 + 4


def test_shard_initial_values_share_their_constants():
    """Every shard of every table: one random op each; the shape, stddev and accumulator value once per graph."""
    tables = 4
    with tf.Graph().as_default() as graph:
        feature_config = [config.FeatureConfig(config.TableConfig(20, 4, name=f"t{i}")) for i in range(tables)]
        engine = EmbeddingEngine(feature_config, optimizers.Adagrad(0.1), num_shards=2, devices=GRAPH_CPUS)
        ops = graph.get_operations()
        types = _op_types(ops)
        assert types["TruncatedNormal"] == tables * 2
        assert types["Fill"] == tables * 2
        assert types["PlaceholderWithDefault"] == 1  # The accumulators' initial value, not folded into a Const.
        random_inputs = {op.inputs[0].op.name for op in ops if op.type == "TruncatedNormal"}
        assert len(random_inputs) == 1  # All shards are [10, 4]: one shape constant.
        # Built beside the variables, not inside them: no colocation attribute on the initial values' ops.
        assert not any("_class" in op.node_def.attr for op in ops if op.type in ("TruncatedNormal", "Fill"))
        with tf.compat.v1.Session(config=_session_config()) as sess:
            sess.run(engine.initializer)
            values = sess.run(
                {n: (t.read_full_table(), t.read_full_slot("accumulators")) for n, t in engine.tables.items()}
            )
    for table, accum in values.values():
        assert np.all(np.abs(table) <= 2 * 0.5 + 1e-6)  # Truncated at two stddevs (1 / sqrt(4)).
        assert np.std(table) > 0.1
        np.testing.assert_array_equal(accum, np.float32(0.1))


def test_the_saver_and_the_finite_check_share_the_reads_of_the_shards():
    """A saveable's tensor is built once per graph: whoever asks first, the Saver saves that same read."""
    with tf.Graph().as_default() as graph:
        table = _table()
        specs = [spec for saveable in table.saveables() for spec in saveable.specs]
        first = [spec.tensor for spec in specs]
        assert [spec.tensor for spec in specs] == first
        before = _op_types(graph.get_operations())
        saver = tf.compat.v1.train.Saver(var_list=table.saveables())
        added = _op_types(graph.get_operations()) - before
        assert added["DisableCopyOnRead"] == 0 and added["ReadVariableOp"] == 0
        save_inputs = {t.name for op in graph.get_operations() if op.type == "SaveV2" for t in op.inputs}
        assert {t.name for t in first} <= save_inputs
        del saver
    assert len(first) == 2 * 2  # Table and accumulators, one slice per shard.


def test_dense_features_share_their_rows_and_need_no_gains():
    """Dense ids hold one id per row: the gains of 'mean' and 'sqrtn' are exactly 1 (no bincount, gather or divide),
    and the features of one size share one rows `Range`; the activations are the rows looked up."""
    with tf.Graph().as_default() as graph:
        feature_config = {
            f"f{i}": config.FeatureConfig(config.TableConfig(VOCAB, DIM, name=f"t{i}", combiner=combiner))
            for i, combiner in enumerate(["mean", "sqrtn", "sum"])
        }
        engine = EmbeddingEngine(feature_config, optimizers.SGD(0.1), num_shards=2, devices=GRAPH_CPUS)
        features = {key: tf.constant(IDS[:, None]) for key in feature_config}
        batches = engine.preprocess(features)
        types = _op_types(graph.get_operations())
        activations = engine.activations(batches)
        tables = {name: table.read_full_table() for name, table in engine.tables.items()}
        with tf.compat.v1.Session(config=_session_config()) as sess:
            sess.run(engine.initializer)
            got, full = sess.run([activations, tables])
    assert types["DenseBincount"] == 0 and types["Range"] == 1
    for i, key in enumerate(feature_config):
        np.testing.assert_array_equal(got[key], full[f"t{i}"][IDS])
