"""Evaluation metrics of the built-in click-through-rate models."""

from typing import Dict, Tuple

import tensorflow as tf

MetricOps = Dict[str, Tuple[tf.Tensor, tf.Tensor]]


def metric_fn(labels: tf.Tensor, logits: tf.Tensor) -> MetricOps:
    """AUC, log loss, accuracy, mean prediction and mean label, as `eval_metric_ops`.

    The `metric_fn` of `TPUEstimatorSpec(eval_metrics=(metric_fn, [labels, logits]))`: on shards it runs once on
    the host, on the tensors of every shard concatenated.

    Args:
      labels: float `[B]` of 0/1.
      logits: float `[B]`.

    Returns:
      `{name: (value, update_op)}` of `tf.compat.v1.metrics`.
    """
    labels = tf.cast(tf.reshape(labels, [-1]), tf.float32)
    logits = tf.reshape(logits, [-1])
    probabilities = tf.sigmoid(logits)
    log_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    return {
        "auc": tf.compat.v1.metrics.auc(
            labels, probabilities, num_thresholds=2000, summation_method="careful_interpolation"
        ),
        "log_loss": tf.compat.v1.metrics.mean(log_loss),
        "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.cast(probabilities > 0.5, tf.float32)),
        "mean_probability": tf.compat.v1.metrics.mean(probabilities),
        "mean_label": tf.compat.v1.metrics.mean(labels),
    }
