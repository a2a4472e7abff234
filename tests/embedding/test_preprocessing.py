"""Tests of embedding/preprocessing.py against a pure-NumPy reference, in eager, tf.function and TF1 graphs."""

import collections

import hypothesis
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import strategies as st

from embedding import combiners
from embedding import preprocessing as pp
from tests.helpers.duck_configs import Feature, Table

SETTINGS = hypothesis.settings(max_examples=30, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------------------
# NumPy reference.


def ref_feature(rows, combiner, seq_len):
    """rows: list over output rows of [(id, weight)]. Returns {(segment, id): gain}."""
    out = collections.defaultdict(float)
    for r, entries in enumerate(rows):
        if seq_len:
            for p, (i, w) in enumerate(entries[:seq_len]):
                out[(r * seq_len + p, i)] += w
            continue
        w = np.array([w for _, w in entries], np.float64)
        denom = {"sum": 1.0, "mean": w.sum(), "sqrtn": np.sqrt((w * w).sum())}[combiner]
        for i, wi in entries:
            out[(r, i)] += 0.0 if denom == 0 else wi / denom
    return dict(out)


def ref_unique(per_feature_rows, seq_lens):
    ids = set()
    for rows, seq_len in zip(per_feature_rows, seq_lens):
        for entries in rows:
            ids.update(i for i, _ in (entries[:seq_len] if seq_len else entries))
    return sorted(ids)


def got_feature(batch, seg):
    unique = batch.unique_ids.numpy()
    keys = list(zip(seg.segment_ids.numpy().tolist(), unique[seg.unique_index.numpy()].tolist()))
    got = collections.defaultdict(float)  # Duplicate (row, id) entries add up.
    for k, g in zip(keys, seg.gains.numpy().tolist()):
        got[k] += g
    return dict(got)


def assert_gains_equal(got, expected):
    assert set(got) == set(expected)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-6, err_msg=str(k))


# ------------------------------------------------------------------------------------------------------
# Random inputs.


