"""Serving lookups: checkpoint -> TPUEmbeddingForServing / serving_embedding_lookup equal the training path.

Oracles: the training path's `dequeue` (same inputs), the NumPy reference activations, and upstream's
`tf.tpu.experimental.embedding.TPUEmbeddingForServing` / `serving_embedding_lookup` (reading our checkpoint).
"""

import numpy as np
import pytest
import tensorflow as tf

from embedding import config, optimizers
from embedding.serving import TPUEmbeddingForServing, serving_embedding_lookup
from embedding.tpu_embedding import TPUEmbedding
from tests.helpers.tables import engine_state
from tests.helpers.two_table_model import (
    CPUS,
    DIM,
    GLOBAL_BATCH,
    VOCAB,
    distributed_iterator,
    feature_config,
    mirrored,
    reference_activations,
    reference_training,
    sample_slice,
    seed_training_step,
)

del CPUS  # Imported for its side effect: logical CPUs configured before TF initialises.


def _train_two_replicas(tmp_path, optimizer=None):
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(feature_config(), optimizer or optimizers.Adagrad(0.2))
    seed_training_step(strategy, embedding)(distributed_iterator(strategy), tf.constant(3))
    path = tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "ckpt"))
    return embedding, path


def test_checkpoint_from_two_replicas_into_serving_equals_reference(tmp_path):
    embedding, path = _train_two_replicas(tmp_path)
    serving = TPUEmbeddingForServing(feature_config(), optimizers.Adagrad(0.2))
    tf.train.Checkpoint(embedding=serving).restore(path).assert_consumed()
    trained = reference_training("adagrad", {}, 0.2)
    for t, table in serving.embedding_tables.items():
        np.testing.assert_allclose(table.numpy(), trained[t.name]["params"], rtol=1e-5, atol=1e-5)
    features, weights, _ = sample_slice(4, 12)
    got = serving(features, weights)
    expected = reference_activations({t: s["params"] for t, s in trained.items()}, 4, 12)
    for f in expected:
        np.testing.assert_allclose(got[f].numpy(), expected[f], rtol=1e-5, atol=1e-5)
    # The training object's own (sharded) tables serve the same values.
    direct = serving_embedding_lookup(features, weights, embedding.embedding_tables, embedding.engine.feature_config)
    for f in expected:
        np.testing.assert_allclose(direct[f].numpy(), got[f].numpy(), rtol=1e-6, atol=1e-6)


def test_serving_without_optimizer_restores_tables_only(tmp_path):
    _, path = _train_two_replicas(tmp_path)
    serving = TPUEmbeddingForServing(feature_config(), None)
    tf.train.Checkpoint(embedding=serving).restore(path).expect_partial()
    trained = reference_training("adagrad", {}, 0.2)
    for t, table in serving.embedding_tables.items():
        np.testing.assert_allclose(table.numpy(), trained[t.name]["params"], rtol=1e-5, atol=1e-5)


def test_upstream_serving_restores_our_checkpoint(tmp_path):
    _, path = _train_two_replicas(tmp_path, optimizers.SGD(0.1))
    up = tf.tpu.experimental.embedding
    a = up.TableConfig(VOCAB["A"], DIM["A"], combiner="mean", name="A")
    b = up.TableConfig(VOCAB["B"], DIM["B"], combiner="sum", name="B")
    up_config = {"user": up.FeatureConfig(a), "item": up.FeatureConfig(a), "cat": up.FeatureConfig(b)}
    upstream = up.TPUEmbeddingForServing(up_config, up.SGD(0.1))
    upstream.build()
    tf.train.Checkpoint(embedding=upstream).restore(path).assert_consumed()
    trained = reference_training("sgd", {}, 0.1)
    for t, table in upstream.embedding_tables.items():
        np.testing.assert_allclose(table.numpy(), trained[t.name]["params"], rtol=1e-5, atol=1e-5)
    features, weights, _ = sample_slice(0, 8)
    features = dict(features, cat=tf.squeeze(features["cat"], 1))  # Upstream returns [B, 1, dim] for [B, 1].
    theirs = upstream.embedding_lookup(features, weights)
    ours = serving_embedding_lookup(features, weights, upstream.embedding_tables, up_config)
    for f in theirs:
        np.testing.assert_allclose(ours[f].numpy(), theirs[f].numpy(), rtol=1e-6, atol=1e-6)


def _table(name="t", vocab=10, dim=2, combiner="mean"):
    return config.TableConfig(
        vocab,
        dim,
        name=name,
        combiner=combiner,
        initializer=tf.constant_initializer(np.random.RandomState(3).normal(size=(vocab, dim)).astype(np.float32)),
    )


