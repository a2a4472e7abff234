# Copyright 2018 The TensorFlow Authors. All Rights Reserved.
# Licensed under the Apache License, Version 2.0.
"""Train a (tiny) ResNet-style image classifier on TPU.

In the style of tensorflow/tpu models/official/resnet/resnet_main.py and efficientnet/main.py: bfloat16 compute
under `bfloat16_scope`, batch norm, momentum with `CrossShardOptimizer`, exponential moving averages restored by
`scaffold_fn` for evaluation and prediction, a `host_call` writing TensorBoard summaries, PER_HOST_V2 input that
reads `params['context']`, and `export_saved_model` for serving. Synthetic images; results written as JSON.
"""

import json
import os

import numpy as np
import tensorflow.compat.v1 as tf
import tensorflow.compat.v2 as tf2
from absl import app, flags

FLAGS = flags.FLAGS

flags.DEFINE_bool("use_tpu", default=True, help="Use TPU to execute the model for training and evaluation.")
flags.DEFINE_string("tpu", default=None, help="The Cloud TPU to use for training.")
flags.DEFINE_string("gcp_project", default=None, help="Project name for the Cloud TPU-enabled project.")
flags.DEFINE_string("tpu_zone", default=None, help="GCE zone where the Cloud TPU is located in.")
flags.DEFINE_string(
    "model_dir", default=None, help="The directory where the model and training/evaluation summaries are stored."
)
flags.DEFINE_string("export_dir", default=None, help="The directory where the exported SavedModel will be stored.")
flags.DEFINE_integer("train_steps", default=4, help="The number of steps to use for training.")
flags.DEFINE_integer("train_batch_size", default=16, help="Batch size for training.")
flags.DEFINE_integer("eval_batch_size", default=16, help="Batch size for evaluation.")
flags.DEFINE_integer("predict_batch_size", default=4, help="Batch size for prediction.")
flags.DEFINE_integer("eval_steps", default=1, help="Evaluation steps.")
flags.DEFINE_integer(
    "iterations_per_loop", default=2, help="Number of steps to run on TPU before outfeeding metrics to the CPU."
)
flags.DEFINE_integer("num_cores", default=2, help="Number of TPU cores in total.")
flags.DEFINE_integer("num_cores_per_replica", default=None, help="Model parallelism (cores per replica).")
flags.DEFINE_string("precision", default="bfloat16", help="Precision to use; one of: {bfloat16, float32}")
flags.DEFINE_float("base_learning_rate", default=0.1, help="Base learning rate.")
flags.DEFINE_float("momentum", default=0.9, help="Momentum parameter used in the MomentumOptimizer.")
flags.DEFINE_float("weight_decay", default=1e-4, help="Weight decay coefficiant for l2 regularization.")
flags.DEFINE_float("moving_average_decay", default=0.9, help="Moving average decay rate.")
flags.DEFINE_bool("skip_host_call", default=False, help="Skip the host_call which is executed every training step.")
flags.DEFINE_string("results", default=None, help="Write the results as JSON to this file.")

NUM_CLASSES = 10
IMAGE_SIZE = 16
NUM_TRAIN_IMAGES = 128


def get_ema_vars():
    """Get all exponential moving average (ema) variables."""
    ema_vars = tf.trainable_variables() + tf.get_collection("moving_vars")
    for v in tf.global_variables():
        # We maintain mva for batch norm moving mean and variance as well.
        if "moving_mean" in v.name or "moving_variance" in v.name:
            ema_vars.append(v)
    return list(set(ema_vars))


def resnet_model(inputs, is_training):
    """A two-block residual network."""
    x = tf.layers.conv2d(inputs, 8, 3, padding="same", use_bias=False, name="conv_initial")
    x = tf.layers.batch_normalization(x, training=is_training, fused=True, name="bn_initial")
    x = tf.nn.relu(x)
    shortcut = x
    x = tf.layers.conv2d(x, 8, 3, padding="same", use_bias=False, name="conv_block")
    x = tf.layers.batch_normalization(x, training=is_training, fused=True, name="bn_block")
    x = tf.nn.relu(x + shortcut)
    x = tf.reduce_mean(x, axis=[1, 2])
    return tf.layers.dense(x, NUM_CLASSES, name="dense")