@st.composite
def feature_sets(draw):
    """A config with 1-2 tables and 1-4 features (shared tables), with matching random inputs."""
    num_tables = draw(st.integers(1, 2))
    tables = [
        Table(
            draw(st.integers(1, 40)),
            combiner=draw(st.sampled_from(["sum", "mean", "sqrtn"])),
            name=draw(st.sampled_from([None, f"named_{t}"])),
        )
        for t in range(num_tables)
    ]
    num_features = draw(st.integers(1, 4))
    config, inputs, weights, reference = {}, {}, {}, {}
    for f in range(num_features):
        table = tables[draw(st.integers(0, num_tables - 1))]
        kind = draw(st.sampled_from(["ragged", "sparse", "sparse3", "dense"]))
        seq_len = 0 if kind == "sparse3" else draw(st.sampled_from([0, 0, 1, 3]))
        batch = draw(st.integers(0, 5))
        inner = 2 if kind == "sparse3" else 1  # rank-3 sparse: [batch, inner, positions].
        weighted = kind != "dense" and draw(st.booleans())
        # Dense ids: [batch, 1] (one id per row), or [batch, width] full sequences for sequence features.
        dense_width = (draw(st.integers(1, 4)) if seq_len else 1) if kind == "dense" else None
        lists = [
            [
                (
                    draw(st.integers(0, table.vocabulary_size - 1)),
                    draw(st.sampled_from([0.0, 0.5, 1.0, 2.5])) if weighted else 1.0,
                )
                for _ in range(dense_width or draw(st.integers(0, 4)))
            ]
            for _ in range(batch * inner)
        ]
        key = f"f{f}"
        config[key] = Feature(table, max_sequence_length=seq_len)
        reference[key] = (lists, seq_len, batch)
        if kind == "dense":
            ids = tf.constant([[i for i, _ in r] for r in lists], tf.int32, shape=[batch, dense_width])
            w = None
        elif kind == "ragged":
            splits = np.cumsum([0] + [len(r) for r in lists])
            ids = tf.RaggedTensor.from_row_splits(
                tf.constant([i for r in lists for i, _ in r], tf.int64), tf.constant(splits, tf.int64)
            )
            w = tf.RaggedTensor.from_row_splits(
                tf.constant([w for r in lists for _, w in r], tf.float32), tf.constant(splits, tf.int64)
            )
        else:
            idx = [
                ([n // inner, n % inner] if inner > 1 else [n]) + [p]
                for n, r in enumerate(lists)
                for p in range(len(r))
            ]
            perm = draw(st.permutations(range(len(idx))))  # Unordered indices are fine.
            idx = np.array([idx[p] for p in perm], np.int64).reshape(-1, 3 if inner > 1 else 2)
            vals = [e for r in lists for e in r]
            vals = [vals[p] for p in perm]
            width = max([len(r) for r in lists] + [1])
            shape = [batch, inner, width] if inner > 1 else [batch, width]
            ids = tf.SparseTensor(idx, tf.constant([i for i, _ in vals], tf.int32), shape)
            w = tf.SparseTensor(idx, tf.constant([x for _, x in vals], tf.float64), shape)
        inputs[key] = ids
        weights[key] = w if weighted else None
    return config, inputs, weights, reference


@SETTINGS
@hypothesis.given(feature_sets())
def test_random_ragged_and_sparse_inputs_match_numpy_reference(case):
    config, inputs, weights, reference = case
    result = pp.preprocess_features(inputs, config, weights)
    names = pp.table_names(config)
    assert list(result) == list(names)
    for table_name, batch in result.items():
        table = names[table_name]
        keys = [k for k in sorted(config) if config[k].table is table]
        assert list(batch.features) == keys
        expected_unique = ref_unique([reference[k][0] for k in keys], [reference[k][1] for k in keys])
        np.testing.assert_array_equal(batch.unique_ids.numpy(), expected_unique)
        assert batch.unique_ids.dtype == tf.int64
        for k in keys:
            lists, seq_len, b = reference[k]
            seg = batch.features[k]
            assert seg.unique_index.dtype == tf.int32 and seg.segment_ids.dtype == tf.int32
            assert seg.gains.dtype == tf.float32
            expected_gains = ref_feature(lists, table.combiner, seq_len)
            assert_gains_equal(got_feature(batch, seg), expected_gains)
            assert seg.sorted_segments == (not isinstance(inputs[k], tf.SparseTensor))
            if seg.sorted_segments:
                assert (np.diff(seg.segment_ids.numpy()) >= 0).all()
            # Combining the unique rows gives what the reference gains say.
            values = np.random.RandomState(0).normal(size=(table.vocabulary_size, 2)).astype(np.float32)
            acts = combiners.combine(tf.gather(values, batch.unique_ids), seg).numpy().reshape(-1, 2)
            expected = np.zeros((int(seg.num_segments), 2))
            for (r, i), g in expected_gains.items():
                expected[r] += g * values[i]
            np.testing.assert_allclose(acts, expected, rtol=1e-5, atol=1e-5)
            if seq_len:
                assert seg.output_shape == [b, seq_len] and int(seg.num_segments) == b * seq_len
            elif inputs[k].shape.rank == 3:
                assert seg.output_shape == [b, 2] and int(seg.num_segments) == b * 2
            else:
                assert seg.output_shape == [b] and int(seg.num_segments) == b


# ------------------------------------------------------------------------------------------------------
# Partitioning.


@SETTINGS
@hypothesis.given(st.integers(1, 300), st.integers(1, 12), st.sampled_from(["div", "mod"]))
def test_partition_round_trip(vocab, num_shards, strategy):
    ids = tf.range(vocab, dtype=tf.int64)
    shard, local = pp.partition_ids(ids, num_shards, vocab, strategy)
    sizes = pp.shard_sizes(vocab, num_shards, strategy)
    assert sum(sizes) == vocab and shard.dtype == tf.int32 and local.dtype == tf.int64
    shard, local = shard.numpy(), local.numpy()
    assert ((shard >= 0) & (shard < num_shards)).all()
    assert (local >= 0).all() and (local < np.array(sizes)[shard]).all()
    np.testing.assert_array_equal(
        pp.unpartition_ids(shard, local, num_shards, vocab, strategy).numpy(), np.arange(vocab)
    )
    if strategy == "div":
        assert (np.diff(shard) >= 0).all()  # Contiguous ranges.
        assert sizes == [len(a) for a in np.array_split(np.arange(vocab), num_shards)]
    else:
        np.testing.assert_array_equal(shard, np.arange(vocab) % num_shards)
        np.testing.assert_array_equal(local, np.arange(vocab) // num_shards)


@pytest.mark.parametrize("strategy", ["div", "mod"])
def test_partition_agrees_with_tf_embedding_lookup(strategy):
    """TF's own partitioned embedding_lookup is the oracle for both strategies."""
    vocab, num_shards = 23, 4
    sizes = pp.shard_sizes(vocab, num_shards, strategy)
    shards = [
        tf.cast(
            pp.unpartition_ids(tf.fill([n], s), tf.range(n, dtype=tf.int64), num_shards, vocab, strategy), tf.float32
        )[:, None]
        for s, n in enumerate(sizes)
    ]
    ids = tf.range(vocab, dtype=tf.int64)
    got = tf.compat.v1.nn.embedding_lookup(shards, ids, partition_strategy=strategy)
    np.testing.assert_array_equal(got.numpy()[:, 0], np.arange(vocab))


def test_partition_more_shards_than_rows_and_bad_args():
    shard, local = pp.partition_ids(tf.constant([0, 1, 2], tf.int64), 5, 3, "div")
    np.testing.assert_array_equal(shard, [0, 1, 2])
    np.testing.assert_array_equal(local, [0, 0, 0])
    assert pp.shard_sizes(3, 5, "div") == [1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="strategy"):
        pp.partition_ids(tf.constant([0]), 2, 3, "range")
    with pytest.raises(ValueError, match="num_shards"):
        pp.partition_ids(tf.constant([0]), 0, 3, "mod")
    with pytest.raises(ValueError, match="vocabulary_size"):
        pp.partition_ids(tf.constant([0]), 2, None, "div")


# ------------------------------------------------------------------------------------------------------
# CSR export.


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_partitioned_csr(strategy):
    table = Table(10, combiner="sum", name="t")
    config = {"a": Feature(table), "b": Feature(table)}
    features = {
        "a": tf.ragged.constant([[3, 3, 8], [1]], tf.int64),
        "b": tf.ragged.constant([[4], [], [9, 2]], tf.int64),
    }
    (batch,) = pp.preprocess_features(features, config).values()
    csr = pp.to_partitioned_csr(batch, num_shards=2, strategy=strategy)
    # Samples: a rows 0-1, b rows 2-4. Entries (sample, token, gain):
    entries = [(0, 3, 2.0), (0, 8, 1.0), (1, 1, 1.0), (2, 4, 1.0), (4, 9, 1.0), (4, 2, 1.0)]
    shard_of = (lambda i: i % 2) if strategy == "mod" else (lambda i: 0 if i < 5 else 1)
    expected = sorted(entries, key=lambda e: (shard_of(e[1]), e[0], e[1]))
    assert int(csr.sample_count) == 5 and int(csr.num_minibatches_per_physical_sparse_core) == 1
    np.testing.assert_array_equal(csr.sorted_sample_ids, [e[0] for e in expected])
    np.testing.assert_array_equal(csr.sorted_token_ids, [e[1] for e in expected])
    np.testing.assert_allclose(csr.sorted_gains, [e[2] for e in expected])
    pointers = csr.row_pointers.numpy()
    assert pointers.shape == (2 * 5 + 1,) and pointers[0] == 0 and pointers[-1] == len(entries)
    for s in range(2):
        for b in range(5):
            chunk = expected[pointers[s * 5 + b] : pointers[s * 5 + b + 1]]
            assert all(e[0] == b and shard_of(e[1]) == s for e in chunk)


# ------------------------------------------------------------------------------------------------------
# Structure, names, shapes.


def test_feature_paths_follow_tf_nest_order_and_table_names():
    t1, t2 = Table(5), Table(6, name="items")
    config = {"z": Feature(t1), "a": [Feature(t2), Feature(t1)], "m": {"q": Feature(t2)}}
    paths = pp.feature_paths(config)
    assert [k for k, _ in paths] == ["a/0", "a/1", "m/q", "z"]
    assert [f for _, f in paths] == tf.nest.flatten(config)
    assert list(pp.table_names(config)) == ["items", "table_1"]
    assert pp.feature_paths(Feature(t1, name="solo"))[0][0] == "solo"
    with pytest.raises(ValueError, match="Multiple tables with name 'x'"):
        pp.table_names([Feature(Table(3, name="x")), Feature(Table(3, name="x"))])


def test_single_feature_and_list_config():
    table = Table(5, combiner="sum")
    (batch,) = pp.preprocess_features(tf.constant([1, 1, 4]), Feature(table, name="one")).values()
    assert list(batch.features) == ["one"] and batch.table_name == "table_0"
    np.testing.assert_array_equal(batch.unique_ids, [1, 4])
    (batch,) = pp.preprocess_features([tf.constant([2]), tf.constant([[3]])], [Feature(table), Feature(table)]).values()
    assert list(batch.features) == ["0", "1"]
    np.testing.assert_array_equal(batch.unique_ids, [2, 3])


def test_output_shape_from_config_and_rank3_dense():
    table = Table(10, combiner="sum")
    config = {"d": Feature(table, output_shape=[2, 3]), "s": Feature(table, output_shape=[1, 3])}
    features = {
        "d": tf.reshape(tf.range(6), [6, 1]),
        "s": tf.sparse.from_dense(tf.constant([[[1, 2]], [[3, 0]], [[0, 4]]])),
    }
    (batch,) = pp.preprocess_features(features, config).values()
    assert batch.features["d"].output_shape == [2, 3] and batch.features["s"].output_shape == [1, 3]
    assert int(batch.features["s"].num_segments) == 3  # Rows of the input: prod([3, 1]).
    got = got_feature(batch, batch.features["s"])
    assert got == {(0, 1): 1.0, (0, 2): 1.0, (1, 3): 1.0, (2, 4): 1.0}
    with pytest.raises(ValueError, match="Feature 'd' .*output_shape \\[4\\] has 4 rows but the dense input has 6"):
        pp.preprocess_features({"d": features["d"]}, {"d": Feature(table, output_shape=[4])})


# ------------------------------------------------------------------------------------------------------
# Validation errors name the feature and the table.

T = Table(10, name="users")


def run(features, config, weights=None, **kw):
    result = pp.preprocess_features(features, config, weights, **kw)
    return [b.unique_ids.numpy() for b in result.values()]


@pytest.mark.parametrize("ids", [[[1, 10]], [[-1, 2]]])
def test_out_of_range_ids(ids):
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Feature 'uid' \(table 'users'\): ids must be in "
        r"\[0, 10\)",
    ):
        run({"uid": tf.ragged.constant(ids, tf.int64)}, {"uid": Feature(T)})


def test_out_of_range_ids_pass_without_validation():
    assert run({"uid": tf.constant([12])}, {"uid": Feature(T)}, validate=False)[0].tolist() == [12]
    assert run({"uid": tf.constant([12])}, {"uid": Feature(T, validate_weights_and_indices=False)})[0].tolist() == [12]


def test_truncated_positions_are_not_validated():
    out = run({"s": tf.ragged.constant([[1, 99]], tf.int64)}, {"s": Feature(T, max_sequence_length=1)})
    assert out[0].tolist() == [1]


def test_negative_weights():
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Feature 'w' \(table 'users'\): weights must be "
        "non-negative",
    ):
        run({"w": tf.ragged.constant([[1, 2]])}, {"w": Feature(T)}, {"w": tf.ragged.constant([[1.0, -0.5]])})


def test_weights_mismatching_ids():
    ids = tf.ragged.constant([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"Feature 'w' \(table 'users'\): weight specified for dense input"):
        run({"w": tf.constant([1, 2])}, {"w": Feature(T)}, {"w": tf.constant([1.0, 2.0])})
    with pytest.raises(
        ValueError,
        match=r"Feature 'w' \(table 'users'\): weight is of type SparseTensor which "
        "does not match",
    ):
        run({"w": ids}, {"w": Feature(T)}, {"w": ids.to_sparse()})
    with pytest.raises(ValueError, match=r"Feature 'w' \(table 'users'\): weights have 2 values but the ids have 3"):
        run({"w": ids}, {"w": Feature(T)}, {"w": tf.ragged.constant([[1.0], [2.0]])})
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Feature 'w' \(table 'users'\): weights must have "
        "the same row_splits",
    ):
        run({"w": ids}, {"w": Feature(T)}, {"w": tf.ragged.constant([[1.0], [2.0, 3.0]])})
    sparse = ids.to_sparse()
    moved = tf.SparseTensor(sparse.indices[::-1], tf.ones([3]), sparse.dense_shape)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Feature 'w' \(table 'users'\): weights must have "
        "the same indices",
    ):
        run({"w": sparse}, {"w": Feature(T)}, {"w": moved})
    with pytest.raises(TypeError, match=r"Feature 'w' \(table 'users'\): weights must be a float"):
        run({"w": ids}, {"w": Feature(T)}, {"w": tf.ragged.constant([["a", "b"], ["c"]])})


