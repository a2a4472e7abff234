"""TPUEmbeddingV2 (SparseCore-style API): NumPy parity, parity with TPUEmbedding, CSR outputs, shards, errors."""

import numpy as np
import pytest
import tensorflow as tf

from embedding import config, optimizers, preprocessing
from embedding.serving import TPUEmbeddingForServing
from embedding.tpu_embedding import TPUEmbedding
from embedding.tpu_embedding_v2 import TPUEmbeddingV2
from tests.helpers.tables import assert_state_close, engine_state
from tests.helpers.two_table_model import (
    CASES,
    NUM_STEPS,
    distributed_iterator,
    feature_config,
    initial,
    loss_fn,
    mirrored,
    reference_activations,
    reference_training,
    sample_slice,
    seed_training_step,
    with_weights,
)

UPSTREAM_CSR_FIELDS = (
    "row_pointers",
    "sorted_sample_ids",
    "sorted_token_ids",
    "sorted_gains",
    "sample_count",
    "num_minibatches_per_physical_sparse_core",
)


def train_v2(strategy, embedding, num_steps=NUM_STEPS):
    @tf.function
    def train(iterator, n):
        def step(features, user_w, targets):
            with tf.GradientTape() as tape:
                activations, preserved = embedding(features, with_weights(user_w))
                tape.watch(activations)
                loss = loss_fn(activations, targets)
            embedding.apply_gradients(tape.gradient(loss, activations), preserved)

        for _ in tf.range(n):
            strategy.run(step, args=next(iterator))

    train(distributed_iterator(strategy), tf.constant(num_steps))


@pytest.mark.parametrize("num_replicas", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_training_equals_numpy_reference(case, num_replicas):
    make_opt, kind, kwargs, lr = CASES[case]
    strategy = mirrored(num_replicas)
    with strategy.scope():
        embedding = TPUEmbeddingV2(feature_config(), make_opt())
    train_v2(strategy, embedding)
    assert_state_close(engine_state(embedding.engine), reference_training(kind, kwargs, lr))


def test_same_model_through_both_apis_gives_same_tables():
    strategy = mirrored(2)
    with strategy.scope():
        v1 = TPUEmbedding(feature_config(), optimizers.Adam(0.05))
        v2 = TPUEmbeddingV2(feature_config(), optimizers.Adam(0.05))
    seed_training_step(strategy, v1)(distributed_iterator(strategy), tf.constant(NUM_STEPS))
    train_v2(strategy, v2)
    assert_state_close(engine_state(v2.engine), engine_state(v1.engine), tol=1e-6)


def test_eager_default_strategy_enqueue_dequeue_equals_lookup():
    embedding = TPUEmbeddingV2(feature_config(), optimizers.SGD(0.1))
    features, weights, targets = sample_slice(0, 4)
    enqueued = embedding.enqueue(features, weights)
    acts, preserved = embedding.dequeue(enqueued)
    acts2, _ = embedding.embedding_lookup(features, weights)
    expected = reference_activations({t: initial(t) for t in ("A", "B")}, 0, 4)
    for f in expected:
        np.testing.assert_allclose(acts[f].numpy(), expected[f], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(acts[f].numpy(), acts2[f].numpy())
    assert sorted(preserved) == ["A", "B"]
    assert preserved["A"]._fields == UPSTREAM_CSR_FIELDS
    with tf.GradientTape() as tape:
        tape.watch(acts)
        loss = loss_fn(acts, targets)
    embedding.apply_gradients(tape.gradient(loss, acts), preserved)
    assert_state_close(engine_state(embedding.engine), reference_training("sgd", {}, 0.1, num_steps=1))


def test_preserved_outputs_are_the_csr_form_partitioned_mod():
    strategy = mirrored(2)
    table = config.TableConfig(10, 2, name="t", combiner="mean")
    with strategy.scope():
        embedding = TPUEmbeddingV2(
            {"a": config.FeatureConfig(table), "b": config.FeatureConfig(table)}, optimizers.SGD(0.1)
        )
    features = {"a": tf.ragged.constant([[3, 3, 4], [1]]), "b": tf.constant([[4], [7]])}
    _, preserved = embedding(features)
    csr = preserved["t"]
    # Samples: a -> 0, 1; b -> 2, 3. Shard = id % 2; entries sorted by (shard, sample, token).
    # shard 0: (0, 4, 1/3), (2, 4, 1); shard 1: (0, 3, 2/3), (1, 1, 1), (3, 7, 1).
    np.testing.assert_array_equal(csr.row_pointers.numpy(), [0, 1, 1, 2, 2, 3, 4, 4, 5])
    np.testing.assert_array_equal(csr.sorted_sample_ids.numpy(), [0, 2, 0, 1, 3])
    np.testing.assert_array_equal(csr.sorted_token_ids.numpy(), [4, 4, 3, 1, 7])
    np.testing.assert_allclose(csr.sorted_gains.numpy(), [1 / 3, 1, 2 / 3, 1, 1], rtol=1e-6)
    assert int(csr.sample_count) == 4


def test_table_shards_variables_and_tables():
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(0.2))
    shards = {t.name: s for t, s in embedding.embedding_table_shards.items()}
    for name in ("A", "B"):
        devices = [tf.DeviceSpec.from_string(d).device_index for d, _ in shards[name]]
        assert devices == [0, 1]
        for k, (_, var) in enumerate(shards[name]):
            np.testing.assert_array_equal(var.numpy(), initial(name)[k::2])
    tables = {t.name: v for t, v in embedding.embedding_tables.items()}
    np.testing.assert_array_equal(tf.convert_to_tensor(tables["A"]).numpy(), initial("A"))
    variables = {t.name: v for t, v in embedding.variables.items()}
    assert sorted(variables["A"]) == ["accumulators", "parameters"]
    np.testing.assert_allclose(tf.convert_to_tensor(variables["B"]["accumulators"]).numpy(), 0.1)


def test_checkpoints_move_between_apis_and_replica_counts(tmp_path):
    strategy = mirrored(2)
    with strategy.scope():
        v2 = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(0.2))
    train_v2(strategy, v2, num_steps=2)
    path = tf.train.Checkpoint(embedding=v2).save(str(tmp_path / "v2"))
    trained = engine_state(v2.engine)
    v1 = TPUEmbedding(feature_config(), optimizers.Adagrad(0.2))  # 1 replica, 'div'
    tf.train.Checkpoint(embedding=v1).restore(path).assert_consumed()
    assert_state_close(engine_state(v1.engine), trained, tol=0)
    serving = TPUEmbeddingForServing(feature_config(), None)
    tf.train.Checkpoint(embedding=serving).restore(path).expect_partial()
    features, weights, _ = sample_slice(0, 4)
    acts, _ = v2(features, weights)
    served = serving(features, weights)
    for f in acts:
        np.testing.assert_allclose(served[f].numpy(), acts[f].numpy(), rtol=1e-6, atol=1e-6)


