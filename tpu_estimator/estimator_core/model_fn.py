"""`EstimatorSpec`, what `model_fn` returns, and the check of `model_fn`'s arguments."""

import collections
from typing import Any

import tensorflow as tf

from tpu_estimator.estimator_core import _tf_internal
from tpu_estimator.estimator_core.inputs import fn_args
from tpu_estimator.estimator_core.mode_keys import ModeKeys

LOSS_METRIC_KEY = "loss"
AVERAGE_LOSS_METRIC_KEY = "average_loss"
_VALID_MODEL_FN_ARGS = frozenset(["features", "labels", "mode", "params", "self", "config"])

_NOT_FROM_DEFAULT_GRAPH = (
    '{0} with "{1}" must be from the default graph. '
    "Possible causes of this error include: \n\n"
    "1) {0} was created outside the context of the default graph."
    "\n\n"
    '2) The object passed through to EstimatorSpec was not created in the most recent call to "model_fn".'
)


class EstimatorSpec(
    collections.namedtuple(
        "EstimatorSpec",
        [
            "mode",
            "predictions",
            "loss",
            "train_op",
            "eval_metric_ops",
            "export_outputs",
            "training_chief_hooks",
            "training_hooks",
            "scaffold",
            "evaluation_hooks",
            "prediction_hooks",
        ],
    )
):
    """The ops and objects `model_fn` returns to the `Estimator`, validated for the mode.

    Args:
      mode: a `ModeKeys` value.
      predictions: a `Tensor` or dict of `Tensor`s; required in PREDICT.
      loss: a scalar `Tensor` (or shape `[1]`); required in TRAIN and EVAL.
      train_op: the training `Operation`/`Tensor`; required in TRAIN.
      eval_metric_ops: dict of `(metric_value, update_op)` tuples or Keras `Metric`s (updated in `model_fn`).
      export_outputs: dict of signature name to `ExportOutput`, for SavedModel export (PREDICT mode).
      training_chief_hooks: `SessionRunHook`s run on the chief only during training.
      training_hooks: `SessionRunHook`s run on every worker during training.
      scaffold: a `tf.compat.v1.train.Scaffold` (savers, init ops, summaries); default `Scaffold()`.
      evaluation_hooks: `SessionRunHook`s run during evaluation.
      prediction_hooks: `SessionRunHook`s run during prediction.

    Raises:
      ValueError: a required field is missing for `mode`, a non-scalar loss, or tensors from another graph.
      TypeError: fields of the wrong type.
    """

    def __new__(
        cls,
        mode,
        predictions=None,
        loss=None,
        train_op=None,
        eval_metric_ops=None,
        export_outputs=None,
        training_chief_hooks=None,
        training_hooks=None,
        scaffold=None,
        evaluation_hooks=None,
        prediction_hooks=None,
    ):
        train_op = _validate_train_op(train_op, mode)
        loss = _validate_loss(loss, mode)
        predictions = _validate_predictions(predictions, mode)
        if mode == ModeKeys.PREDICT:
            export_outputs = _tf_internal.get_export_outputs(export_outputs, predictions)
        return super(EstimatorSpec, cls).__new__(
            cls,
            mode=mode,
            predictions=predictions,
            loss=loss,
            train_op=train_op,
            eval_metric_ops=_validate_eval_metric_ops(eval_metric_ops),
            export_outputs=export_outputs,
            training_chief_hooks=_validate_hooks(training_chief_hooks),
            training_hooks=_validate_hooks(training_hooks),
            scaffold=_validate_scaffold(scaffold),
            evaluation_hooks=_validate_hooks(evaluation_hooks),
            prediction_hooks=_validate_hooks(prediction_hooks),
        )

    def _replace(self, **kwds):
        """A copy with some fields replaced, validated again; the mode cannot change.

        Raises:
          ValueError: `mode` is given and differs.
        """
        if "mode" in kwds and self.mode != kwds["mode"]:
            raise ValueError("mode of EstimatorSpec cannot be changed.")
        new_fields = map(kwds.pop, self._fields, list(self))
        return EstimatorSpec(*new_fields)


def _in_default_graph(value) -> bool:
    return tf.executing_eagerly() or value.graph is tf.compat.v1.get_default_graph()


def _check_is_tensor(x, name: str):
    if not isinstance(x, tf.compat.v2.__internal__.types.Tensor):
        raise TypeError("{} must be Tensor, given: {}".format(name, x))
    return x


def _validate_train_op(train_op, mode):
    if train_op is None:
        if mode == ModeKeys.TRAIN:
            raise ValueError("Missing train_op.")
        return None
    if not isinstance(train_op, (tf.Operation, tf.compat.v2.__internal__.types.Tensor)):
        raise TypeError("{} must be Operation or Tensor, given: {}".format("train_op", train_op))
    if isinstance(train_op, tf.Variable):
        train_op = train_op.op
    if not _in_default_graph(train_op):
        raise ValueError(_NOT_FROM_DEFAULT_GRAPH.format("train_op", train_op.name))
    return train_op


