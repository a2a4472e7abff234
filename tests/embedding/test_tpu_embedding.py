"""TPUEmbedding (TF2 mid-level API) on MirroredStrategy / OneDeviceStrategy / the default strategy.

The model, its inputs and its NumPy reference are in `tests.helpers.two_table_model` (shared with the other
mid-level API test modules); the reference formulas are in `tests.oracles`.
"""

import numpy as np
import pytest
import tensorflow as tf

import embedding
from embedding import config, optimizers
from embedding.tpu_embedding import TPUEmbedding
from tests.helpers.tables import assert_state_close, engine_state
from tests.helpers.two_table_model import (
    CASES,
    CAT,
    CPUS,
    DIM,
    GLOBAL_BATCH,
    NUM_STEPS,
    TABLE_OF,
    VOCAB,
    apply_loss_gradients,
    distributed_iterator,
    feature_config,
    initial,
    loss_fn,
    mirrored,
    reference_activations,
    reference_training,
    sample_slice,
    seed_evaluation_step,
    seed_training_step,
    with_weights,
)


@pytest.mark.parametrize("num_replicas", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_seed_training_loop_equals_numpy_reference(case, num_replicas):
    make_opt, kind, kwargs, lr = CASES[case]
    strategy = mirrored(num_replicas)
    with strategy.scope():
        embedding = TPUEmbedding(feature_config(), make_opt())
    iterator = distributed_iterator(strategy)
    seed_training_step(strategy, embedding)(iterator, tf.constant(NUM_STEPS))
    assert_state_close(engine_state(embedding.engine), reference_training(kind, kwargs, lr))


def test_seed_evaluation_loop_returns_activations_and_leaves_tables():
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(feature_config(), optimizers.SGD(0.1))
    outputs = {f: tf.Variable(tf.zeros([NUM_STEPS, GLOBAL_BATCH, DIM[TABLE_OF[f]]])) for f in TABLE_OF}
    seed_evaluation_step(strategy, embedding, outputs)(distributed_iterator(strategy), tf.constant(NUM_STEPS))
    params = {t: initial(t) for t in VOCAB}
    for step in range(NUM_STEPS):
        expected = reference_activations(params, step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
        for f in TABLE_OF:
            np.testing.assert_allclose(outputs[f][step].numpy(), expected[f], rtol=1e-5, atol=1e-6)
    for t in VOCAB:
        np.testing.assert_array_equal(engine_state(embedding.engine)[t]["params"], initial(t))


def test_per_replica_device_enqueue_form():
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(feature_config(), optimizers.Adagrad(0.2))
    iterator = distributed_iterator(strategy)

    @tf.function
    def step():
        embedding_features, user_w, tpu_features = next(iterator)
        per_core_features = strategy.experimental_local_results(embedding_features)
        per_core_weights = strategy.experimental_local_results(user_w)

        def per_core_enqueue(ctx):
            core_id = ctx.replica_id_in_sync_group
            device = strategy.extended.worker_devices[core_id]
            embedding.enqueue(
                per_core_features[core_id], weights=with_weights(per_core_weights[core_id]), device=device
            )

        strategy.experimental_distribute_values_from_function(per_core_enqueue)

        def tpu_step(targets):
            with tf.GradientTape() as tape:
                activations = embedding.dequeue()
                tape.watch(activations)
                loss = loss_fn(activations, targets)
            embedding.apply_gradients(tape.gradient(loss, activations))

        strategy.run(tpu_step, args=(tpu_features,))

    for _ in range(NUM_STEPS):
        step()
    assert_state_close(engine_state(embedding.engine), reference_training("adagrad", {}, 0.2))


def _eager_steps(embedding, strategy=None, in_function=False):
    def one(start):
        features, weights, targets = sample_slice(start, start + GLOBAL_BATCH)
        embedding.enqueue(features, weights=weights, training=True)

        if strategy is None:
            apply_loss_gradients(embedding, targets)
        else:
            strategy.run(lambda: apply_loss_gradients(embedding, targets))

    fn = tf.function(one) if in_function else one
    for step in range(NUM_STEPS):
        fn(tf.constant(step * GLOBAL_BATCH) if in_function else step * GLOBAL_BATCH)


@pytest.mark.parametrize("in_function", [False, True])
@pytest.mark.parametrize("strategy_kind", ["default", "one_device", "mirrored1"])
def test_single_replica_strategies_eager_and_function(strategy_kind, in_function):
    strategy = {"default": None, "one_device": tf.distribute.OneDeviceStrategy(CPUS[1]), "mirrored1": mirrored(1)}[
        strategy_kind
    ]
    if strategy is None:
        embedding = TPUEmbedding(feature_config(), optimizers.Adam(0.05))
    else:
        with strategy.scope():
            embedding = TPUEmbedding(feature_config(), optimizers.Adam(0.05))
    _eager_steps(embedding, strategy, in_function)
    assert_state_close(engine_state(embedding.engine), reference_training("adam", {}, 0.05))


def test_mirrored_eager_and_enqueue_inside_run():
    """Eager MirroredStrategy; enqueue called inside strategy.run gathers the replicas' inputs."""
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(
            feature_config(),
            optimizers.FTRL(0.2, l1_regularization_strength=0.01, l2_regularization_strength=0.01, beta=0.1),
        )
    iterator = distributed_iterator(strategy)

    def replica_step(features, user_w, targets):
        embedding.enqueue(features, weights=with_weights(user_w), training=True)
        apply_loss_gradients(embedding, targets)

    for _ in range(NUM_STEPS):
        strategy.run(replica_step, args=next(iterator))
    assert_state_close(
        engine_state(embedding.engine), reference_training("ftrl", dict(l1=0.01, l2=0.01, beta=0.1), 0.2)
    )


def test_tables_are_sharded_over_replica_devices():
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(feature_config(), optimizers.SGD(0.1))
    for table in embedding.engine.tables.values():
        assert [tf.DeviceSpec.from_string(s.device).device_index for s in table.shards] == [0, 1]
    tables = embedding.embedding_tables
    assert sorted(t.name for t in tables) == ["A", "B"]
    for t, value in tables.items():
        np.testing.assert_array_equal(tf.convert_to_tensor(value).numpy(), initial(t.name))


# ------------------------------------------------------------------------------------------ input rules
def _single(table_dim=2, vocab=10, **feature_kwargs):
    table = config.TableConfig(
        vocab,
        table_dim,
        initializer=tf.constant_initializer(np.arange(vocab * table_dim, dtype=np.float32).reshape(vocab, table_dim)),
        name="t",
        combiner="sum",
    )
    return {"f": config.FeatureConfig(table, **feature_kwargs)}


def _dequeue_shape(embedding, features):
    embedding.enqueue({"f": features})
    return embedding.dequeue()["f"]


@pytest.mark.parametrize(
    "features,feature_kwargs,expected",
    [
        (tf.constant([1, 2, 3]), {}, [3, 2]),
        (tf.constant([[1], [2], [3]]), {}, [3, 2]),
        (tf.constant([[[1], [2]], [[3], [4]]]), {}, [2, 2, 2]),
        (tf.ragged.constant([[1, 2], [3]]), {}, [2, 2]),
        (tf.ragged.constant([[1, 2, 3], [3]]), dict(max_sequence_length=2), [2, 2, 2]),
        (tf.sparse.from_dense(tf.constant([[1, 2, 0], [3, 0, 0]])), dict(max_sequence_length=4), [2, 4, 2]),
        (tf.sparse.from_dense(tf.constant([[[1, 2], [3, 0]], [[4, 0], [5, 6]]])), {}, [2, 2, 2]),
        (tf.constant([[1], [2], [3], [4]]), dict(output_shape=[2, 2]), [2, 2, 2]),
    ],
)
def test_output_shapes(features, feature_kwargs, expected):
    embedding = TPUEmbedding(_single(**feature_kwargs), optimizers.SGD(0.1))
    assert _dequeue_shape(embedding, features).shape.as_list() == expected


def test_sequence_values_truncate_and_pad():
    embedding = TPUEmbedding(_single(max_sequence_length=2), optimizers.SGD(0.1))
    out = _dequeue_shape(embedding, tf.ragged.constant([[1, 2, 3], [4]])).numpy()
    table = np.arange(20, dtype=np.float32).reshape(10, 2)
    np.testing.assert_array_equal(out, np.stack([table[[1, 2]], np.stack([table[4], np.zeros(2)])]))


@pytest.mark.parametrize(
    "features,weights,error,match",
    [
        (tf.constant(1), None, ValueError, "rank 1 and above"),
        (tf.constant([[1, 2], [3, 4]]), None, ValueError, "last dimension as 1"),
        (tf.SparseTensor([[0]], [1], [3]), None, ValueError, "rank 2 and above sparse"),
        (
            tf.RaggedTensor.from_nested_row_splits([1, 2, 3], [[0, 1, 3], [0, 1, 2, 3]]),
            None,
            ValueError,
            "only rank 2 ragged",
        ),
        (tf.constant([1, 2]), tf.constant([1.0, 1.0]), ValueError, "weight specified for dense input"),
        (
            tf.ragged.constant([[1], [2]]),
            tf.sparse.from_dense(tf.constant([[1.0], [1.0]])),
            ValueError,
            "does not match the type",
        ),
        (tf.constant(["a", "b"]), None, TypeError, "string ids"),
    ],
)
def test_input_errors(features, weights, error, match):
    embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    with pytest.raises(error, match=match):
        embedding.enqueue({"f": features}, {"f": weights} if weights is not None else None)


def test_out_of_range_ids_name_the_feature():
    embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Feature 'f'.*vocabulary_size"):
        embedding.enqueue({"f": tf.constant([1, 10])})


def test_structure_errors():
    embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    with pytest.raises(ValueError, match="structure of feature_config"):
        embedding.enqueue({"g": tf.constant([1])})
    with pytest.raises(TypeError, match="structure of feature_config"):
        embedding.enqueue([tf.constant([1])])
    embedding.enqueue({"f": tf.constant([1, 2])})
    with pytest.raises(ValueError):
        embedding.apply_gradients({"f": tf.zeros([2, 2]), "g": tf.zeros([2, 2])})


def test_inconsistent_shapes_across_steps_and_build():
    embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    embedding.build(per_replica_input_shapes={"f": tf.TensorShape([4, 1])})
    with pytest.raises(ValueError, match="Inconsistent shape founded for input feature f"):
        embedding.enqueue({"f": tf.constant([[1], [2]])})
    embedding2 = TPUEmbedding(_single(), optimizers.SGD(0.1))
    embedding2.build(per_replica_batch_size=2)
    embedding2.enqueue({"f": tf.constant([1, 2])})
    with pytest.raises(ValueError, match="Inconsistent shape"):
        embedding2.enqueue({"f": tf.constant([1, 2, 3])})


# ------------------------------------------------------------------------------------------ gradient rules
def test_gradient_shape_error_text():
    embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    embedding.enqueue({"f": tf.constant([1, 2, 3])})
    embedding.dequeue()
    with pytest.raises(ValueError, match=r"Found gradient of shape \(3, 3\) at path f\. Expected shape \[3, 2\]\."):
        embedding.apply_gradients({"f": tf.zeros([3, 3])})
    with pytest.raises(ValueError, match="found non-tensor type"):
        embedding.apply_gradients({"f": np.zeros([3, 2], np.float32)})


def test_gradient_shape_error_inside_mirrored_run():
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    features = strategy.experimental_distribute_values_from_function(
        lambda ctx: {"f": tf.constant([1, 2]) + ctx.replica_id_in_sync_group}
    )
    embedding.enqueue(features)
    with pytest.raises(ValueError, match=r"Found gradient of shape \(2, 5\) at path f\. Expected shape \[2, 2\]\."):
        strategy.run(lambda: embedding.apply_gradients({"f": tf.zeros([2, 5])}))


def test_none_gradient_is_zero_gradient():
    embedding = TPUEmbedding(feature_config(), optimizers.Adam(0.05))
    features, weights, _ = sample_slice(0, GLOBAL_BATCH)
    embedding.enqueue(features, weights)
    acts = embedding.dequeue()
    embedding.apply_gradients({"user": None, "item": None, "cat": None})
    zero_grads = {f: np.zeros_like(a.numpy()) for f, a in acts.items()}
    del zero_grads
    state = engine_state(embedding.engine)
    # Zero gradients: moments stay zero (m = 0.9*0 + 0.1*0), parameters unchanged.
    for t in VOCAB:
        np.testing.assert_array_equal(state[t]["params"], initial(t))
        np.testing.assert_array_equal(state[t]["momenta"], 0.0)

    embedding2 = TPUEmbedding(feature_config(), optimizers.SGD(0.1))
    embedding2.enqueue(features, weights)
    with tf.GradientTape() as tape:
        acts = embedding2.dequeue()
        tape.watch(acts)
        loss = tf.reduce_sum(acts["cat"])
    grads = tape.gradient(loss, acts)
    assert grads["user"] is None
    embedding2.apply_gradients(grads)
    state = engine_state(embedding2.engine)
    np.testing.assert_array_equal(state["A"]["params"], initial("A"))
    expected_b = initial("B").copy()
    for c in CAT[:GLOBAL_BATCH]:
        expected_b[c] -= 0.1
    np.testing.assert_allclose(state["B"]["params"], expected_b, rtol=1e-6)


def test_apply_after_inference_enqueue_is_an_error_not_a_deadlock():
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    features = strategy.experimental_distribute_values_from_function(lambda ctx: {"f": tf.constant([1, 2])})

    @tf.function
    def step():
        embedding.enqueue(features, training=False)

        def replica():
            acts = embedding.dequeue()
            embedding.apply_gradients({"f": tf.ones_like(acts["f"])})

        strategy.run(replica)

    with pytest.raises(RuntimeError, match="training=False"):
        step()


def test_dequeue_and_apply_before_enqueue_are_errors():
    embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    with pytest.raises(RuntimeError, match="unbuilt TPUEmbedding"):
        embedding.dequeue()
    with pytest.raises(RuntimeError, match="unbuilt TPUEmbedding"):
        embedding.apply_gradients({"f": None})
    embedding.build(per_replica_batch_size=2)
    with pytest.raises(RuntimeError, match="before enqueue"):
        embedding.dequeue()


def test_enqueue_eager_dequeue_in_function_is_an_error():
    embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    embedding.enqueue({"f": tf.constant([1, 2])})
    with pytest.raises(RuntimeError, match="same tf.function"):
        tf.function(embedding.dequeue)()


def test_training_without_optimizer_is_an_error():
    embedding = TPUEmbedding(_single(), None)
    embedding.enqueue({"f": tf.constant([1, 2])})
    embedding.dequeue()
    with pytest.raises(ValueError, match="no optimizer"):
        embedding.apply_gradients({"f": tf.ones([2, 2])})


def test_non_distributed_input_with_two_replicas_is_an_error():
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(_single(), optimizers.SGD(0.1))
    with pytest.raises(ValueError, match="non-distributed value"):
        embedding.enqueue({"f": tf.constant([1, 2])})
    with pytest.raises(ValueError, match="not a replica device"):
        embedding.enqueue({"f": tf.constant([1, 2])}, device="/cpu:3")


def test_unsupported_optimizer_and_duplicate_table_names():
    with pytest.raises(ValueError, match="unsupported optimizer"):
        TPUEmbedding(_single(), tf.keras.optimizers.SGD(0.1))
    t1 = config.TableConfig(5, 2, name="x")
    t2 = config.TableConfig(5, 2, name="x")
    with pytest.raises(ValueError, match="unique name"):
        TPUEmbedding({"a": config.FeatureConfig(t1), "b": config.FeatureConfig(t2)}, optimizers.SGD(0.1))


# ------------------------------------------------------------------------------------------ checkpoints
def test_checkpoint_layout_and_restore_across_replica_counts(tmp_path):
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(feature_config(), optimizers.Adagrad(0.2))
    seed_training_step(strategy, embedding)(distributed_iterator(strategy), tf.constant(2))
    path = tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "ckpt"))
    names = {n for n, _ in tf.train.list_variables(path)}
    assert {
        "embedding/A/.ATTRIBUTES/VARIABLE_VALUE",
        "embedding/A.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE",
        "embedding/B/.ATTRIBUTES/VARIABLE_VALUE",
    } <= names
    assert not any("shard" in n for n in names)
    trained = engine_state(embedding.engine)

    # Restore on one replica and continue: equals three uninterrupted steps.
    one = tf.distribute.OneDeviceStrategy(CPUS[0])
    with one.scope():
        restored = TPUEmbedding(feature_config(), optimizers.Adagrad(0.2))
    tf.train.Checkpoint(embedding=restored).restore(path).assert_consumed()
    assert_state_close(engine_state(restored.engine), trained, tol=0)
    features, weights, targets = sample_slice(2 * GLOBAL_BATCH, 3 * GLOBAL_BATCH)
    restored.enqueue(features, weights)

    one.run(lambda: apply_loss_gradients(restored, targets))
    assert_state_close(engine_state(restored.engine), reference_training("adagrad", {}, 0.2))


