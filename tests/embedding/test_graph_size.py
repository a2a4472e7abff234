"""The TRAIN graph of the engine grows linearly with the number of tables and of shards (no per-table x per-table
edges, one check for all tables).

Every table update must wait for the finiteness checks of ALL tables (a NaN in one table's gradient leaves every
table unchanged). Making each op of each table's update depend on each check directly gives tables^2 control
inputs; the engine funnels the checks through one gate op instead. These tests build the same model with T, 2T
and 4T tables, 2 shards each, and compare the graph's node and control-input counts.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

from embedding import config, optimizers
from embedding.engine import EmbeddingEngine

BATCH = 4
TABLES = 6


def _counts(graph: tf.Graph, since: int = 0) -> tuple:
    """(nodes added after the first `since`, control inputs) of `graph`."""
    graph_def = graph.as_graph_def()
    control = sum(1 for node in graph_def.node for name in node.input if name.startswith("^"))
    return len(graph_def.node) - since, control


def _train_step_counts(num_tables: int, vocab: int, optimizer, num_shards: int, devices: list) -> tuple:
    """(nodes, control inputs) of a graph holding one engine TRAIN step over `num_tables` tables of `vocab` rows."""
    graph = tf.Graph()
    with graph.as_default():
        feature_config = {
            f"f{i:02d}": config.FeatureConfig(config.TableConfig(vocab, 4, name=f"t{i:02d}")) for i in range(num_tables)
        }
        engine = EmbeddingEngine(feature_config, optimizer, num_shards=num_shards, devices=devices)
        ids = np.arange(BATCH * 3, dtype=np.int64).reshape(BATCH, 3) % vocab
        features = {key: tf.ragged.constant(ids.tolist(), dtype=tf.int64) for key in feature_config}
        batches = engine.preprocess(features)
        activations = engine.activations(batches)
        loss = tf.add_n([tf.reduce_sum(tf.square(a)) for a in tf.nest.flatten(activations)])
        grads = tf.gradients(loss, tf.nest.flatten(activations))
        engine.apply_gradients(batches, tf.nest.pack_sequence_as(activations, grads))
    return _counts(graph)


def _train_graph_counts(num_tables: int, optimizer) -> tuple:
    """(nodes, control inputs) of one engine TRAIN step over `num_tables` tables on 2 shards."""
    return _train_step_counts(num_tables, 50, optimizer, 2, ["/cpu:0", "/cpu:0"])


def _engine_and_ids(num_tables: int, optimizer) -> tuple:
    """An engine over `num_tables` tables `t0`, `t1`, ... (50 x 4, 2 shards) and ids 1, 7, 30 of each table."""
    feature_config = [config.FeatureConfig(config.TableConfig(50, 4, name=f"t{i}")) for i in range(num_tables)]
    engine = EmbeddingEngine(feature_config, optimizer, num_shards=2)
    return engine, {f"t{i}": tf.constant([1, 7, 30], tf.int64) for i in range(num_tables)}


def _assert_linear(optimizer) -> None:
    (n1, c1), (n2, c2), (n4, c4) = (_train_graph_counts(t, optimizer) for t in (TABLES, 2 * TABLES, 4 * TABLES))
    # Doubling the tables at most doubles the control inputs (plus a little for the shared gate).
    assert c2 <= 2.2 * c1, (c1, c2)
    assert c4 <= 2.2 * c2, (c2, c4)
    # Every added table costs the same number of nodes and control inputs: T more tables cost what T did.
    assert abs((n4 - n2) - 2 * (n2 - n1)) <= 0.05 * (n4 - n2), (n1, n2, n4)
    assert abs((c4 - c2) - 2 * (c2 - c1)) <= 0.05 * (c4 - c2), (c1, c2, c4)


def test_train_graph_is_linear_in_tables_sgd():
    _assert_linear(optimizers.SGD(0.1))


def test_train_graph_is_linear_in_tables_adagrad():
    _assert_linear(optimizers.Adagrad(0.1))


def test_apply_table_gradients_graph_is_linear_in_tables():
    """The entry point of the pipelined path and the mid-level APIs: checks inside, same single gate."""

    def counts(num_tables):
        graph = tf.Graph()
        with graph.as_default():
            engine, ids = _engine_and_ids(num_tables, optimizers.Adagrad(0.1))
            grads = {name: tf.ones([3, 4]) for name in ids}
            before = len(graph.as_graph_def().node)
            engine.apply_table_gradients(ids, grads)
        return _counts(graph, since=before)

    (n1, c1), (n2, c2) = counts(TABLES), counts(2 * TABLES)
    assert c2 <= 2.2 * c1, (c1, c2)
    assert n2 <= 2.2 * n1, (n1, n2)


def test_one_gate_still_holds_every_table_until_every_check_passed():
    """apply_table_gradients in a graph: a NaN gradient of the LAST table leaves the first ones unchanged."""
    with tf.Graph().as_default():
        engine, ids = _engine_and_ids(3, optimizers.SGD(0.5))
        poison = tf.compat.v1.placeholder_with_default(1.0, [])
        grads = {"t0": tf.ones([3, 4]), "t1": tf.ones([3, 4]), "t2": tf.ones([3, 4]) * poison}
        update = engine.apply_table_gradients(ids, grads)
        tables = {name: t.read_full_table() for name, t in engine.tables.items()}
        with tf.compat.v1.Session() as sess:
            sess.run(engine.initializer)
            before = sess.run(tables)
            with pytest.raises(tf.errors.InvalidArgumentError, match="table 't2'"):
                sess.run(update, {poison: np.nan})
            unchanged = sess.run(tables)
            sess.run(update)
            after = sess.run(tables)
    for name in before:
        np.testing.assert_array_equal(unchanged[name], before[name])
        np.testing.assert_allclose(after[name][[1, 7, 30]], before[name][[1, 7, 30]] - 0.5, rtol=1e-6)


def _shard_counts(num_shards: int) -> tuple:
    """(nodes, control inputs) of an engine TRAIN step over TABLES tables on `num_shards` shards."""
    return _train_step_counts(TABLES, 64, optimizers.Adagrad(0.1), num_shards, ["/cpu:0"])


def test_train_graph_is_linear_in_shards():
    """Each added shard costs the same ops (its variables, gather and update per table), nothing per shard pair."""
    (n2, c2), (n4, c4), (n8, c8) = (_shard_counts(s) for s in (2, 4, 8))
    assert n8 - n4 == 2 * (n4 - n2), (n2, n4, n8)
    assert c8 - c4 == 2 * (c4 - c2), (c2, c4, c8)


def _op_types(graph: tf.Graph) -> "collections.Counter":
    """Op types of the graph and of its functions (the branches of v2 conditionals)."""
    graph_def = graph.as_graph_def()
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return collections.Counter(node.op for node in nodes)


def test_one_finiteness_conditional_and_one_id_assert_for_all_tables():
    """The checks of every table meet in one conditional and one assert; the apply reuses the lookup's split."""
    graph = tf.Graph()
    with graph.as_default():
        feature_config = {
            f"f{i:02d}": config.FeatureConfig(config.TableConfig(64, 4, name=f"t{i:02d}")) for i in range(TABLES)
        }
        engine = EmbeddingEngine(feature_config, optimizers.Adagrad(0.1), num_shards=2)
        features = {key: tf.constant([[1], [40], [7], [63]], tf.int64) for key in feature_config}
        batches = engine.preprocess(features)
        activations = engine.activations(batches)
        engine.apply_gradients(batches, {k: tf.ones_like(a) for k, a in activations.items()})
    types = _op_types(graph)
    assert types["Assert"] == 1
    # Two conditionals for all tables: the finiteness check's, and the id-range check's (its report branch builds
    # the message naming the first bad feature only when a check fails).
    assert types["Merge"] + types["If"] + types["StatelessIf"] == 2
    assert types["CheckNumerics"] == TABLES  # Its report branch: one per table, run only when a value is not finite.
    assert types["LowerBound"] == 2 * TABLES  # One shard split per table (start and end searches), not two.
    if optimizers.prefer_fused_sparse_apply():
        assert types["ResourceSparseApplyAdagrad"] == 2 * TABLES  # One fused update per table shard.
    else:
        assert types["ResourceSparseApplyAdagrad"] == 0
        assert types["ResourceScatterUpdate"] == 2 * 2 * TABLES  # Rows and accumulators of each table shard.


