# Copyright 2019 The TensorFlow Authors. All Rights Reserved.
# Licensed under the Apache License, Version 2.0.
"""Train a (tiny) EfficientNet-style classifier on TPU, making the calls of tensorflow/tpu's
models/official/efficientnet/main.py.

The calls kept as that program makes them: `from tensorflow.python.estimator import estimator` and
`estimator._load_global_step_from_checkpoint_dir(FLAGS.model_dir)` before its train_and_eval loop (train up to
`steps_per_eval`, evaluate, repeat); `from tensorflow.core.protobuf import rewriter_config_pb2` for the session
config; `tf.keras.backend.set_learning_phase`; bfloat16 input and `bfloat16_scope`; the double transpose of the
input (`transpose_input`); label smoothing; RMSProp with `CrossShardOptimizer`; exponential moving averages
restored by `scaffold_fn` for evaluation; a `host_call` of tf2 summaries; `tf.estimator.EstimatorSpec` in PREDICT
mode with `export_saved_model`. Only the network (two Keras layers, not EfficientNet-B0) and the data (synthetic,
not ImageNet files) are smaller. Results written as JSON.
"""

import json
import time

import numpy as np
import tensorflow.compat.v1 as tf
import tensorflow.compat.v2 as tf2  # used for summaries only.
from absl import app, flags, logging

# pylint: disable=g-direct-tensorflow-import
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.estimator import estimator

# pylint: enable=g-direct-tensorflow-import

FLAGS = flags.FLAGS

flags.DEFINE_bool("use_tpu", default=True, help="Use TPU to execute the model for training and evaluation.")
flags.DEFINE_string("tpu_job_name", None, help="Name of worker binary.")
flags.DEFINE_string("tpu", default=None, help="The Cloud TPU to use for training.")
flags.DEFINE_string("gcp_project", default=None, help="Project name for the Cloud TPU-enabled project.")
flags.DEFINE_string("tpu_zone", default=None, help="GCE zone where the Cloud TPU is located in.")
flags.DEFINE_string("model_dir", default=None, help="The directory where the model and summaries are stored.")
flags.DEFINE_string("mode", default="train_and_eval", help='One of {"train_and_eval", "train", "eval"}.')
flags.DEFINE_integer("train_steps", default=4, help="The number of steps to use for training.")
flags.DEFINE_integer("input_image_size", default=8, help="Input image size.")
flags.DEFINE_integer("train_batch_size", default=8, help="Batch size for training.")
flags.DEFINE_integer("eval_batch_size", default=8, help="Batch size for evaluation.")
flags.DEFINE_integer("num_train_images", default=64, help="Size of training data set.")
flags.DEFINE_integer("num_eval_images", default=16, help="Size of evaluation data set.")
flags.DEFINE_integer("steps_per_eval", default=2, help="Controls how often evaluation is performed.")
flags.DEFINE_bool("skip_host_call", default=False, help="Skip the host_call which is executed every training step.")
flags.DEFINE_integer("iterations_per_loop", default=2, help="Number of steps to run on TPU before outfeeding.")
flags.DEFINE_integer("log_step_count_steps", 64, "The number of steps at which the global step is logged.")
flags.DEFINE_integer("num_label_classes", default=10, help="Number of classes, at least 2")
flags.DEFINE_bool("transpose_input", default=True, help="Use TPU double transpose optimization")
flags.DEFINE_bool("use_bfloat16", default=True, help="Whether to use bfloat16 as activation for training.")
flags.DEFINE_string("export_dir", default=None, help="The directory where the exported SavedModel will be stored.")
flags.DEFINE_float("base_learning_rate", default=0.016, help="Base learning rate when train batch size is 256.")
flags.DEFINE_float("moving_average_decay", default=0.9999, help="Moving average decay rate.")
flags.DEFINE_float("weight_decay", default=1e-5, help="Weight decay coefficiant for l2 regularization.")
flags.DEFINE_float("label_smoothing", default=0.1, help="Label smoothing parameter used in the softmax_cross_entropy")
flags.DEFINE_string("results", default=None, help="Write the results as JSON to this file.")

MEAN_RGB = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STDDEV_RGB = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def get_ema_vars():
    """Get all exponential moving average (ema) variables."""
    ema_vars = tf.trainable_variables() + tf.get_collection("moving_vars")
    for v in tf.global_variables():
        # We maintain mva for batch norm moving mean and variance as well.
        if "moving_mean" in v.name or "moving_variance" in v.name:
            ema_vars.append(v)
    return list(set(ema_vars))


def build_model(features, training):
    """A stem convolution, batch norm, swish, pooling and the classifier head."""
    x = tf.keras.layers.Conv2D(8, 3, padding="same", use_bias=False, name="stem_conv")(features)
    x = tf.keras.layers.BatchNormalization(name="stem_bn")(x, training=training)
    x = tf.nn.swish(x)
    x = tf.reduce_mean(x, axis=[1, 2])
    return tf.keras.layers.Dense(FLAGS.num_label_classes, name="head")(x)