def resnet_model_fn(features, labels, mode, params):
    """The model_fn for ResNet to be used with TPUEstimator."""
    if isinstance(features, dict):
        features = features["feature"]
    is_training = mode == tf.estimator.ModeKeys.TRAIN

    def build_network():
        return resnet_model(features, is_training)

    if FLAGS.precision == "bfloat16":
        with tf.tpu.bfloat16_scope():
            features = tf.cast(features, tf.bfloat16)
            logits = build_network()
        logits = tf.cast(logits, tf.float32)
    else:
        logits = build_network()

    global_step = tf.train.get_global_step()
    has_moving_average_decay = FLAGS.moving_average_decay > 0
    if has_moving_average_decay:
        ema = tf.train.ExponentialMovingAverage(decay=FLAGS.moving_average_decay, num_updates=global_step)
        ema_vars = get_ema_vars()

    scaffold_fn = None
    if has_moving_average_decay and not is_training:
        # Load moving average variables for eval and prediction.
        restore_vars_dict = ema.variables_to_restore(ema_vars)

        def _scaffold_fn():
            saver = tf.train.Saver(restore_vars_dict)
            return tf.train.Scaffold(saver=saver)

        scaffold_fn = _scaffold_fn

    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {
            "classes": tf.argmax(logits, axis=1),
            "probabilities": tf.nn.softmax(logits, name="softmax_tensor"),
        }
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode=mode,
            predictions=predictions,
            scaffold_fn=scaffold_fn,
            export_outputs={"classify": tf.estimator.export.PredictOutput(predictions)},
        )

    # If necessary, in the model_fn, use params['batch_size'] instead the batch size flags (--train_batch_size
    # or --eval_batch_size).
    batch_size = params["batch_size"]
    one_hot_labels = tf.one_hot(labels, NUM_CLASSES)
    cross_entropy = tf.losses.softmax_cross_entropy(logits=logits, onehot_labels=one_hot_labels)
    loss = cross_entropy + FLAGS.weight_decay * tf.add_n(
        [tf.nn.l2_loss(v) for v in tf.trainable_variables() if "batch_normalization" not in v.name]
    )

    host_call = None
    if is_training:
        steps_per_epoch = NUM_TRAIN_IMAGES / FLAGS.train_batch_size
        current_epoch = tf.cast(global_step, tf.float32) / steps_per_epoch
        learning_rate = tf.train.piecewise_constant(
            global_step, [2], [FLAGS.base_learning_rate, FLAGS.base_learning_rate * 0.1]
        )
        optimizer = tf.train.MomentumOptimizer(learning_rate=learning_rate, momentum=FLAGS.momentum, use_nesterov=True)
        if FLAGS.use_tpu:
            # When using TPU, wrap the optimizer with CrossShardOptimizer which handles synchronization details
            # between different TPU cores.
            optimizer = tf.tpu.CrossShardOptimizer(optimizer)

        # Batch normalization requires UPDATE_OPS to be added as a dependency to the train operation.
        update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update_ops):
            train_op = optimizer.minimize(loss, global_step)
        if has_moving_average_decay:
            with tf.control_dependencies([train_op]):
                train_op = ema.apply(ema_vars)

        if not FLAGS.skip_host_call:

            def host_call_fn(gs, loss, lr, ce):
                """Training host call. Creates scalar summaries for training metrics.

                Arguments should match the list of `Tensor` objects passed as the second element in the tuple passed
                to `host_call`.
                """
                gs = gs[0]
                # Host call fns are executed FLAGS.iterations_per_loop times after one TPU loop is finished, setting
                # max_queue value to the same as number of iterations will make the summary writer only flush the
                # data to storage once per loop.
                with tf2.summary.create_file_writer(FLAGS.model_dir, max_queue=FLAGS.iterations_per_loop).as_default():
                    with tf2.summary.record_if(True):
                        tf2.summary.scalar("loss", loss[0], step=gs)
                        tf2.summary.scalar("learning_rate", lr[0], step=gs)
                        tf2.summary.scalar("current_epoch", ce[0], step=gs)
                        return tf.summary.all_v2_summary_ops()

            # To log the loss, current learning rate, and epoch for Tensorboard, the summary op needs to be run on
            # the host CPU via host_call. host_call expects [batch_size, ...] Tensors, thus reshape to introduce a
            # batch dimension. These Tensors are implicitly concatenated to [params['batch_size']].
            gs_t = tf.reshape(global_step, [1])
            loss_t = tf.reshape(loss, [1])
            lr_t = tf.reshape(learning_rate, [1])
            ce_t = tf.reshape(current_epoch, [1])
            host_call = (host_call_fn, [gs_t, loss_t, lr_t, ce_t])
    else:
        train_op = None

    eval_metrics = None
    if mode == tf.estimator.ModeKeys.EVAL:

        def metric_fn(labels, logits):
            """Evaluation metric function. Evaluates accuracy."""
            predictions = tf.argmax(logits, axis=1)
            top_1_accuracy = tf.metrics.accuracy(labels, predictions)
            in_top_5 = tf.cast(tf.nn.in_top_k(logits, labels, 5), tf.float32)
            top_5_accuracy = tf.metrics.mean(in_top_5)
            return {"top_1_accuracy": top_1_accuracy, "top_5_accuracy": top_5_accuracy}

        assert batch_size == FLAGS.eval_batch_size // FLAGS.num_cores
        eval_metrics = (metric_fn, [labels, logits])

    return tf.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, train_op=train_op, host_call=host_call, eval_metrics=eval_metrics, scaffold_fn=scaffold_fn
    )