def test_wrong_ranks():
    with pytest.raises(
        ValueError,
        match=r"Feature 'x' \(table 'users'\): rank 2 or above dense tensor should "
        "have last dimension as 1",
    ):
        run({"x": tf.constant([[1, 2]])}, {"x": Feature(T)})
    with pytest.raises(ValueError, match=r"Feature 'x' \(table 'users'\): only rank 1 and above dense"):
        run({"x": tf.constant(1)}, {"x": Feature(T)})
    with pytest.raises(ValueError, match=r"Feature 'x' \(table 'users'\): only rank 2 and above sparse"):
        run({"x": tf.SparseTensor([[0]], tf.constant([1]), [3])}, {"x": Feature(T)})
    with pytest.raises(ValueError, match=r"Feature 'x' \(table 'users'\): only rank 2 ragged"):
        run({"x": tf.ragged.constant([[[1]], [[2, 3]]])}, {"x": Feature(T)})
    with pytest.raises(
        ValueError,
        match=r"Feature 'x' \(table 'users'\): a sequence feature "
        r"\(max_sequence_length=2\) needs dense ids of shape \[batch, length\]",
    ):
        run({"x": tf.constant([1, 2])}, {"x": Feature(T, max_sequence_length=2)})
    with pytest.raises(
        ValueError,
        match=r"Feature 'x' \(table 'users'\): output shape set in the FeatureConfig "
        "should be the factor",
    ):
        run({"x": tf.ragged.constant([[1], [2]])}, {"x": Feature(T, output_shape=[3])})


