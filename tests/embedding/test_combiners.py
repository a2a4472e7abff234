"""Tests of embedding/combiners.py: combine/backprop against NumPy formulas, tf.GradientTape and upstream."""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from embedding import combiners, preprocessing
from tests.helpers.duck_configs import Feature, Table
from tests.oracles import combiners as oracle


@dataclasses.dataclass
class Quantization:
    num_buckets: int
    lower: float
    upper: float


VOCAB, DIM = 12, 3
RNG = np.random.RandomState(0)
TABLE = RNG.normal(size=(VOCAB, DIM)).astype(np.float32)

# Row 0 has a duplicate id, row 1 is empty, row 3 repeats one id three times.
IDS = [[1, 4, 1], [], [7], [2, 2, 2, 9]]
WEIGHTS = [[0.5, 2.0, 1.5], [], [3.0], [1.0, 0.25, 2.0, 4.0]]


def lookup(feature, ids, weights=None, table=TABLE, quantization_config=None):
    """Preprocess one feature, gather the unique rows of `table`, combine."""
    batch = preprocessing.preprocess_features({"f": ids}, {"f": feature}, None if weights is None else {"f": weights})
    (table_batch,) = batch.values()
    rows = tf.gather(tf.constant(table), table_batch.unique_ids)
    return combiners.combine(rows, table_batch.features["f"], quantization_config), table_batch


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_ragged_weighted_combiners(combiner):
    feature = Feature(Table(VOCAB, DIM, combiner))
    out, _ = lookup(feature, tf.ragged.constant(IDS, tf.int64), tf.ragged.constant(WEIGHTS, tf.float32, ragged_rank=1))
    assert out.shape == (4, DIM)
    np.testing.assert_allclose(out.numpy(), oracle.combine(IDS, WEIGHTS, combiner, TABLE), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out.numpy()[1], 0.0)  # Empty row.


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_sparse_unweighted_combiners(combiner):
    feature = Feature(Table(VOCAB, DIM, combiner))
    ragged = tf.ragged.constant(IDS, tf.int64)
    out, _ = lookup(feature, ragged.to_sparse())
    ones = [[1.0] * len(r) for r in IDS]
    np.testing.assert_allclose(out.numpy(), oracle.combine(IDS, ones, combiner, TABLE), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_matches_upstream_serving_lookup(combiner):
    """Upstream's CPU lookup (safe_embedding_lookup_sparse) is an oracle for non-sequence sparse features."""
    table = tf.tpu.experimental.embedding.TableConfig(VOCAB, DIM, combiner=combiner, name="t")
    feature = tf.tpu.experimental.embedding.FeatureConfig(table, name="f")
    ids = tf.ragged.constant(IDS, tf.int64).to_sparse()
    weights = tf.ragged.constant(WEIGHTS, tf.float32, ragged_rank=1).to_sparse()
    expected = tf.tpu.experimental.embedding.serving_embedding_lookup(
        {"f": ids}, {"f": weights}, {table: tf.constant(TABLE)}, {"f": feature}
    )["f"]
    out, _ = lookup(feature, ids, weights)  # Upstream config objects are accepted as they are.
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_dense_ids_rank1_and_rank2_and_rank3():
    feature = Feature(Table(VOCAB, DIM, "mean"))
    out, _ = lookup(feature, tf.constant([3, 0, 5]))
    np.testing.assert_allclose(out.numpy(), TABLE[[3, 0, 5]], rtol=1e-6)  # Id 0 is kept.
    out, _ = lookup(feature, tf.constant([[3], [0], [5]], tf.int64))
    assert out.shape == (3, DIM)
    out, _ = lookup(feature, tf.constant([[[1], [2]], [[3], [4]]]))
    assert out.shape == (2, 2, DIM)
    np.testing.assert_allclose(out.numpy(), TABLE[[[1, 2], [3, 4]]], rtol=1e-6)


def test_duplicate_ids_within_a_row_add_up():
    feature = Feature(Table(VOCAB, DIM, "sqrtn"))
    out, batch = lookup(
        feature, tf.ragged.constant(IDS, tf.int64), tf.ragged.constant(WEIGHTS, tf.float32, ragged_rank=1)
    )
    seg = batch.features["f"]
    pairs = list(zip(seg.segment_ids.numpy(), batch.unique_ids.numpy()[seg.unique_index.numpy()]))
    assert set(pairs) == {(0, 1), (0, 4), (2, 7), (3, 2), (3, 9)}
    gains = collections.defaultdict(float)  # Each entry keeps its own gain; duplicates add up when combining.
    for pair, gain in zip(pairs, seg.gains.numpy()):
        gains[pair] += gain
    norm3 = np.sqrt(1 + 0.0625 + 4 + 16)
    np.testing.assert_allclose(gains[(3, 2)], 3.25 / norm3, rtol=1e-6)  # Scale over raw weights, then merged.
    np.testing.assert_allclose(gains[(3, 9)], 4.0 / norm3, rtol=1e-6)


def test_zero_weight_row_gives_zeros_not_nan():
    feature = Feature(Table(VOCAB, DIM, "mean"))
    out, _ = lookup(
        feature, tf.ragged.constant([[1, 2], [3]], tf.int64), tf.ragged.constant([[0.0, 0.0], [2.0]], tf.float32)
    )
    np.testing.assert_array_equal(out.numpy()[0], 0.0)
    np.testing.assert_allclose(out.numpy()[1], TABLE[3], rtol=1e-6)


@pytest.mark.parametrize("kind", ["ragged", "sparse", "dense"])
def test_sequence_features_truncate_and_pad(kind):
    seq_ids = [[1, 2, 3, 4, 5], [6], [], [7, 8]]
    feature = Feature(Table(VOCAB, DIM, "sqrtn"), max_sequence_length=3)
    ragged = tf.ragged.constant(seq_ids, tf.int64)
    inputs = {"ragged": ragged, "sparse": ragged.to_sparse(), "dense": None}[kind]
    if kind == "dense":
        seq_ids = [[1, 2, 3, 4, 5], [6, 0, 0, 0, 0]]  # Dense sequences: every position is present (also id 0).
        inputs = tf.constant(seq_ids)
    out, _ = lookup(feature, inputs)
    assert out.shape == (len(seq_ids), 3, DIM)
    ones = [[1.0] * len(r) for r in seq_ids]
    np.testing.assert_allclose(out.numpy(), oracle.sequence(seq_ids, ones, 3, TABLE), rtol=1e-6)


def test_sequence_feature_weights_are_gains():
    feature = Feature(Table(VOCAB, DIM, "mean"), max_sequence_length=4)
    out, _ = lookup(feature, tf.ragged.constant(IDS, tf.int64), tf.ragged.constant(WEIGHTS, tf.float32, ragged_rank=1))
    np.testing.assert_allclose(out.numpy(), oracle.sequence(IDS, WEIGHTS, 4, TABLE), rtol=1e-6)


def test_ragged_output_shape_sequence_and_reshape():
    feature = Feature(Table(VOCAB, DIM, "sum"), output_shape=[2, 2, 2])  # 8 = 4 rows * 2 positions.
    out, _ = lookup(feature, tf.ragged.constant(IDS, tf.int64))
    assert out.shape == (2, 2, 2, DIM)
    ones = [[1.0] * len(r) for r in IDS]
    np.testing.assert_allclose(out.numpy().reshape(4, 2, DIM), oracle.sequence(IDS, ones, 2, TABLE), rtol=1e-6)
    feature = Feature(Table(VOCAB, DIM, "sum"), output_shape=[2, 2])  # 4 = batch: combined, reshaped.
    out, _ = lookup(feature, tf.ragged.constant(IDS, tf.int64))
    np.testing.assert_allclose(
        out.numpy().reshape(4, DIM), oracle.combine(IDS, ones, "sum", TABLE), rtol=1e-5, atol=1e-6
    )


def test_quantization_before_combining():
    q = Quantization(num_buckets=5, lower=-1.0, upper=1.0)  # Grid -1, -0.5, 0, 0.5, 1.
    rows = tf.constant([[-3.0, -0.74, -0.26], [0.24, 0.26, 0.76], [2.0, 0.0, 1.0]])
    np.testing.assert_allclose(
        combiners.quantize(rows, q).numpy(), [[-1.0, -0.5, -0.5], [0.0, 0.5, 1.0], [1.0, 0.0, 1.0]], atol=1e-6
    )
    feature = Feature(Table(VOCAB, DIM, "mean", quantization_config=q))
    out, _ = lookup(
        feature,
        tf.ragged.constant(IDS, tf.int64),
        tf.ragged.constant(WEIGHTS, tf.float32, ragged_rank=1),
        quantization_config=q,
    )
    expected = oracle.combine(IDS, WEIGHTS, "mean", oracle.quantize(TABLE, q))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    # combine_table picks the table's quantization_config up by itself.
    batch = preprocessing.preprocess_features({"f": tf.ragged.constant(IDS, tf.int64)}, {"f": feature})
    (tb,) = batch.values()
    out2 = combiners.combine_table(tf.gather(TABLE, tb.unique_ids), tb)["f"]
    ones = [[1.0] * len(r) for r in IDS]
    np.testing.assert_allclose(
        out2.numpy(), oracle.combine(IDS, ones, "mean", oracle.quantize(TABLE, q)), rtol=1e-5, atol=1e-6
    )


def test_quantization_rejects_one_bucket():
    with pytest.raises(ValueError, match="at least 2"):
        combiners.quantize(tf.zeros([1, 1]), Quantization(1, 0.0, 1.0))


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_backprop_matches_gradient_tape_and_numpy(combiner):
    ids = tf.ragged.constant(IDS, tf.int64)
    weights = tf.ragged.constant(WEIGHTS, tf.float32, ragged_rank=1)
    feature = Feature(Table(VOCAB, DIM, combiner))
    (tb,) = preprocessing.preprocess_features({"f": ids}, {"f": feature}, {"f": weights}).values()
    grads = RNG.normal(size=(4, DIM)).astype(np.float32)

    # Naive lookup on the full table, differentiated by TensorFlow.
    table = tf.Variable(TABLE)
    with tf.GradientTape() as tape:
        naive = tf.nn.safe_embedding_lookup_sparse(table, ids.to_sparse(), weights.to_sparse(), combiner=combiner)
        loss = tf.reduce_sum(naive * grads)
    expected = tf.convert_to_tensor(tape.gradient(loss, table)).numpy()

    unique_grads = combiners.backprop(tf.constant(grads), tb.features["f"], tb.num_unique)
    dense = tf.scatter_nd(tb.unique_ids[:, None], unique_grads, [VOCAB, DIM]).numpy()
    np.testing.assert_allclose(dense, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dense, oracle.backprop(IDS, WEIGHTS, combiner, grads, VOCAB), rtol=1e-5, atol=1e-6)


def test_backprop_is_gradient_of_combine_with_shared_table_and_sequence():
    table = Table(VOCAB, DIM, "mean")
    config = {"a": Feature(table), "b": Feature(table, max_sequence_length=2)}
    features = {"a": tf.ragged.constant(IDS, tf.int64), "b": tf.ragged.constant([[4, 4, 1], [11]], tf.int64)}
    (tb,) = preprocessing.preprocess_features(features, config).values()
    rows = tf.Variable(tf.gather(TABLE, tb.unique_ids))
    grads = {
        "a": tf.constant(RNG.normal(size=(4, DIM)), tf.float32),
        "b": tf.constant(RNG.normal(size=(2, 2, DIM)), tf.float32),
    }
    with tf.GradientTape() as tape:
        acts = combiners.combine_table(rows, tb)
        loss = sum(tf.reduce_sum(acts[k] * grads[k]) for k in acts)
    expected = tape.gradient(loss, rows)
    ours = sum(combiners.backprop(grads[k], tb.features[k], tb.num_unique) for k in tb.features)
    np.testing.assert_allclose(ours.numpy(), tf.convert_to_tensor(expected).numpy(), rtol=1e-5, atol=1e-6)


def test_empty_batch():
    feature = Feature(Table(VOCAB, DIM, "mean"))
    out, tb = lookup(feature, tf.ragged.constant([[], []], tf.int64))
    assert tb.unique_ids.shape == (0,)
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, DIM)))
    grads = combiners.backprop(tf.ones([2, DIM]), tb.features["f"], tb.num_unique)
    assert grads.shape == (0, DIM)