def _validate_loss(loss, mode):
    if loss is None:
        if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            raise ValueError("Missing loss.")
        return None
    loss = _check_is_tensor(loss, "loss")
    loss_shape = loss.get_shape()
    if loss_shape.num_elements() not in (None, 1):
        raise ValueError("Loss must be scalar, given: {}".format(loss))
    if not loss_shape.is_compatible_with(tf.TensorShape([])):
        loss = tf.reshape(loss, [])
    if not _in_default_graph(loss):
        raise ValueError(_NOT_FROM_DEFAULT_GRAPH.format("loss", loss.name))
    return loss


def _validate_predictions(predictions, mode):
    if predictions is None:
        if mode == ModeKeys.PREDICT:
            raise ValueError("Missing predictions.")
        return {}
    if isinstance(predictions, dict):
        predictions = {k: _check_is_tensor(v, "predictions[{}]".format(k)) for k, v in predictions.items()}
        for key, value in predictions.items():
            if not _in_default_graph(value):
                raise ValueError(
                    _NOT_FROM_DEFAULT_GRAPH.format("prediction values", "{0}: {1}".format(key, value.name))
                )
        return predictions
    predictions = _check_is_tensor(predictions, "predictions")
    if not _in_default_graph(predictions):
        raise ValueError(_NOT_FROM_DEFAULT_GRAPH.format("prediction values", predictions.name))
    return predictions


def instances_of(cls: type, values: Any, message: str) -> list:
    """`values` (None: none) as a list, each a `cls`.

    Raises:
      TypeError: `message.format(value)` for the first value that is not a `cls` (the caller's upstream text).
    """
    values = list(values or [])
    for value in values:
        if not isinstance(value, cls):
            raise TypeError(message.format(value))
    return values


def _validate_hooks(hooks) -> tuple:
    return tuple(
        instances_of(tf.compat.v1.train.SessionRunHook, hooks, "All hooks must be SessionRunHook instances, given: {}")
    )


def _is_keras_metric(value: Any) -> bool:
    # Not a (value, update_op) tuple: only then look at Keras, which imports lazily (tf-keras on TF 2.16+).
    if isinstance(value, tuple):
        return False
    return isinstance(value, tf.keras.metrics.Metric)


def _validate_eval_metric_ops(eval_metric_ops):
    """Checks the metrics; Keras `Metric`s become `(result, update)` tuples with their variables local."""
    if eval_metric_ops is None:
        return {}
    if not isinstance(eval_metric_ops, dict):
        raise TypeError("eval_metric_ops must be a dict, given: {}".format(eval_metric_ops))
    keras_metrics = {}
    for key, value in eval_metric_ops.items():
        if _is_keras_metric(value):
            if not value.updates:
                raise ValueError(
                    'Please call update_state(...) on the "{metric_name}" metric'.format(metric_name=value.name)
                )
            keras_metrics[key] = value
        elif not isinstance(value, tuple) or len(value) != 2:
            raise TypeError(
                "Values of eval_metric_ops must be (metric_value, update_op) tuples, given: {} for key: {}".format(
                    value, key
                )
            )
    for key, value in eval_metric_ops.items():
        if key in keras_metrics:
            values_to_check = value.updates[:] + [value.result()]
        else:
            values_to_check = tf.nest.flatten(value)
        for val in values_to_check:
            if not _in_default_graph(val):
                raise ValueError(_NOT_FROM_DEFAULT_GRAPH.format("eval_metric_ops", "{0}: {1}".format(key, val.name)))
    variables = set()
    for key, metric in keras_metrics.items():
        variables.update(metric.variables)
        eval_metric_ops[key] = (metric.result(), metric.updates[0])
    for collection in (tf.compat.v1.GraphKeys.LOCAL_VARIABLES, tf.compat.v1.GraphKeys.METRIC_VARIABLES):
        present = set(tf.compat.v1.get_collection(collection))
        for variable in variables - present:
            tf.compat.v1.add_to_collection(collection, variable)
    return eval_metric_ops


def _validate_scaffold(scaffold):
    scaffold = scaffold or tf.compat.v1.train.Scaffold()
    if not isinstance(scaffold, tf.compat.v1.train.Scaffold):
        raise TypeError("scaffold must be tf.train.Scaffold. Given: {}".format(scaffold))
    return scaffold


def verify_model_fn_args(model_fn, params) -> None:
    """Checks that `model_fn` takes `features`, takes `params` if params are given, and nothing unexpected.

    Raises:
      ValueError: `features` missing, `params` given but not accepted, or unknown arguments.
    """
    args = set(fn_args(model_fn))
    if "features" not in args:
        raise ValueError("model_fn (%s) must include features argument." % model_fn)
    if params is not None and "params" not in args:
        raise ValueError(
            "model_fn (%s) does not include params argument, but params (%s) is passed to Estimator."
            % (model_fn, params)
        )
    if params is None and "params" in args:
        tf.compat.v1.logging.warn(
            "Estimator's model_fn (%s) includes params argument, but params are not passed to Estimator.", model_fn
        )
    non_valid_args = list(args - _VALID_MODEL_FN_ARGS)
    if non_valid_args:
        raise ValueError("model_fn (%s) has following not expected args: %s" % (model_fn, non_valid_args))