def test_none_gradients_and_static_shape_dequeue():
    table = config.TableConfig(
        10, 2, name="t", combiner="sum", initializer=tf.constant_initializer(np.arange(20.0).reshape(10, 2))
    )
    embedding = TPUEmbeddingV2(
        {"a": config.FeatureConfig(table), "b": config.FeatureConfig(table)}, optimizers.SGD(1.0)
    )
    enqueued = embedding.enqueue({"a": tf.constant([1, 2]), "b": tf.constant([2, 3])})
    acts, preserved = embedding.dequeue(dict(enqueued))  # Plain dict: shapes from the recorded static shapes.
    assert acts["a"].shape.as_list() == [2, 2]
    embedding.apply_gradients({"a": None, "b": tf.ones([2, 2])}, preserved)
    expected = np.arange(20.0).reshape(10, 2)
    expected[[2, 3]] -= 1.0
    np.testing.assert_allclose(embedding.engine.tables["t"].read_full_table().numpy(), expected)


def test_errors():
    table = config.TableConfig(10, 2, name="t")
    embedding = TPUEmbeddingV2({"a": config.FeatureConfig(table)}, optimizers.SGD(0.1))
    with pytest.raises(RuntimeError, match="unbuilt TPUEmbeddingV2"):
        embedding.apply_gradients({"a": tf.zeros([2, 2])}, {})
    _, preserved = embedding({"a": tf.constant([1, 2])})
    with pytest.raises(ValueError, match=r"Found gradient of shape \(2, 3\) at path a\. Expected shape \[2, 2\]\."):
        embedding.apply_gradients({"a": tf.zeros([2, 3])}, preserved)
    with pytest.raises(ValueError, match="Expect PartitionedCsrFormatTensor"):
        embedding.apply_gradients({"a": tf.zeros([2, 2])}, {"t": "nope"})
    with pytest.raises(ValueError, match="No preserved output for table 't'"):
        embedding.apply_gradients({"a": tf.zeros([2, 2])}, {})
    with pytest.raises(ValueError, match="rank 2 or above dense tensor"):
        embedding({"a": tf.constant([[1, 2]])})
    with pytest.raises(ValueError, match="structure"):
        embedding({"b": tf.constant([1])})
    assert preprocessing.PartitionedCsrFormatTensor._fields == UPSTREAM_CSR_FIELDS
