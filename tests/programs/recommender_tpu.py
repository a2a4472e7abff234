# Copyright 2019 The TensorFlow Authors. All Rights Reserved.
# Licensed under the Apache License, Version 2.0.
"""Next-item recommender with TPU embeddings, in the style of the TPUEstimator embedding reference models.

User and item ids are looked up in TPU embedding tables declared with
`tf.compat.v1.tpu.experimental.embedding_column` / `shared_embedding_columns` (the query item and the user's
history share one item table) and trained with the TPU embedding optimizer (`AdagradParameters`). PER_HOST_V2
input reads `params['context']`; a TF1 `tf.contrib.summary` host call runs every other step; evaluation reports
recall@k. Synthetic interactions; results written as JSON.
"""

import json

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags

flags.DEFINE_string("tpu", None, "The Cloud TPU to use for training.")
flags.DEFINE_string("model_dir", None, "Where checkpoints and summaries are written.")
flags.DEFINE_integer("train_steps", 6, "Number of training steps.")
flags.DEFINE_integer("eval_steps", 2, "Number of evaluation steps.")
flags.DEFINE_integer("batch_size", 32, "Global batch size.")
flags.DEFINE_integer("iterations_per_loop", 3, "Steps per training loop.")
flags.DEFINE_integer("num_shards", 2, "Number of TPU cores.")
flags.DEFINE_integer("host_call_every_n_steps", 2, "Run the host call every n steps.")
flags.DEFINE_integer("top_k", 5, "k of recall@k.")
flags.DEFINE_float("learning_rate", 0.1, "Learning rate of the dense layers and the embedding tables.")
flags.DEFINE_bool("use_tpu", True, "Use TPUs.")
flags.DEFINE_string("results", None, "Write the results as JSON to this file.")

FLAGS = flags.FLAGS

NUM_USERS = 40
NUM_ITEMS = 20
HISTORY_LENGTH = 3


def feature_columns():
    """The user column gets its own table; the query item and the history share the item table."""
    user = tf.feature_column.categorical_column_with_identity("user", NUM_USERS)
    query_item = tf.feature_column.categorical_column_with_identity("query_item", NUM_ITEMS)
    history = tf.feature_column.categorical_column_with_identity("history", NUM_ITEMS)
    user_embedding = tf.tpu.experimental.embedding_column(user, dimension=4, combiner="mean")
    item_embeddings = tf.tpu.experimental.shared_embedding_columns([query_item, history], dimension=8, combiner="mean")
    return [user_embedding] + item_embeddings


def synthetic_interactions(num_examples, seed):
    """Users like the item after the query item, shifted by their taste (user % 3)."""
    rng = np.random.RandomState(seed)
    user = rng.randint(0, NUM_USERS, size=num_examples).astype(np.int64)
    query_item = rng.randint(0, NUM_ITEMS, size=num_examples).astype(np.int64)
    history = rng.randint(0, NUM_ITEMS, size=(num_examples, HISTORY_LENGTH)).astype(np.int64)
    next_item = ((query_item + 1 + user % 3) % NUM_ITEMS).astype(np.int64)
    return {"user": user, "query_item": query_item, "history": history}, next_item


def make_input_fn(num_examples, seed, repeat):
    def input_fn(params):
        batch_size = params["batch_size"]
        features, labels = synthetic_interactions(num_examples, seed)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        if "context" in params:
            # Each input pipeline reads its own part of the data.
            _, index, total_invocations, _ = params["context"].current_input_fn_deployment()
            dataset = dataset.shard(total_invocations, index)
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(batch_size, drop_remainder=True)

    return input_fn


def predict_input_fn(params):
    features, _ = synthetic_interactions(10, seed=5)
    return tf.data.Dataset.from_tensor_slices(features).batch(params["batch_size"])


def model_fn(features, labels, mode, params):
    """Scores every item for each (user, query item, history)."""
    net = tf.keras.layers.DenseFeatures(feature_columns())(features)
    net = tf.layers.dense(net, 32, activation=tf.nn.relu, name="hidden")
    logits = tf.layers.dense(net, NUM_ITEMS, name="item_logits")

    if mode == tf.estimator.ModeKeys.PREDICT:
        top_scores, top_items = tf.nn.top_k(logits, k=FLAGS.top_k)
        return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"top_items": top_items, "top_scores": top_scores})

    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)

    if mode == tf.estimator.ModeKeys.EVAL:

        def metric_fn(labels, logits):
            labels = tf.reshape(tf.cast(labels, tf.int64), [-1, 1])
            return {
                "recall_at_%d" % FLAGS.top_k: tf.metrics.recall_at_k(labels, logits, k=FLAGS.top_k),
                "precision_at_1": tf.metrics.precision_at_k(labels, logits, k=1),
            }

        return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))

    global_step = tf.train.get_global_step()
    optimizer = tf.tpu.CrossShardOptimizer(tf.train.AdagradOptimizer(FLAGS.learning_rate))
    train_op = optimizer.minimize(loss, global_step=global_step)

    def host_call_fn(gs, per_example_loss):
        with tf.contrib.summary.create_file_writer(FLAGS.model_dir, max_queue=FLAGS.iterations_per_loop).as_default():
            with tf.contrib.summary.always_record_summaries():
                tf.contrib.summary.scalar("host_loss", tf.reduce_mean(per_example_loss), step=gs[0])
                tf.contrib.summary.scalar("host_global_step", tf.cast(gs[0], tf.float32), step=gs[0])
                return tf.contrib.summary.all_summary_ops()

    per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    host_call = (host_call_fn, [tf.reshape(global_step, [1]), per_example_loss])
    return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)


def main(unused_argv):
    tpu_cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=FLAGS.tpu)
    run_config = tf.estimator.tpu.RunConfig(
        cluster=tpu_cluster_resolver,
        model_dir=FLAGS.model_dir,
        save_checkpoints_steps=FLAGS.iterations_per_loop,
        tpu_config=tf.estimator.tpu.TPUConfig(
            iterations_per_loop=FLAGS.iterations_per_loop,
            num_shards=FLAGS.num_shards,
            per_host_input_for_training=tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2,
            experimental_host_call_every_n_steps=FLAGS.host_call_every_n_steps,
        ),
    )
    embedding_config_spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=feature_columns(),
        optimization_parameters=tf.tpu.experimental.AdagradParameters(
            learning_rate=FLAGS.learning_rate, initial_accumulator=0.1
        ),
    )
    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=run_config,
        use_tpu=FLAGS.use_tpu,
        train_batch_size=FLAGS.batch_size,
        eval_batch_size=FLAGS.batch_size,
        predict_batch_size=4,
        embedding_config_spec=embedding_config_spec,
    )

    estimator.train(make_input_fn(512, seed=0, repeat=True), max_steps=FLAGS.train_steps)
    metrics = estimator.evaluate(make_input_fn(128, seed=1, repeat=False), steps=FLAGS.eval_steps)
    tf.logging.info("Eval results: %s", metrics)
    predictions = list(estimator.predict(predict_input_fn))

    if FLAGS.results:
        with tf.gfile.GFile(FLAGS.results, "w") as f:
            json.dump(
                {
                    "metrics": {k: float(v) for k, v in metrics.items()},
                    "num_predictions": len(predictions),
                    "top_items": [p["top_items"].tolist() for p in predictions],
                    "variables": estimator.get_variable_names(),
                },
                f,
            )


if __name__ == "__main__":
    tf.disable_v2_behavior()
    app.run(main)