def synthetic_images(num_images, seed):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, NUM_CLASSES, size=num_images).astype(np.int32)
    images = rng.normal(size=(num_images, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
    images[:, :, :, 0] += labels[:, None, None] / NUM_CLASSES
    return images, labels


class ImageNetInput(object):
    """Generates (synthetic) ImageNet-like input for training or evaluation, as the reference input class."""

    def __init__(self, is_training, num_images, seed):
        self.is_training = is_training
        self.images, self.labels = synthetic_images(num_images, seed)

    def input_fn(self, params):
        """Input function which provides a single batch for train or eval."""
        # Retrieves the batch size for the current shard. The # of shards is computed according to the input
        # pipeline deployment. See tf.estimator.tpu.RunConfig for details.
        batch_size = params["batch_size"]
        if "context" in params:
            current_host = params["context"].current_input_fn_deployment()[1]
            num_hosts = params["context"].num_hosts
        else:
            current_host = 0
            num_hosts = 1
        dataset = tf.data.Dataset.from_tensor_slices((self.images, self.labels))
        dataset = dataset.shard(num_hosts, current_host)
        if self.is_training:
            dataset = dataset.repeat()
        dataset = dataset.batch(batch_size, drop_remainder=True)
        return dataset.prefetch(2)


def predict_input_fn(params):
    images, _ = synthetic_images(10, seed=7)
    return tf.data.Dataset.from_tensor_slices(images).batch(params["batch_size"])


def serving_input_fn():
    images = tf.placeholder(tf.float32, [None, IMAGE_SIZE, IMAGE_SIZE, 3], name="image")
    return tf.estimator.export.ServingInputReceiver(features=images, receiver_tensors={"image": images})


def main(unused_argv):
    tpu_cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        FLAGS.tpu if FLAGS.tpu else "", zone=FLAGS.tpu_zone, project=FLAGS.gcp_project
    )
    config = tf.estimator.tpu.RunConfig(
        cluster=tpu_cluster_resolver,
        model_dir=FLAGS.model_dir,
        save_checkpoints_steps=max(100, FLAGS.iterations_per_loop),
        log_step_count_steps=FLAGS.iterations_per_loop,
        session_config=tf.ConfigProto(allow_soft_placement=True),
        tpu_config=tf.estimator.tpu.TPUConfig(
            iterations_per_loop=FLAGS.iterations_per_loop,
            num_shards=FLAGS.num_cores,
            num_cores_per_replica=FLAGS.num_cores_per_replica,
            per_host_input_for_training=tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2,
        ),
    )

    resnet_classifier = tf.estimator.tpu.TPUEstimator(
        use_tpu=FLAGS.use_tpu,
        model_fn=resnet_model_fn,
        config=config,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.predict_batch_size,
        export_to_tpu=True,
    )

    imagenet_train = ImageNetInput(is_training=True, num_images=NUM_TRAIN_IMAGES, seed=0)
    imagenet_eval = ImageNetInput(is_training=False, num_images=32, seed=1)

    tf.logging.info(
        "Training for %d steps (%.2f epochs in total).",
        FLAGS.train_steps,
        FLAGS.train_steps * FLAGS.train_batch_size / NUM_TRAIN_IMAGES,
    )
    resnet_classifier.train(input_fn=imagenet_train.input_fn, max_steps=FLAGS.train_steps)
    eval_results = resnet_classifier.evaluate(input_fn=imagenet_eval.input_fn, steps=FLAGS.eval_steps)
    tf.logging.info("Eval results: %s", eval_results)

    predictions = list(resnet_classifier.predict(input_fn=predict_input_fn))

    export_path = None
    if FLAGS.export_dir:
        tf.logging.info("Starting to export model.")
        export_path = resnet_classifier.export_saved_model(
            export_dir_base=FLAGS.export_dir, serving_input_receiver_fn=serving_input_fn
        )
        export_path = export_path.decode("utf-8") if isinstance(export_path, bytes) else export_path

    if FLAGS.results:
        images, _ = synthetic_images(10, seed=7)
        np.save(os.path.join(os.path.dirname(FLAGS.results), "predict_inputs.npy"), images)
        with tf.gfile.GFile(FLAGS.results, "w") as f:
            json.dump(
                {
                    "metrics": {k: float(v) for k, v in eval_results.items()},
                    "num_predictions": len(predictions),
                    "classes": [int(p["classes"]) for p in predictions],
                    "probabilities": [p["probabilities"].tolist() for p in predictions],
                    "export_path": export_path,
                },
                f,
            )


if __name__ == "__main__":
    tf.logging.set_verbosity(tf.logging.INFO)
    tf.disable_v2_behavior()
    app.run(main)
