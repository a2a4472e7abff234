"""Serving input of the test models that serve their raw features."""

import tensorflow as tf

from tpu_estimator import estimator as tf_estimator


def raw_serving_input_fn(arrays):
    """A `serving_input_receiver_fn` with one placeholder per array of `arrays` (name -> the feature's rows: its dtype
    and row shape, any number of rows), served as received."""

    def serving_input_fn():
        features = {
            name: tf.compat.v1.placeholder(tf.as_dtype(rows.dtype), [None, *rows.shape[1:]])
            for name, rows in arrays.items()
        }
        return tf_estimator.export.ServingInputReceiver(features, features)

    return serving_input_fn
