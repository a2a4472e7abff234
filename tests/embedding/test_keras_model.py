"""A tf_keras 2.15 model with the mid-level API in a custom training loop, then SavedModel export for serving.

Oracles: shard invariance (1 vs 2 replicas give the same embedding tables and dense weights) and export
invariance (the loaded SavedModel predicts what the training path predicts).
"""

import numpy as np
import pytest
import tensorflow as tf

tf_keras = pytest.importorskip("tf_keras")

from embedding import optimizers
from embedding.serving import (
    TPUEmbeddingForServing,
    serving_embedding_lookup,
)
from embedding.tpu_embedding import TPUEmbedding
from embedding.tpu_embedding_v2 import TPUEmbeddingV2
from tests.helpers.tables import engine_state
from tests.helpers.two_table_model import (
    GLOBAL_BATCH,
    NUM_STEPS,
    distributed_iterator,
    feature_config,
    mirrored,
    sample_slice,
    with_weights,
)

FEATURE_SPECS = {
    "user": tf.RaggedTensorSpec([None, None], tf.int64, 1),
    "item": tf.SparseTensorSpec([None, 3], tf.int32),
    "cat": tf.TensorSpec([None, 1], tf.int64),
}
USER_WEIGHT_SPEC = tf.RaggedTensorSpec([None, None], tf.float32, 1)


def make_model():
    inputs = {
        "user": tf_keras.Input([4], name="user"),
        "item": tf_keras.Input([4], name="item"),
        "cat": tf_keras.Input([3], name="cat"),
    }
    x = tf_keras.layers.Concatenate()([inputs["cat"], inputs["item"], inputs["user"]])
    x = tf_keras.layers.Dense(5, activation="tanh", kernel_initializer=tf_keras.initializers.GlorotUniform(7))(x)
    out = tf_keras.layers.Dense(1, kernel_initializer=tf_keras.initializers.GlorotUniform(8))(x)
    return tf_keras.Model(inputs, out)


def _labels(targets):
    return tf.reduce_sum(targets["cat"], axis=1, keepdims=True)


def train(num_replicas, api="v1"):
    strategy = mirrored(num_replicas)
    with strategy.scope():
        model = make_model()
        dense_opt = tf_keras.optimizers.SGD(0.1)
        if api == "v1":
            embedding = TPUEmbedding(feature_config(), optimizers.Adagrad(0.2))
        else:
            embedding = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(0.2))

    @tf.function
    def training_step(iterator, num_steps):
        def step(features, user_w, targets):
            with tf.GradientTape() as tape:
                if api == "v1":
                    activations = embedding.dequeue()
                else:
                    activations, preserved = embedding(features, with_weights(user_w))
                tape.watch(activations)
                per_example = tf.square(model(activations) - _labels(targets))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            emb_grads, dense_grads = tape.gradient(loss, (activations, model.trainable_variables))
            if api == "v1":
                embedding.apply_gradients(emb_grads)
            else:
                embedding.apply_gradients(emb_grads, preserved)
            dense_opt.apply_gradients(zip(dense_grads, model.trainable_variables))

        for _ in tf.range(num_steps):
            features, user_w, targets = next(iterator)
            if api == "v1":
                embedding.enqueue(features, weights=with_weights(user_w), training=True)
            strategy.run(step, args=(features, user_w, targets))

    training_step(distributed_iterator(strategy), tf.constant(NUM_STEPS))
    return model, embedding


@pytest.fixture(scope="module")
def trained():
    return {(r, api): train(r, api) for r, api in [(1, "v1"), (2, "v1"), (2, "v2")]}


