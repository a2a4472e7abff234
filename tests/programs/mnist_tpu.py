# Copyright 2017 The TensorFlow Authors. All Rights Reserved.
# Licensed under the Apache License, Version 2.0.
"""MNIST on TPU, in the style of tensorflow/tpu models/official/mnist/mnist_tpu.py.

Trains a small convolutional classifier with TPUEstimator, evaluates it and predicts. Uses synthetic,
MNIST-shaped data so that it runs anywhere, and writes its results as JSON (for tests).
"""

import json

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags

# Cloud TPU Cluster Resolvers
flags.DEFINE_string(
    "tpu",
    default=None,
    help="The Cloud TPU to use for training. This should be either the name used when creating the Cloud TPU, "
    "or a grpc://ip.address.of.tpu:8470 url.",
)
flags.DEFINE_string("tpu_zone", default=None, help="GCE zone where the Cloud TPU is located in.")
flags.DEFINE_string("gcp_project", default=None, help="Project name for the Cloud TPU-enabled project.")

# Model specific parameters
flags.DEFINE_string("model_dir", None, "Estimator model_dir")
flags.DEFINE_integer(
    "batch_size",
    16,
    "Mini-batch size for the training. Note that this is the global batch size and not the per-shard batch.",
)
flags.DEFINE_integer("train_steps", 6, "Total number of training steps.")
flags.DEFINE_integer("eval_steps", 2, "Total number of evaluation steps.")
flags.DEFINE_float("learning_rate", 0.05, "Learning rate.")
flags.DEFINE_bool("use_tpu", True, "Use TPUs rather than plain CPUs")
flags.DEFINE_integer("iterations", 3, "Number of iterations per TPU training loop.")
flags.DEFINE_integer("num_shards", 2, "Number of shards (TPU chips).")
flags.DEFINE_string("results", None, "Write the results as JSON to this file.")

FLAGS = flags.FLAGS


def metric_fn(labels, logits):
    accuracy = tf.metrics.accuracy(labels=labels, predictions=tf.argmax(logits, axis=1))
    return {"accuracy": accuracy}


def create_model(image, training):
    """Model to recognize digits in the MNIST dataset (a smaller version of the reference model)."""
    x = tf.reshape(image, [-1, 28, 28, 1])
    x = tf.layers.conv2d(x, 4, 5, padding="same", activation=tf.nn.relu, name="conv1")
    x = tf.layers.max_pooling2d(x, 4, 4, padding="same")
    x = tf.layers.flatten(x)
    x = tf.layers.dense(x, 32, activation=tf.nn.relu, name="dense1")
    x = tf.layers.dropout(x, 0.4, training=training)
    return tf.layers.dense(x, 10, name="logits")


def model_fn(features, labels, mode, params):
    """model_fn constructs the ML model used to predict handwritten digits."""
    del params
    image = features
    if isinstance(image, dict):
        image = features["image"]

    if mode == tf.estimator.ModeKeys.PREDICT:
        logits = create_model(image, training=False)
        predictions = {
            "class_ids": tf.argmax(logits, axis=1),
            "probabilities": tf.nn.softmax(logits),
        }
        return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions=predictions)

    logits = create_model(image, training=(mode == tf.estimator.ModeKeys.TRAIN))
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)

    if mode == tf.estimator.ModeKeys.TRAIN:
        learning_rate = tf.train.exponential_decay(
            FLAGS.learning_rate, tf.train.get_global_step(), decay_steps=100000, decay_rate=0.96
        )
        optimizer = tf.train.GradientDescentOptimizer(learning_rate=learning_rate)
        if FLAGS.use_tpu:
            optimizer = tf.tpu.CrossShardOptimizer(optimizer)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode=mode, loss=loss, train_op=optimizer.minimize(loss, tf.train.get_global_step())
        )

    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))


def synthetic_mnist(num_examples, seed):
    """MNIST-shaped images (784 floats) whose label is decided by which tenth of the image is bright."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=num_examples).astype(np.int32)
    images = rng.uniform(0, 0.1, size=(num_examples, 784)).astype(np.float32)
    for i, label in enumerate(labels):
        images[i, label * 78 : (label + 1) * 78] += 0.9
    return images, labels


def train_input_fn(params):
    """train_input_fn defines the input pipeline used for training."""
    batch_size = params["batch_size"]
    images, labels = synthetic_mnist(256, seed=1)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).cache().repeat().shuffle(buffer_size=256, seed=1)
    return ds.batch(batch_size, drop_remainder=True)


def eval_input_fn(params):
    batch_size = params["batch_size"]
    images, labels = synthetic_mnist(64, seed=2)
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    return ds.batch(batch_size, drop_remainder=True)


def predict_input_fn(params):
    batch_size = params["batch_size"]
    images, _ = synthetic_mnist(64, seed=3)
    # Take out top 10 samples from test data to make the predictions: the last batch is partial.
    ds = tf.data.Dataset.from_tensor_slices(images).take(10)
    return ds.batch(batch_size)


def main(argv):
    del argv  # Unused.
    tf.logging.set_verbosity(tf.logging.INFO)

    tpu_cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        FLAGS.tpu, zone=FLAGS.tpu_zone, project=FLAGS.gcp_project
    )

    run_config = tf.estimator.tpu.RunConfig(
        cluster=tpu_cluster_resolver,
        model_dir=FLAGS.model_dir,
        session_config=tf.ConfigProto(allow_soft_placement=True, log_device_placement=False),
        tpu_config=tf.estimator.tpu.TPUConfig(FLAGS.iterations, FLAGS.num_shards),
    )

    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        use_tpu=FLAGS.use_tpu,
        train_batch_size=FLAGS.batch_size,
        eval_batch_size=FLAGS.batch_size,
        predict_batch_size=4,
        params={},
        config=run_config,
    )
    # TPUEstimator.train *requires* a max_steps argument.
    estimator.train(input_fn=train_input_fn, max_steps=FLAGS.train_steps)
    # TPUEstimator.evaluate *requires* a steps argument.
    metrics = estimator.evaluate(input_fn=eval_input_fn, steps=FLAGS.eval_steps)
    tf.logging.info("Eval results: %s", metrics)

    predictions = list(estimator.predict(input_fn=predict_input_fn))
    for pred_dict in predictions:
        tf.logging.info(
            "Prediction is %s (%.1f%%)",
            pred_dict["class_ids"],
            100 * pred_dict["probabilities"][pred_dict["class_ids"]],
        )

    if FLAGS.results:
        with tf.gfile.GFile(FLAGS.results, "w") as f:
            json.dump(
                {
                    "metrics": {k: float(v) for k, v in metrics.items()},
                    "num_predictions": len(predictions),
                    "class_ids": [int(p["class_ids"]) for p in predictions],
                    "estimator_class": "{}.{}".format(type(estimator).__module__, type(estimator).__name__),
                },
                f,
            )


if __name__ == "__main__":
    tf.disable_v2_behavior()
    app.run(main)
