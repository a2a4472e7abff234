"""The evaluation metrics an `Estimator` adds to `model_fn`'s: the mean `loss`, and splitting update ops."""

from typing import Any, Dict, Optional, Tuple

import tensorflow as tf

from tpu_estimator.estimator_core.model_fn import LOSS_METRIC_KEY


def add_loss_metric(eval_metric_ops: Dict[str, Any], loss) -> Dict[str, Any]:
    """Adds `loss`: the mean of the per-batch loss over the evaluation.

    Raises:
      ValueError: `model_fn` already defines a metric named `loss`.
    """
    if LOSS_METRIC_KEY in eval_metric_ops:
        raise ValueError(
            'Metric with name "%s" is not allowed, because Estimator already defines a default metric with the same '
            "name." % LOSS_METRIC_KEY
        )
    eval_metric_ops[LOSS_METRIC_KEY] = tf.compat.v1.metrics.mean(loss)
    return eval_metric_ops


def split_update_ops(eval_metric_ops: Dict[str, Any]) -> Tuple[Optional[tf.Operation], Dict[str, Any]]:
    """`(one op grouping every update op, {name: value tensor})`."""
    update_ops = []
    value_ops = {}
    for name, (value, update) in sorted(eval_metric_ops.items()):
        value_ops[name] = value
        update_ops.append(update)
    return (tf.group(*update_ops) if update_ops else None), value_ops
