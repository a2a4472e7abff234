"""A TPUEstimator program with TPU embedding columns: trained on 2 shards, evaluated, predicted, exported, served.

Run: python examples/feature_columns.py
Environment: EXAMPLE_STEPS (training steps, default 200), EXAMPLE_MODEL_DIR (default: a new temporary directory).
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import experimental as tex

STEPS = int(os.environ.get("EXAMPLE_STEPS", "200"))
MODEL_DIR = os.environ.get("EXAMPLE_MODEL_DIR") or tempfile.mkdtemp(prefix="feature_columns_")
NUM_USERS, NUM_ITEMS = 100, 20
tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)  # TensorFlow's deprecation and per-step INFO lines


def make_data(num_rows, seed):
    """Synthetic clicks: a user clicks an item when the user's taste plus the item's appeal is positive."""
    rng = np.random.RandomState(seed)
    taste, appeal = np.random.RandomState(0).randn(NUM_USERS), np.random.RandomState(1).randn(NUM_ITEMS)
    features = {
        "user": rng.randint(0, NUM_USERS, num_rows).astype(np.int64),
        "item": rng.randint(0, NUM_ITEMS, num_rows).astype(np.int64),
        "price": rng.rand(num_rows, 1).astype(np.float32),
    }
    labels = (taste[features["user"]] + appeal[features["item"]] > 0).astype(np.float32)
    return features, labels


# TPU embedding columns: their tables live in the embedding engine, sharded over the shards, and are trained by
# the EmbeddingConfigSpec's optimizer (not by the model's optimizer).
EMBEDDING_COLUMNS = [
    tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("user", NUM_USERS), dimension=8
    ),
    tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.categorical_column_with_identity("item", NUM_ITEMS), dimension=8
    ),
]
PRICE = tf.feature_column.numeric_column("price")


def train_input_fn(params):
    # params["batch_size"]: the batch this input_fn must return (the global batch in the default PER_HOST_V1 mode).
    features, labels = make_data(4096, seed=2)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().shuffle(1024, seed=0)
    return dataset.batch(params["batch_size"], drop_remainder=True)  # shards need static shapes


def eval_input_fn(params):
    features, labels = make_data(1024, seed=3)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(params["batch_size"], drop_remainder=True)


def model_fn(features, labels, mode, params):
    # Traced once for all shards, with params["batch_size"] = the per-shard batch; features["user"] and
    # features["item"] hold the looked-up activations, which input_layer (or DenseFeatures) reads like any column.
    net = tf.compat.v1.feature_column.input_layer(features, EMBEDDING_COLUMNS + [PRICE])
    net = tf.keras.layers.Dense(16, activation=tf.nn.relu)(net)
    logits = tf.squeeze(tf.keras.layers.Dense(1)(net), axis=1)
    if mode == te.estimator.ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(mode, predictions={"probability": tf.sigmoid(logits)})

    loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
    if mode == te.estimator.ModeKeys.EVAL:

        def metric_fn(labels, logits):  # runs once on the host over all shards' tensors
            return {
                "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.cast(logits > 0, tf.float32)),
                "auc": tf.compat.v1.metrics.auc(labels, tf.sigmoid(logits)),
            }

        return te.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))

    optimizer = tf.compat.v1.train.AdamOptimizer(0.01)
    if params["use_tpu"]:
        optimizer = te.CrossShardOptimizer(optimizer)  # sums the gradients of all shards
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def serving_input_fn():
    # The SavedModel takes raw ids: its embedding lookups are plain TensorFlow ops on the full tables.
    features = {
        "user": tf.compat.v1.placeholder(tf.int64, [None], name="user"),
        "item": tf.compat.v1.placeholder(tf.int64, [None], name="item"),
        "price": tf.compat.v1.placeholder(tf.float32, [None, 1], name="price"),
    }
    return te.estimator.export.ServingInputReceiver(features, features)


def main():
    estimator = te.TPUEstimator(
        model_fn=model_fn,
        config=te.RunConfig(model_dir=MODEL_DIR, tpu_config=te.TPUConfig(iterations_per_loop=50, num_shards=2)),
        train_batch_size=64,
        eval_batch_size=64,
        predict_batch_size=8,
        embedding_config_spec=tex.EmbeddingConfigSpec(
            feature_columns=EMBEDDING_COLUMNS, optimization_parameters=tex.AdagradParameters(learning_rate=0.5)
        ),
    )
    estimator.train(train_input_fn, max_steps=STEPS)
    metrics = estimator.evaluate(eval_input_fn, steps=16)
    print(f"evaluation: accuracy {metrics['accuracy']:.3f}, AUC {metrics['auc']:.3f}, loss {metrics['loss']:.3f}")

    # predict() pads the last partial batch on the shards and drops the padding: one prediction per row.
    rows, _ = make_data(10, seed=4)
    predicted = [
        p["probability"]
        for p in estimator.predict(lambda params: tf.data.Dataset.from_tensor_slices(rows).batch(params["batch_size"]))
    ]

    # The export holds two metagraphs, {serve} (CPU) and {serve, tpu}: name the one to load.
    export_dir = estimator.export_saved_model(os.path.join(MODEL_DIR, "export"), serving_input_fn).decode()
    serve = tf.saved_model.load(export_dir, tags=["serve"]).signatures["serving_default"]
    served = serve(**{key: tf.constant(value) for key, value in rows.items()})["probability"].numpy()
    print(f"served {export_dir}: {np.round(served, 3)}")

    np.testing.assert_allclose(served, predicted, rtol=1e-5, atol=1e-6)
    assert len(predicted) == 10
    assert metrics["auc"] > 0.8, metrics


if __name__ == "__main__":
    main()