def test_shard_invariance_of_keras_training(trained):
    model1, emb1 = trained[(1, "v1")]
    for key in [(2, "v1"), (2, "v2")]:
        model2, emb2 = trained[key]
        state1, state2 = engine_state(emb1.engine), engine_state(emb2.engine)
        for t in state1:
            for k in state1[t]:
                np.testing.assert_allclose(state2[t][k], state1[t][k], rtol=1e-5, atol=1e-6)
        for w1, w2 in zip(model1.get_weights(), model2.get_weights()):
            np.testing.assert_allclose(w2, w1, rtol=1e-5, atol=1e-6)
    # Training changed both the tables and the dense weights.
    assert not np.allclose(model1.get_weights()[0], make_model().get_weights()[0])
    assert not np.allclose(
        state1["A"]["params"], engine_state(TPUEmbedding(feature_config(), None).engine)["A"]["params"]
    )


def _training_path_predictions(model, embedding, start, stop):
    """Predictions through enqueue/dequeue, in batches of the training batch size (fixed once used)."""
    out = []
    for s in range(start, stop, GLOBAL_BATCH):
        features, weights, _ = sample_slice(s, s + GLOBAL_BATCH)
        embedding.enqueue(features, weights=weights, training=False)
        out.append(model(embedding.dequeue()).numpy())
    return np.concatenate(out)


def test_export_from_serving_object_after_checkpoint(trained, tmp_path):
    model, embedding = trained[(2, "v1")]
    path = tf.train.Checkpoint(model=model, embedding=embedding).save(str(tmp_path / "ckpt"))
    features, weights, _ = sample_slice(0, 8)
    expected = _training_path_predictions(*trained[(1, "v1")], 0, 8)  # == 2 replicas (invariance)

    serving_model = make_model()
    serving = TPUEmbeddingForServing(feature_config(), None)
    tf.train.Checkpoint(model=serving_model, embedding=serving).restore(path).expect_partial()
    serving_model.embedding_api = serving

    @tf.function(
        input_signature=[
            {
                "user": tf.TensorSpec([None, 1], tf.int64, name="user"),
                "item": tf.TensorSpec([None, 1], tf.int32, name="item"),
                "cat": tf.TensorSpec([None, 1], tf.int64, name="cat"),
            }
        ]
    )
    def serve_dense(ids):
        return serving_model(serving.embedding_lookup(ids))

    serving_model.serve_ragged = tf.function(
        lambda f, user_w: serving_model(serving.embedding_lookup(f, with_weights(user_w))),
        input_signature=[FEATURE_SPECS, USER_WEIGHT_SPEC],
    )
    export_dir = str(tmp_path / "saved")
    tf.saved_model.save(serving_model, export_dir, signatures={"serving_default": serve_dense})
    loaded = tf.saved_model.load(export_dir)
    got = loaded.serve_ragged(features, weights["user"]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

    dense_ids = {
        "user": tf.constant([[3], [0]], tf.int64),
        "item": tf.constant([[5], [2]]),
        "cat": tf.constant([[1], [6]], tf.int64),
    }
    out = loaded.signatures["serving_default"](**dense_ids)
    direct = serve_dense(dense_ids).numpy()
    np.testing.assert_allclose(list(out.values())[0].numpy(), direct, rtol=1e-6)


def test_export_directly_from_training_object(trained, tmp_path):
    """Upstream's note: the same serve function works from the (sharded) training object."""
    model, embedding = trained[(2, "v1")]
    features, weights, _ = sample_slice(4, 12)
    expected = _training_path_predictions(*trained[(1, "v1")], 4, 12)
    model.embedding_api = embedding

    @tf.function(input_signature=[FEATURE_SPECS, USER_WEIGHT_SPEC])
    def serve(f, user_w):
        return model(
            serving_embedding_lookup(
                f, with_weights(user_w), embedding.embedding_tables, embedding.engine.feature_config
            )
        )

    model.serve = serve
    export_dir = str(tmp_path / "saved_direct")
    tf.saved_model.save(model, export_dir)
    loaded = tf.saved_model.load(export_dir)
    np.testing.assert_allclose(loaded.serve(features, weights["user"]).numpy(), expected, rtol=1e-5, atol=1e-6)