@pytest.mark.parametrize("ids, dtype", [(["a", "b"], tf.string), ([1.0, 2.0], tf.float32)])
def test_wrong_id_dtypes(ids, dtype):
    pattern = "string ids are not supported" if dtype == tf.string else "ids must be int32 or int64, got float32"
    with pytest.raises(TypeError, match=rf"Feature 'x' \(table 'users'\): {pattern}"):
        run({"x": tf.ragged.constant([ids], dtype)}, {"x": Feature(T)})
    with pytest.raises(TypeError, match=r"Feature 'x' \(table 'users'\)"):
        run({"x": tf.constant(ids, dtype)}, {"x": Feature(T)})


def test_missing_and_unexpected_features():
    config = {"a": Feature(T), "b": Feature(T)}
    with pytest.raises(ValueError, match=r"Feature 'b' \(table 'users'\) is missing from the features"):
        run({"a": tf.constant([1])}, config)
    with pytest.raises(ValueError, match=r"Feature 'b' \(table 'users'\) is missing from the weights"):
        run({"a": tf.constant([1]), "b": tf.constant([1])}, config, {"a": None})
    with pytest.raises(ValueError, match=r"contain keys \['c'\] that are not in feature_config"):
        run({"a": tf.constant([1]), "b": tf.constant([1]), "c": tf.constant([1])}, config)