def model_fn(features, labels, mode, params):
    """The model_fn to be used with TPUEstimator."""
    if isinstance(features, dict):
        features = features["feature"]
    stats_shape = [1, 1, 3]
    input_image_size = FLAGS.input_image_size
    if FLAGS.transpose_input and mode != tf.estimator.ModeKeys.PREDICT:
        features = tf.reshape(features, [input_image_size, input_image_size, 3, -1])
        features = tf.transpose(features, [3, 0, 1, 2])  # HWCN to NHWC

    is_training = mode == tf.estimator.ModeKeys.TRAIN
    has_moving_average_decay = FLAGS.moving_average_decay > 0
    # This is essential, if using a keras-derived model.
    tf.keras.backend.set_learning_phase(is_training)

    def normalize_features(features, mean_rgb, stddev_rgb):
        features -= tf.constant(mean_rgb, shape=stats_shape, dtype=features.dtype)
        features /= tf.constant(stddev_rgb, shape=stats_shape, dtype=features.dtype)
        return features

    def build():
        return build_model(normalize_features(features, MEAN_RGB, STDDEV_RGB), is_training)

    if params["use_bfloat16"]:
        with tf.tpu.bfloat16_scope():
            logits = tf.cast(build(), tf.float32)
    else:
        logits = build()

    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"classes": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.EstimatorSpec(
            mode=mode,
            predictions=predictions,
            export_outputs={"classify": tf.estimator.export.PredictOutput(predictions)},
        )

    cross_entropy = tf.losses.softmax_cross_entropy(
        logits=logits, onehot_labels=labels, label_smoothing=FLAGS.label_smoothing
    )
    loss = cross_entropy + FLAGS.weight_decay * tf.add_n(
        [tf.nn.l2_loss(v) for v in tf.trainable_variables() if "batch_normalization" not in v.name]
    )

    global_step = tf.train.get_global_step()
    if has_moving_average_decay:
        ema = tf.train.ExponentialMovingAverage(decay=FLAGS.moving_average_decay, num_updates=global_step)
        ema_vars = get_ema_vars()

    host_call = None
    restore_vars_dict = None
    if is_training:
        current_epoch = tf.cast(global_step, tf.float32) / params["steps_per_epoch"]
        scaled_lr = FLAGS.base_learning_rate * (FLAGS.train_batch_size / 256.0)
        # utils.build_learning_rate's exponential schedule and utils.build_optimizer's rmsprop.
        learning_rate = tf.train.exponential_decay(
            scaled_lr, global_step, int(params["steps_per_epoch"] * 2.4), 0.97, staircase=True
        )
        optimizer = tf.train.RMSPropOptimizer(learning_rate, decay=0.9, momentum=0.9, epsilon=0.001)
        if FLAGS.use_tpu:
            optimizer = tf.tpu.CrossShardOptimizer(optimizer)

        update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update_ops):
            train_op = optimizer.minimize(loss, global_step)

        if has_moving_average_decay:
            with tf.control_dependencies([train_op]):
                train_op = ema.apply(ema_vars)

        if not FLAGS.skip_host_call:

            def host_call_fn(gs, lr, ce):
                gs = gs[0]
                with tf2.summary.create_file_writer(FLAGS.model_dir, max_queue=FLAGS.iterations_per_loop).as_default():
                    with tf2.summary.record_if(True):
                        tf2.summary.scalar("learning_rate", lr[0], step=gs)
                        tf2.summary.scalar("current_epoch", ce[0], step=gs)
                        return tf.summary.all_v2_summary_ops()

            gs_t = tf.reshape(global_step, [1])
            lr_t = tf.reshape(learning_rate, [1])
            ce_t = tf.reshape(current_epoch, [1])
            host_call = (host_call_fn, [gs_t, lr_t, ce_t])
    else:
        train_op = None
        if has_moving_average_decay:
            # Load moving average variables for eval.
            restore_vars_dict = ema.variables_to_restore(ema_vars)

    eval_metrics = None
    if mode == tf.estimator.ModeKeys.EVAL:

        def metric_fn(labels, logits):
            labels = tf.argmax(labels, axis=1)
            predictions = tf.argmax(logits, axis=1)
            top_1_accuracy = tf.metrics.accuracy(labels, predictions)
            in_top_5 = tf.cast(tf.nn.in_top_k(logits, labels, 5), tf.float32)
            top_5_accuracy = tf.metrics.mean(in_top_5)
            return {"top_1_accuracy": top_1_accuracy, "top_5_accuracy": top_5_accuracy}

        eval_metrics = (metric_fn, [labels, logits])

    num_params = np.sum([np.prod(v.shape) for v in tf.trainable_variables()])
    logging.info("number of trainable parameters: %d", num_params)

    def _scaffold_fn():
        saver = tf.train.Saver(restore_vars_dict)
        return tf.train.Scaffold(saver=saver)

    scaffold_fn = _scaffold_fn if has_moving_average_decay and not is_training else None
    return tf.estimator.tpu.TPUEstimatorSpec(
        mode=mode,
        loss=loss,
        train_op=train_op,
        host_call=host_call,
        eval_metrics=eval_metrics,
        scaffold_fn=scaffold_fn,
    )


