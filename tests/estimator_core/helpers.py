"""Models, inputs and readers of Estimator outputs (event files, checkpoints, SavedModels) shared by the tests."""

import glob
import os

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

FEATURES = np.random.RandomState(0).rand(64, 3).astype("float32")
LABELS = (FEATURES @ np.array([[1.0], [-2.0], [0.5]], dtype="float32") + 0.25).astype("float32")


def input_fn(batch_size=8, repeat=True):
    """An `input_fn` of `({'x': [batch, 3]}, [batch, 1])` batches of the linear data above."""

    def fn():
        dataset = tf.data.Dataset.from_tensor_slices(({"x": FEATURES}, LABELS)).batch(batch_size)
        return dataset.repeat() if repeat else dataset

    return fn


def predict_input_fn(rows=5):
    return lambda: tf.data.Dataset.from_tensor_slices({"x": FEATURES[:rows]}).batch(2)


def linear_model_fn(estimator_lib, learning_rate=0.1):
    """A `model_fn` of a linear model with plain variables (no Keras): works on every TensorFlow."""

    def model_fn(features, labels, mode, params, config):
        del config
        w = tf.compat.v1.get_variable("w", [3, 1], initializer=tf.compat.v1.constant_initializer(0.1))
        b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
        pred = tf.matmul(features["x"], w) + b
        if mode == estimator_lib.ModeKeys.PREDICT:
            return estimator_lib.EstimatorSpec(
                mode,
                predictions={"y": pred, "double": 2 * pred},
                export_outputs={"out": estimator_lib.export.PredictOutput({"y": pred, "double": 2 * pred})},
            )
        loss = tf.reduce_mean(tf.square(pred - labels))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(params.get("learning_rate", learning_rate))
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        metrics = {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, pred)}
        return estimator_lib.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)

    return model_fn


def event_tags(directory):
    """The summary tags of the event files directly in `directory`."""
    tags = set()
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


def event_values(directory, tag):
    """`[(step, simple_value)]` of `tag` in the event files directly in `directory`."""
    values = []
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            values.extend((event.step, v.simple_value) for v in event.summary.value if v.tag == tag)
    return sorted(values)


def model_dir_files(directory):
    """The file names in `directory` except event files (their names hold a timestamp and the host)."""
    return sorted(name for name in os.listdir(directory) if not name.startswith("events.out.tfevents"))


def saved_model_signatures(export_dir):
    """`{tags: {signature key: (method, {input: (dtype, shape)}, {output: (dtype, shape)})}}` of a SavedModel."""
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())

    def tensors(infos):
        return {
            key: (
                info.dtype,
                tuple(d.size for d in info.tensor_shape.dim) if not info.tensor_shape.unknown_rank else None,
            )
            for key, info in infos.items()
        }

    return {
        tuple(sorted(meta_graph.meta_info_def.tags)): {
            key: (sig.method_name, tensors(sig.inputs), tensors(sig.outputs))
            for key, sig in meta_graph.signature_def.items()
        }
        for meta_graph in proto.meta_graphs
    }


def run_signature(export_dir, feeds, signature_key="serving_default", tags=("serve",)):
    """Runs a signature of a SavedModel in a fresh graph: `{output key: value}`."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, list(tags), export_dir)
        signature = meta_graph.signature_def[signature_key]
        feed_dict = {signature.inputs[key].name: value for key, value in feeds.items()}
        fetches = {key: info.name for key, info in signature.outputs.items()}
        return session.run(fetches, feed_dict=feed_dict)