def test_bad_combiner():
    with pytest.raises(ValueError, match="Table 'bad': combiner must be one of"):
        run({"a": tf.constant([1])}, {"a": Feature(Table(3, combiner="max", name="bad"))})


# ------------------------------------------------------------------------------------------------------
# Graph modes.

CONFIG = {
    "a": Feature(Table(8, combiner="mean", name="t")),
    "b": Feature(Table(8, combiner="sum", name="t2"), max_sequence_length=2),
}


def _activations(features, weights=None):
    tables = {"t": tf.reshape(tf.range(16, dtype=tf.float32), [8, 2]), "t2": tf.ones([8, 2])}
    out = {}
    for name, batch in pp.preprocess_features(features, CONFIG, weights).items():
        rows = tf.gather(tables[name], batch.unique_ids)
        out.update(combiners.combine_table(rows, batch))
    return out


def _inputs():
    return (
        {"a": tf.ragged.constant([[1, 3, 3], [], [7]], tf.int64), "b": tf.ragged.constant([[2, 2, 2], [1]])},
        {"a": tf.ragged.constant([[1.0, 1.0, 2.0], [], [1.0]]), "b": None},
    )


def test_tf_function_with_dynamic_batch_matches_eager():
    features, weights = _inputs()
    eager = _activations(features, weights)
    spec = {"a": tf.RaggedTensorSpec([None, None], tf.int64), "b": tf.RaggedTensorSpec([None, None], tf.int32)}
    wspec = tf.RaggedTensorSpec([None, None], tf.float32)

    @tf.function(input_signature=[spec, wspec])
    def fn(f, w):
        out = _activations(f, {"a": w, "b": None})
        assert out["a"].shape.as_list() == [None, 2] and out["b"].shape.as_list() == [None, 2, 2]
        return out

    graph = fn(features, weights["a"])
    for k in eager:
        np.testing.assert_allclose(graph[k].numpy(), eager[k].numpy())
    np.testing.assert_allclose(eager["a"].numpy(), [[(2 + 3 * 6) / 4, (3 + 3 * 7) / 4], [0, 0], [14, 15]])
    np.testing.assert_allclose(eager["b"].numpy(), [[[1, 1], [1, 1]], [[1, 1], [0, 0]]])