def test_backprop_table_equals_sum_of_feature_backprops():
    table = Table(VOCAB, DIM, "sqrtn")
    config = {"a": Feature(table), "b": Feature(table, max_sequence_length=2), "c": Feature(table)}
    features = {
        "a": tf.ragged.constant(IDS, tf.int64),
        "b": tf.ragged.constant([[4, 4, 1], [11]], tf.int64),
        "c": tf.ragged.constant(IDS, tf.int64).to_sparse(),
    }
    (tb,) = preprocessing.preprocess_features(features, config).values()
    grads = {
        "a": tf.constant(RNG.normal(size=(4, DIM)), tf.float32),
        "b": tf.constant(RNG.normal(size=(2, 2, DIM)), tf.float32),
        "c": None,
    }
    ours = combiners.backprop_table(grads, tb)
    expected = sum(combiners.backprop(grads[k], tb.features[k], tb.num_unique) for k in ("a", "b"))
    np.testing.assert_allclose(ours.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)


def test_sorted_and_unsorted_segment_paths_agree():
    feature = Feature(Table(VOCAB, DIM, "mean"))
    ragged = tf.ragged.constant(IDS + [[]], tf.int64)  # Trailing empty row: the sorted path pads it.
    (tb,) = preprocessing.preprocess_features({"f": ragged}, {"f": feature}).values()
    seg = tb.features["f"]
    assert seg.sorted_segments
    rows = tf.gather(TABLE, tb.unique_ids)
    fast = combiners.combine(rows, seg)
    slow = combiners.combine(rows, dataclasses.replace(seg, sorted_segments=False))
    assert fast.shape == slow.shape == (5, DIM)
    np.testing.assert_allclose(fast.numpy(), slow.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(fast.numpy()[4], 0.0)


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_plan_without_precomputed_matrix_gives_the_same_results(combiner):
    out, tb = lookup(
        Feature(Table(VOCAB, DIM, combiner)),
        tf.ragged.constant(IDS, tf.int64),
        tf.ragged.constant(WEIGHTS, tf.float32, ragged_rank=1),
    )
    seg = tb.features["f"]
    assert seg.matrix_indices is not None and seg.matrix_indices.dtype == tf.int64
    bare = dataclasses.replace(seg, matrix_indices=None, matrix_shape=None)
    rows = tf.gather(TABLE, tb.unique_ids)
    np.testing.assert_allclose(combiners.combine(rows, bare).numpy(), out.numpy(), rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), oracle.combine(IDS, WEIGHTS, combiner, TABLE), rtol=1e-5, atol=1e-6)
    grads = tf.constant(RNG.normal(size=out.shape).astype(np.float32))
    np.testing.assert_allclose(
        combiners.backprop(grads, bare, tb.num_unique).numpy(),
        combiners.backprop(grads, seg, tb.num_unique).numpy(),
        rtol=1e-6,
    )