class ImageNetInput(object):
    """imagenet_input.ImageNetInput's input_fn, on synthetic images."""

    def __init__(self, is_training, num_images, seed):
        self.is_training = is_training
        rng = np.random.RandomState(seed)
        size = FLAGS.input_image_size
        self.labels = rng.randint(0, FLAGS.num_label_classes, size=num_images).astype(np.int32)
        self.images = rng.uniform(0, 255, size=(num_images, size, size, 3)).astype(np.float32)

    def input_fn(self, params):
        batch_size = params["batch_size"]
        if "context" in params:
            current_host = params["context"].current_input_fn_deployment()[1]
            num_hosts = params["context"].num_hosts
        else:
            current_host = 0
            num_hosts = 1
        dataset = tf.data.Dataset.from_tensor_slices((self.images, self.labels)).shard(num_hosts, current_host)
        if self.is_training:
            dataset = dataset.repeat()

        def dataset_parser(image, label):
            if FLAGS.use_bfloat16:
                image = tf.cast(image, tf.bfloat16)
            return image, tf.one_hot(label, FLAGS.num_label_classes)

        dataset = dataset.map(dataset_parser).batch(batch_size, drop_remainder=True)
        if FLAGS.transpose_input:
            dataset = dataset.map(lambda images, labels: (tf.transpose(images, [1, 2, 3, 0]), labels))
        return dataset.prefetch(tf.data.experimental.AUTOTUNE)


def serving_input_fn():
    size = FLAGS.input_image_size
    images = tf.placeholder(tf.float32, [None, size, size, 3], name="image")
    return tf.estimator.export.ServingInputReceiver(features=images, receiver_tensors={"image": images})


def main(unused_argv):
    tpu_cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        FLAGS.tpu, zone=FLAGS.tpu_zone, project=FLAGS.gcp_project
    )
    config = tf.estimator.tpu.RunConfig(
        cluster=tpu_cluster_resolver,
        model_dir=FLAGS.model_dir,
        save_checkpoints_steps=max(100, FLAGS.iterations_per_loop),
        log_step_count_steps=FLAGS.log_step_count_steps,
        session_config=tf.ConfigProto(
            graph_options=tf.GraphOptions(
                rewrite_options=rewriter_config_pb2.RewriterConfig(disable_meta_optimizer=True)
            )
        ),
        tpu_config=tf.estimator.tpu.TPUConfig(
            iterations_per_loop=FLAGS.iterations_per_loop,
            tpu_job_name=FLAGS.tpu_job_name,
            per_host_input_for_training=tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2,
        ),
    )
    params = dict(steps_per_epoch=FLAGS.num_train_images / FLAGS.train_batch_size, use_bfloat16=FLAGS.use_bfloat16)
    est = tf.estimator.tpu.TPUEstimator(
        use_tpu=FLAGS.use_tpu,
        model_fn=model_fn,
        config=config,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        export_to_tpu=False,
        params=params,
    )
    imagenet_train = ImageNetInput(is_training=True, num_images=FLAGS.num_train_images, seed=0)
    imagenet_eval = ImageNetInput(is_training=False, num_images=FLAGS.num_eval_images, seed=1)

    current_step = estimator._load_global_step_from_checkpoint_dir(FLAGS.model_dir)  # pylint: disable=protected-access
    start_step = current_step
    logging.info(
        "Training for %d steps (%.2f epochs in total). Current step %d.",
        FLAGS.train_steps,
        FLAGS.train_steps / params["steps_per_epoch"],
        current_step,
    )
    start_timestamp = time.time()
    evaluations = []
    while current_step < FLAGS.train_steps:
        next_checkpoint = min(current_step + FLAGS.steps_per_eval, FLAGS.train_steps)
        est.train(input_fn=imagenet_train.input_fn, max_steps=next_checkpoint)
        current_step = next_checkpoint
        logging.info(
            "Finished training up to step %d. Elapsed seconds %d.", next_checkpoint, int(time.time() - start_timestamp)
        )
        eval_results = est.evaluate(
            input_fn=imagenet_eval.input_fn, steps=FLAGS.num_eval_images // FLAGS.eval_batch_size
        )
        logging.info("Eval results at step %d: %s", next_checkpoint, eval_results)
        evaluations.append({k: float(v) for k, v in eval_results.items()})

    export_path = None
    if FLAGS.export_dir:
        export_path = est.export_saved_model(
            export_dir_base=FLAGS.export_dir, serving_input_receiver_fn=serving_input_fn
        )
        export_path = export_path.decode("utf-8") if isinstance(export_path, bytes) else export_path

    if FLAGS.results:
        with tf.gfile.GFile(FLAGS.results, "w") as f:
            json.dump(
                {
                    "start_step": int(start_step),
                    "start_step_type": type(start_step).__name__,
                    "evaluations": evaluations,
                    "export_path": export_path,
                },
                f,
            )


if __name__ == "__main__":
    logging.set_verbosity(logging.INFO)
    app.run(main)