def test_tf1_session_and_while_loop_and_graph_assert():
    with tf.Graph().as_default():
        ids = tf.compat.v1.ragged.placeholder(tf.int64, 1, [])
        seq = tf.compat.v1.ragged.placeholder(tf.int32, 1, [])
        out = _activations({"a": ids, "b": seq})

        def body(i, acc):
            step = _activations({"a": ids + tf.cast(i, tf.int64), "b": seq})
            return i + 1, acc + tf.reduce_sum(step["a"]) + tf.reduce_sum(step["b"])

        _, total = tf.compat.v1.while_loop(lambda i, _: i < 3, body, [tf.constant(0), tf.constant(0.0)])
        feed = {
            ids: tf.compat.v1.ragged.RaggedTensorValue(np.array([1, 3, 3, 5]), np.array([0, 3, 3, 4])),
            seq: tf.compat.v1.ragged.RaggedTensorValue(np.array([2, 2, 2, 1], np.int32), np.array([0, 3, 4])),
        }
        with tf.compat.v1.Session() as sess:
            got, loop_total = sess.run([out, total], feed)
            np.testing.assert_allclose(got["a"], [[(2 + 2 * 6) / 3, (3 + 2 * 7) / 3], [0, 0], [10, 11]])
            # Step i shifts the ids of 'a' by i; row k of table 't' sums to 4k + 1; 'b' adds 2 + 2 + 2 every step.
            expected = sum(((4 * (1 + i) + 1) + 2 * (4 * (3 + i) + 1)) / 3 + 4 * (5 + i) + 1 + 6 for i in range(3))
            np.testing.assert_allclose(loop_total, expected, rtol=1e-6)
            bad = dict(feed)
            bad[ids] = tf.compat.v1.ragged.RaggedTensorValue(np.array([1, 9]), np.array([0, 2]))
            # Graph-mode Assert messages escape quotes: Feature \'a\' (table \'t\').
            pattern = r"Feature \\?'a\\?' \(table \\?'t\\?'\): ids must be in \[0, 8\)"
            with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
                sess.run(out, bad)
            with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
                sess.run(total, bad)


def test_table_batches_flatten_and_pack_with_tf_nest():
    features, weights = _inputs()
    spec = {"a": tf.RaggedTensorSpec([None, None], tf.int64), "b": tf.RaggedTensorSpec([None, None], tf.int32)}

    @tf.function(input_signature=[spec])
    def fn(f):
        batches = pp.preprocess_features(f, CONFIG)
        flat = tf.nest.flatten(batches)
        assert all(isinstance(t, tf.Tensor) for t in flat)
        return tf.nest.pack_sequence_as(batches, flat)  # Dynamic batch dims travel as tensors.

    eager = pp.preprocess_features(features, CONFIG)
    graph = fn(features)
    assert list(eager) == list(graph)
    for name in eager:
        np.testing.assert_array_equal(eager[name].unique_ids, graph[name].unique_ids)
        for key, seg in eager[name].features.items():
            other = graph[name].features[key]
            for field in ("unique_index", "segment_ids", "gains", "num_segments"):
                np.testing.assert_array_equal(getattr(seg, field), getattr(other, field))
            assert [int(d) for d in other.output_shape] == seg.output_shape
    seg = graph["t2"].features["b"]
    assert seg.is_sequence and seg.sorted_segments and int(seg.output_shape[0]) == 2 and seg.output_shape[1] == 2


