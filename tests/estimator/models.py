"""Small models and inputs shared by the estimator tests."""

import numpy as np
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import estimator as tf_estimator

RNG = np.random.RandomState(0)
X = RNG.randn(640, 5).astype(np.float32)
Y = (X @ RNG.randn(5, 1) + 0.1 * RNG.randn(640, 1)).astype(np.float32)


def dataset_input_fn(params):
    """Deterministic (x, y) batches of params['batch_size'], repeated."""
    return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(params["batch_size"], drop_remainder=True)


def make_model_fn(optimizer_wrapper=te.CrossShardOptimizer, learning_rate=0.1, record=None):
    """A 2-layer dense regression model (tf.compat.v1.layers + Keras) trained with SGD.

    Args:
      optimizer_wrapper: wraps the SGD optimizer (ours or upstream's CrossShardOptimizer), or None.
      learning_rate: SGD learning rate.
      record: optional list receiving (mode, params['batch_size'], device of the replica) per model_fn call.
    """

    def model_fn(features, labels, mode, params):
        if record is not None:
            record.append((mode, params.get("batch_size"), tf.constant(0.0).device, params.get("use_tpu")))
        hidden = tf.compat.v1.layers.dense(
            features, 4, activation=tf.nn.tanh, kernel_initializer=tf.compat.v1.constant_initializer(0.1)
        )
        out = tf.keras.layers.Dense(1, kernel_initializer="ones")(hidden)
        if mode == tf_estimator.ModeKeys.PREDICT:
            return te.TPUEstimatorSpec(mode, predictions={"y": out})
        loss = tf.reduce_mean(tf.square(out - labels))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
        if optimizer_wrapper is not None:
            optimizer = optimizer_wrapper(optimizer)
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())

        def metric_fn(labels, predictions):
            return {
                "mse": tf.compat.v1.metrics.mean_squared_error(labels, predictions),
                "mean_prediction": tf.compat.v1.metrics.mean(predictions),
            }

        return te.TPUEstimatorSpec(
            mode, loss=loss, train_op=train_op, eval_metrics=(metric_fn, [labels, out]), predictions={"y": out}
        )

    return model_fn


def numpy_forward(variables, x):
    """Forward pass of `make_model_fn`'s model from its variable values."""
    hidden = np.tanh(x @ variables["dense/kernel"] + variables["dense/bias"])
    return hidden @ variables["dense_1/kernel"] + variables["dense_1/bias"]


def variables_of(estimator):
    return {name: estimator.get_variable_value(name) for name in estimator.get_variable_names()}


def make_estimator(model_dir, num_shards=1, iterations_per_loop=4, model_fn=None, use_tpu=True, batch=32, **tpu_kwargs):
    config = te.RunConfig(
        model_dir=str(model_dir),
        tpu_config=te.TPUConfig(iterations_per_loop=iterations_per_loop, num_shards=num_shards, **tpu_kwargs),
    )
    return te.TPUEstimator(
        model_fn=model_fn or make_model_fn(),
        config=config,
        use_tpu=use_tpu,
        train_batch_size=batch,
        eval_batch_size=batch,
        predict_batch_size=8,
    )