def test_the_first_non_finite_table_in_order_is_reported():
    """With the checks in one conditional, the error names the first non-finite table in table order."""
    with tf.Graph().as_default():
        engine, ids = _engine_and_ids(3, optimizers.SGD(0.5))
        nan = tf.compat.v1.placeholder_with_default(1.0, [])
        inf = tf.compat.v1.placeholder_with_default(1.0, [])
        grads = {"t0": tf.ones([3, 4]), "t1": tf.ones([3, 4]) * nan, "t2": tf.ones([3, 4]) * inf}
        update = engine.apply_table_gradients(ids, grads)
        with tf.compat.v1.Session() as sess:
            sess.run(engine.initializer)
            for _ in range(3):  # Always t1 (checked before t2), whatever the scheduling.
                with pytest.raises(tf.errors.InvalidArgumentError, match="table 't1'.*: Tensor had NaN values"):
                    sess.run(update, {nan: np.nan, inf: np.inf})
            with pytest.raises(tf.errors.InvalidArgumentError, match="table 't2'.*: Tensor had Inf values"):
                sess.run(update, {inf: np.inf})


def test_the_gradient_check_reads_gains_of_weighted_features_only():
    """Gains without weights are 1, 1/n or 1/sqrt(n): the per-step check skips them; weighted gains are checked."""
    with tf.Graph().as_default() as graph:
        feature_config = {
            "weighted": config.FeatureConfig(config.TableConfig(20, 4, name="t0", combiner="mean")),
            "plain": config.FeatureConfig(config.TableConfig(20, 4, name="t1", combiner="sqrtn")),
        }
        engine = EmbeddingEngine(feature_config, optimizers.SGD(0.5), num_shards=1)
        ids = tf.sparse.from_dense(tf.constant([[1, 2], [3, 0]], tf.int64))
        weights = tf.SparseTensor(ids.indices, tf.constant([0.5, 2.0, 1.0]), ids.dense_shape)
        batches = engine.preprocess({"weighted": ids, "plain": ids}, weights={"weighted": weights, "plain": None})
        assert batches["t0"].features["weighted"].weighted and not batches["t1"].features["plain"].weighted
        # The flag survives the queue between the infeed and the step (tf.nest flattening).
        flat = tf.nest.flatten(batches, expand_composites=True)
        repacked = tf.nest.pack_sequence_as(batches, flat, expand_composites=True)
        assert repacked["t0"].features["weighted"].weighted and not repacked["t1"].features["plain"].weighted
        activations = engine.activations(batches)
        engine.apply_gradients(batches, {k: tf.ones_like(a) for k, a in activations.items()})
    zero = graph.get_tensor_by_name("embedding_apply_gradients/check_finite_zero:0")
    checked = [op for op in graph.get_operations() if zero in list(op.inputs)]
    # Two activation gradients and the weighted feature's gains: 3 tensors (4 if unweighted gains were checked).
    assert len(checked) == 3, [op.inputs[0].name for op in checked]
    assert any(batches["t0"].features["weighted"].gains.name == op.inputs[0].name for op in checked)
    assert not any(batches["t1"].features["plain"].gains.name == op.inputs[0].name for op in checked)
