"""TPU embeddings configured with dicts (`table_to_config_dict` / `feature_to_config_dict`) in a TPUEstimator.

Two features share one table; input runs in PER_HOST_V2 mode (`input_fn` returns per-shard batches); the tables
are trained by Adam on 2 shards; the export is served with `tf.saved_model.load(path, tags=["serve"])`.

Run: python examples/dict_config.py
Environment: EXAMPLE_STEPS (training steps, default 200), EXAMPLE_MODEL_DIR (default: a new temporary directory).
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import experimental as tex

STEPS = int(os.environ.get("EXAMPLE_STEPS", "200"))
MODEL_DIR = os.environ.get("EXAMPLE_MODEL_DIR") or tempfile.mkdtemp(prefix="dict_config_")
NUM_USERS, NUM_ITEMS, HISTORY = 100, 30, 3


def make_data(num_rows, seed):
    """A user clicks the query item when taste + appeal > 0; `history` (3 items per row) is a bag of ids."""
    rng = np.random.RandomState(seed)
    taste, appeal = np.random.RandomState(0).randn(NUM_USERS), np.random.RandomState(1).randn(NUM_ITEMS)
    features = {
        "user": rng.randint(0, NUM_USERS, num_rows).astype(np.int64),
        "query_item": rng.randint(0, NUM_ITEMS, num_rows).astype(np.int64),
        "history": rng.randint(0, NUM_ITEMS, (num_rows, HISTORY)).astype(np.int64),
    }
    labels = (taste[features["user"]] + appeal[features["query_item"]] > 0).astype(np.float32)
    return features, labels


TABLES = {
    "users": tex.TableConfig(vocabulary_size=NUM_USERS, dimension=8),
    "items": tex.TableConfig(vocabulary_size=NUM_ITEMS, dimension=8, combiner="mean"),
}
FEATURES = {  # feature key -> table; 'query_item' and 'history' share the 'items' table
    "user": tex.FeatureConfig(table_id="users"),
    "query_item": tex.FeatureConfig(table_id="items"),
    "history": tex.FeatureConfig(table_id="items"),
}


def make_input_fn(num_rows, seed, repeat):
    def input_fn(params):
        # PER_HOST_V2: params["batch_size"] is the per-shard batch; params["context"] says which input pipeline
        # this call is (one per host here), for sharding files between hosts.
        _, index, total, _ = params["context"].current_input_fn_deployment()
        dataset = tf.data.Dataset.from_tensor_slices(make_data(num_rows, seed)).shard(total, index)
        if repeat:
            dataset = dataset.repeat().shuffle(1024, seed=0)
        return dataset.batch(params["batch_size"], drop_remainder=True)

    return input_fn


def model_fn(features, labels, mode, params):
    # Each embedding feature arrives as its activation: [per-shard batch, 8]; 'history' is the mean of its 3 rows.
    net = tf.concat([features["user"], features["query_item"], features["history"]], axis=1)
    net = tf.keras.layers.Dense(16, activation=tf.nn.relu)(net)
    logits = tf.squeeze(tf.keras.layers.Dense(1)(net), axis=1)
    if mode == te.estimator.ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(mode, predictions={"probability": tf.sigmoid(logits)})
    loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
    if mode == te.estimator.ModeKeys.EVAL:
        metric_fn = lambda labels, logits: {"auc": tf.compat.v1.metrics.auc(labels, tf.sigmoid(logits))}
        return te.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(0.01))
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def serving_input_fn():
    features = {
        "user": tf.compat.v1.placeholder(tf.int64, [None], name="user"),
        "query_item": tf.compat.v1.placeholder(tf.int64, [None], name="query_item"),
        "history": tf.compat.v1.placeholder(tf.int64, [None, HISTORY], name="history"),
    }
    return te.estimator.export.ServingInputReceiver(features, features)


def main():
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    tpu_config = te.TPUConfig(
        iterations_per_loop=50, num_shards=2, per_host_input_for_training=te.InputPipelineConfig.PER_HOST_V2
    )
    estimator = te.TPUEstimator(
        model_fn=model_fn,
        config=te.RunConfig(model_dir=MODEL_DIR, tpu_config=tpu_config),
        train_batch_size=64,
        eval_batch_size=64,
        predict_batch_size=8,
        embedding_config_spec=tex.EmbeddingConfigSpec(
            table_to_config_dict=TABLES,
            feature_to_config_dict=FEATURES,
            optimization_parameters=tex.AdamParameters(learning_rate=0.05),
        ),
    )
    estimator.train(make_input_fn(4096, seed=2, repeat=True), max_steps=STEPS)
    metrics = estimator.evaluate(make_input_fn(1024, seed=3, repeat=False), steps=8)
    print(f"evaluation: AUC {metrics['auc']:.3f}, loss {metrics['loss']:.3f}")

    rows, _ = make_data(10, seed=4)
    rows_input_fn = lambda params: tf.data.Dataset.from_tensor_slices(rows).batch(params["batch_size"])
    predicted = np.array([p["probability"] for p in estimator.predict(rows_input_fn)])
    export_dir = estimator.export_saved_model(os.path.join(MODEL_DIR, "export"), serving_input_fn).decode()
    serve = tf.saved_model.load(export_dir, tags=["serve"]).signatures["serving_default"]
    served = serve(**{key: tf.constant(value) for key, value in rows.items()})["probability"].numpy()
    print(f"served {export_dir}: {np.round(served, 3)}")

    np.testing.assert_allclose(served, predicted, rtol=1e-5, atol=1e-6)
    assert metrics["auc"] > 0.75, metrics


if __name__ == "__main__":
    main()