RAGGED = tf.ragged.constant([[1, 2, 3], [4], [], [5, 5]], dtype=tf.int64)
RAGGED_W = tf.ragged.constant([[1.0, 2.0, 0.5], [3.0], [], [1.0, 2.0]])
SPARSE = tf.sparse.from_dense(tf.constant([[1, 2, 0], [3, 0, 0], [0, 0, 0], [4, 4, 9]], tf.int64))
SPARSE_W = tf.SparseTensor(SPARSE.indices, tf.constant([1.0, 2.0, 3.0, 0.5, 1.5, 2.0]), SPARSE.dense_shape)


@pytest.mark.parametrize("combiner", ["mean", "sum", "sqrtn"])
@pytest.mark.parametrize(
    "case",
    [
        ("dense_1d", tf.constant([1, 2, 0, 9]), None, {}),
        ("dense_b1", tf.constant([[1], [2], [0], [9]]), None, {}),
        ("dense_b21", tf.constant([[[1], [2]], [[0], [9]]]), None, {}),
        ("dense_seq", tf.constant([[1, 2, 3], [4, 5, 6], [0, 0, 0], [7, 8, 9]]), None, dict(max_sequence_length=2)),
        ("dense_out", tf.constant([[1], [2], [0], [9]]), None, dict(output_shape=[2, 2])),
        ("ragged", RAGGED, RAGGED_W, {}),
        ("ragged_seq", RAGGED, RAGGED_W, dict(max_sequence_length=2)),
        ("ragged_out_seq", RAGGED, None, dict(output_shape=[4, 3])),
        ("ragged_out", RAGGED, RAGGED_W, dict(output_shape=[2, 2])),
        ("sparse", SPARSE, SPARSE_W, {}),
        ("sparse_seq", SPARSE, SPARSE_W, dict(max_sequence_length=4)),
        ("sparse_3d", tf.sparse.reshape(SPARSE, [2, 2, 3]), None, {}),
    ],
    ids=lambda c: c[0] if isinstance(c, tuple) else c,
)
def test_serving_equals_training_path(case, combiner):
    _, ids, weights, kwargs = case
    fc = {"f": config.FeatureConfig(_table(combiner=combiner), **kwargs)}
    embedding = TPUEmbedding(fc, optimizers.SGD(0.1))
    w = {"f": weights} if weights is not None else None
    embedding.enqueue({"f": ids}, w, training=False)
    expected = embedding.dequeue()["f"]
    got = serving_embedding_lookup({"f": ids}, w, embedding.embedding_tables, fc)["f"]
    assert got.shape.as_list() == expected.shape.as_list()
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)


def test_safe_sparse_lookup_prunes_negative_ids_and_non_positive_weights():
    table = _table(combiner="sum")
    fc = {"f": config.FeatureConfig(table)}
    serving = TPUEmbeddingForServing(fc, None)
    full = list(serving.embedding_tables.values())[0].numpy()
    ids = tf.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 0]], tf.constant([3, -1, 4, 5], tf.int64), [4, 2])
    w = tf.SparseTensor(ids.indices, [1.0, 5.0, 0.0, 2.0], ids.dense_shape)
    got = serving({"f": ids}, {"f": w})["f"].numpy()
    np.testing.assert_allclose(got, np.stack([full[3], np.zeros(2), 2 * full[5], np.zeros(2)]), rtol=1e-6)


@pytest.mark.parametrize(
    "ids,weights,match",
    [
        (tf.constant([1, 2]), tf.constant([1.0, 1.0]), "Weight specified for f, but input is dense"),
        (RAGGED, SPARSE_W, "does not match type of the input"),
        (tf.RaggedTensor.from_nested_row_splits([1, 2, 3], [[0, 1, 3], [0, 1, 2, 3]]), None, "Only rank 2 ragged"),
        (tf.ragged.constant([[1], [2], [3]]), None, "should be the factor"),
    ],
)
def test_serving_errors(ids, weights, match):
    fc = {"f": config.FeatureConfig(_table(), output_shape=[2] if "factor" in match else None)}
    serving = TPUEmbeddingForServing(fc, None)
    with pytest.raises(ValueError, match=match):
        serving({"f": ids}, {"f": weights} if weights is not None else None)


def test_missing_table_is_an_error():
    fc = {"f": config.FeatureConfig(_table())}
    with pytest.raises(ValueError, match="No table for feature f"):
        serving_embedding_lookup({"f": tf.constant([1])}, None, {}, fc)


def test_restored_state_continues_training_like_reference(tmp_path):
    """Slots restore too: a serving object with an optimizer holds the trained slots."""
    embedding, path = _train_two_replicas(tmp_path)
    serving = TPUEmbeddingForServing(feature_config(), optimizers.Adagrad(0.2))
    tf.train.Checkpoint(embedding=serving).restore(path).assert_consumed()
    got = engine_state(serving._engine)
    expected = engine_state(embedding.engine)
    for t in expected:
        for k in expected[t]:
            np.testing.assert_allclose(got[t][k], expected[t][k], rtol=0, atol=0)
    assert GLOBAL_BATCH == 4