# ------------------------------------------------------------------------------------------ upstream objects
def test_upstream_configs_and_optimizer_are_accepted_and_key_the_tables():
    up = tf.tpu.experimental.embedding
    a = up.TableConfig(
        VOCAB["A"], DIM["A"], initializer=tf.constant_initializer(initial("A")), combiner="mean", name="A"
    )
    b = up.TableConfig(
        VOCAB["B"], DIM["B"], initializer=tf.constant_initializer(initial("B")), combiner="sum", name="B"
    )
    fc = {"user": up.FeatureConfig(a), "item": up.FeatureConfig(a), "cat": up.FeatureConfig(b)}
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(fc, up.Adagrad(0.2))
    seed_training_step(strategy, embedding)(distributed_iterator(strategy), tf.constant(NUM_STEPS))
    trained = reference_training("adagrad", {}, 0.2)
    tables = embedding.embedding_tables
    assert set(tables) == {a, b}
    for table, value in tables.items():
        np.testing.assert_allclose(
            tf.convert_to_tensor(value).numpy(), trained[table.name]["params"], rtol=1e-5, atol=1e-5
        )


def test_callable_learning_rate_is_read_every_step():
    lr = tf.Variable(0.1)
    strategy = mirrored(2)
    with strategy.scope():
        embedding = TPUEmbedding(feature_config(), optimizers.SGD(learning_rate=lambda: lr))
    step = seed_training_step(strategy, embedding)
    iterator = distributed_iterator(strategy)
    step(iterator, tf.constant(1))
    lr.assign(0.0)
    before = engine_state(embedding.engine)
    step(iterator, tf.constant(1))
    assert_state_close(engine_state(embedding.engine), before, tol=0)
    assert_state_close(before, reference_training("sgd", {}, 0.1, num_steps=1))


def test_pipelining_is_rejected_clearly():
    table = embedding.TableConfig(8, 2, name="t")
    features = {"f": embedding.FeatureConfig(table)}
    for cls in (embedding.TPUEmbedding, embedding.TPUEmbeddingV2):
        with pytest.raises(ValueError, match="pipeline_execution_with_tensor_core=True"):
            cls(features, embedding.SGD(0.1), pipeline_execution_with_tensor_core=True)