# ------------------------------------------------------------------------------------------------------
# Deduplication: the TensorFlow path (few ids) and the host NumPy path (many or unknown) agree with np.unique.


@pytest.mark.parametrize(
    "ids",
    [
        np.array([], np.int64),
        np.array([7], np.int64),
        np.array([5, 3, 5, 9, 3, 3, 0], np.int64),
        np.random.default_rng(1).integers(0, 50_000, 9000),
        np.array([2**62, 5, -3, 2**62, 5, -(2**62)], np.int64),  # Span too wide to pack: the argsort fallback.
    ],
)
def test_sorted_unique_both_paths_match_numpy(ids):
    expected_unique, expected_index = np.unique(ids, return_inverse=True)
    for bound in (0, None):  # A small static bound selects TensorFlow ops; None (unknown) the host sort.
        ((unique, index),) = pp._sorted_unique([tf.constant(ids, tf.int64)], [bound])
        np.testing.assert_array_equal(unique.numpy(), expected_unique)
        np.testing.assert_array_equal(index.numpy(), expected_index.reshape(-1))
        assert index.dtype == tf.int32 and unique.dtype == tf.int64


def test_sorted_unique_host_path_in_tf1_while_loop():
    rng = np.random.default_rng(2)
    batches = rng.integers(0, 1000, (3, 5000))
    with tf.Graph().as_default():
        data = tf.constant(batches)

        def body(i, acc):
            ((unique, index),) = pp._sorted_unique([data[i]])  # 5000 static ids: above the host threshold.
            return i + 1, acc + tf.reduce_sum(tf.gather(unique, index))

        _, total = tf.compat.v1.while_loop(lambda i, _: i < 3, body, [tf.constant(0), tf.constant(0, tf.int64)])
        with tf.compat.v1.Session() as sess:
            assert sess.run(total) == batches.sum()


def test_python_ops_false_builds_tensorflow_ops_only_with_the_same_batches():
    # Above _HOST_SORT_MIN_IDS ids the dedup is a NumPy host call, which a remote worker cannot run.
    table = Table(100, 2, "sum", name="t")
    config = {"a": Feature(table, name="a")}
    ids = np.random.RandomState(0).randint(0, 100, size=[pp._HOST_SORT_MIN_IDS + 10, 1]).astype(np.int64)
    results = {}
    for python_ops in (True, False):
        with tf.Graph().as_default() as graph:
            batches = pp.preprocess_features({"a": tf.constant(ids)}, config, python_ops=python_ops)
            op_types = {op.type for op in graph.get_operations()}
            with tf.compat.v1.Session() as sess:
                results[python_ops] = sess.run([batches["t"].unique_ids, batches["t"].features["a"].unique_index])
        assert any(t.startswith("PyFunc") for t in op_types) == python_ops, op_types
    np.testing.assert_array_equal(results[False][0], np.unique(ids))
    for got, expected in zip(results[False], results[True]):
        np.testing.assert_array_equal(got, expected)


def test_rank2_sparse_rows_are_the_first_index_and_rank3_rows_are_row_major():
    table = Table(10, 2, "sum", name="t")
    config = {"a": Feature(table, name="a")}
    cases = {
        2: (([[0, 1], [2, 0], [2, 3]], [3, 4]), [0, 2, 2]),
        3: (([[0, 1, 0], [1, 0, 2], [1, 1, 0]], [2, 2, 3]), [1, 2, 3]),
    }
    for rank, ((indices, dense_shape), rows) in cases.items():
        with tf.Graph().as_default() as graph:
            ids = tf.SparseTensor(indices, tf.constant([4, 5, 6], tf.int64), dense_shape)
            batches = pp.preprocess_features({"a": ids}, config, deduplicate=False)
            op_types = {op.type for op in graph.get_operations()}
            with tf.compat.v1.Session() as sess:
                got = sess.run(batches["t"].features["a"].segment_ids)
        np.testing.assert_array_equal(got, rows)
        # Rank 2: no strides over the leading dimensions to compute (one op per feature and step).
        assert ("Cumprod" in op_types) == (rank == 3), (rank, op_types)
