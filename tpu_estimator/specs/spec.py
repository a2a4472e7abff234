"""`TPUEstimatorSpec`: what `model_fn` returns, with upstream's validation and CPU conversion."""

import collections
import dataclasses
from typing import Any, Callable

import tensorflow as tf

from tpu_estimator import _estimator_lib, _keras2
from tpu_estimator.specs import host_call_spec


class TPUEstimatorSpec(
    collections.namedtuple(
        "TPUEstimatorSpec",
        [
            "mode",
            "predictions",
            "loss",
            "train_op",
            "eval_metrics",
            "export_outputs",
            "scaffold_fn",
            "host_call",
            "training_hooks",
            "evaluation_hooks",
            "prediction_hooks",
        ],
    )
):
    """Ops and objects returned from a `model_fn` and passed to `TPUEstimator`.

    `eval_metrics` is `(metric_fn, tensors)` and `host_call` is `(host_fn, tensors)`, with `tensors` a list/tuple
    or dict; on shards the tensors of every replica are concatenated on axis 0 and the function runs once on the
    host. `scaffold_fn` is a zero-argument function returning a `tf.compat.v1.train.Scaffold`, called on the host.

    Raises:
      ValueError, TypeError: malformed `eval_metrics`/`host_call`, hooks that are not `SessionRunHook`s.
    """

    def __new__(
        cls,
        mode,
        predictions=None,
        loss=None,
        train_op=None,
        eval_metrics=None,
        export_outputs=None,
        scaffold_fn=None,
        host_call=None,
        training_hooks=None,
        evaluation_hooks=None,
        prediction_hooks=None,
    ):
        calls = {}
        if eval_metrics is not None:
            calls["eval_metrics"] = eval_metrics
        if host_call is not None:
            calls["host_call"] = host_call
        host_call_spec.validate(calls)
        training_hooks = tuple(training_hooks or [])
        evaluation_hooks = tuple(evaluation_hooks or [])
        prediction_hooks = tuple(prediction_hooks or [])
        for hook in training_hooks + evaluation_hooks + prediction_hooks:
            if not isinstance(hook, tf.compat.v1.train.SessionRunHook):
                raise TypeError("All hooks must be SessionRunHook instances, given: {}".format(hook))
        return super(TPUEstimatorSpec, cls).__new__(
            cls,
            mode=mode,
            predictions=predictions,
            loss=loss,
            train_op=train_op,
            eval_metrics=eval_metrics,
            export_outputs=export_outputs,
            scaffold_fn=scaffold_fn,
            host_call=host_call,
            training_hooks=training_hooks,
            evaluation_hooks=evaluation_hooks,
            prediction_hooks=prediction_hooks,
        )

    def as_estimator_spec(self) -> _estimator_lib.EstimatorSpec:
        """The equivalent `EstimatorSpec` of the CPU path: host calls run every step, `scaffold_fn()` called.

        Raises:
          ValueError: `scaffold_fn` returned None.
        """
        eval_metric_ops = None
        if self.eval_metrics is not None:
            eval_metric_ops = host_call_spec.call(self.eval_metrics)
        hooks = ()
        if self.host_call is not None:
            hooks = (host_call_spec.CpuHostCallHook(host_call_spec.call(self.host_call)),)
        scaffold = call_scaffold_fn(self.scaffold_fn)
        return _estimator_lib.EstimatorSpec(
            mode=self.mode,
            predictions=self.predictions,
            loss=self.loss,
            train_op=self.train_op,
            eval_metric_ops=eval_metric_ops,
            export_outputs=self.export_outputs,
            scaffold=scaffold,
            training_hooks=self.training_hooks + hooks,
            evaluation_hooks=self.evaluation_hooks + hooks,
            prediction_hooks=self.prediction_hooks + hooks,
        )


def call_scaffold_fn(scaffold_fn):
    """Calls `scaffold_fn` (if any) and checks its result.

    Raises:
      ValueError: `scaffold_fn` returned None.
    """
    if scaffold_fn is None:
        return None
    scaffold = scaffold_fn()
    if scaffold is None:
        raise ValueError("TPUEstimatorSpec.scaffold_fn returns None, which is not allowed")
    return scaffold


@dataclasses.dataclass(frozen=True)
class ModelFnSettings:
    """What a call of the user's `model_fn` needs from the estimator (each mode's settings add their own).

    Attributes:
      model_fn: the user's `model_fn`.
      config: the `RunConfig` passed to `model_fn`.
      params: the estimator's params (the mode adds `batch_size`, `use_tpu` or `context` to a copy).
    """

    model_fn: Callable
    config: Any
    params: dict


def call_user_model_fn(model_fn, features, labels, mode, config, params):
    """Calls the user's `model_fn` with the arguments it declares, as upstream does.

    Raises:
      ValueError: `model_fn` lacks `params`, or does not take labels while the input has them.
      Keras2RequiredError: `model_fn` used a Keras 2 API (`tf.compat.v1.layers`) while `tf.keras` is Keras 3.
    """
    model_fn_args = _estimator_lib.fn_args(model_fn)
    kwargs = {}
    if "labels" in model_fn_args:
        kwargs["labels"] = labels
    elif labels is not None:
        raise ValueError("model_fn does not take labels, but input_fn returns labels.")
    if "mode" in model_fn_args:
        kwargs["mode"] = mode
    if "config" in model_fn_args:
        kwargs["config"] = config
    if "params" not in model_fn_args:
        raise ValueError(
            "model_fn ({}) does not include params argument, required by TPUEstimator to pass batch "
            "size as params['batch_size']".format(model_fn)
        )
    kwargs["params"] = params
    try:
        return model_fn(features=features, **kwargs)
    except AttributeError as error:
        if _keras2.is_keras3_layers_error(error):  # `tf.compat.v1.layers.dense` with tf.keras already Keras 3
            raise _keras2.Keras2RequiredError(
                _keras2.message("model_fn's Keras 2 API ({})".format(error), "tf.keras is Keras 3")
            ) from error
        raise


def verify_spec_on_shards(spec, mode: str) -> TPUEstimatorSpec:
    """Upstream's checks on what `model_fn` returns on shards; returns it as a `TPUEstimatorSpec` (a TRAIN
    `EstimatorSpec` with its loss, train op, hooks and outputs; its scaffold is ignored, as upstream ignores it).

    Raises:
      RuntimeError: EVAL/PREDICT `model_fn` did not return a `TPUEstimatorSpec`.
      ValueError: a TRAIN `EstimatorSpec` with `training_chief_hooks`.
    """
    if isinstance(spec, TPUEstimatorSpec):
        return spec
    if mode != _estimator_lib.ModeKeys.TRAIN:
        raise RuntimeError(
            "estimator_spec used by TPU {} must have type `TPUEstimatorSpec`. Got {}".format(
                "evaluation" if mode == _estimator_lib.ModeKeys.EVAL else "prediction", type(spec)
            )
        )
    err = "{} returned by EstimatorSpec is not supported in TPUEstimator. "
    if spec.training_chief_hooks:
        raise ValueError(
            err.format("training_chief_hooks") + "If you want to pass training hooks, please pass via training_hooks."
        )
    if spec.scaffold:
        tf.compat.v1.logging.warning(
            "EstimatorSpec.Scaffold is ignored by TPU train/eval. Please use TPUEstimatorSpec."
        )
    kept = ("mode", "predictions", "loss", "train_op", "export_outputs", "training_hooks")
    return TPUEstimatorSpec(**{field: getattr(spec, field) for field in kept})
