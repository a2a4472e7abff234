"""`TrainSpec`, `EvalSpec` and `train_and_evaluate`: train, evaluating (and exporting) after each checkpoint."""

import collections
import os
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf
from tensorflow.python.training import basic_session_run_hooks

from tpu_estimator.estimator_core.cluster import TaskType
from tpu_estimator.estimator_core.exporters import Exporter


def _validate_input_fn(input_fn) -> None:
    if not callable(input_fn):
        raise TypeError("`input_fn` must be callable, given: {}".format(input_fn))


def _validate_hooks(hooks) -> tuple:
    hooks = tuple(hooks or [])
    for hook in hooks:
        if not isinstance(hook, tf.compat.v1.train.SessionRunHook):
            raise TypeError("All hooks must be `SessionRunHook` instances, given: {}".format(hook))
    return hooks


def _validate_saving_listeners(saving_listeners) -> tuple:
    saving_listeners = tuple(saving_listeners or [])
    for listener in saving_listeners:
        if not isinstance(listener, tf.compat.v1.train.CheckpointSaverListener):
            raise TypeError(
                "All saving_listeners must be `CheckpointSaverListener` instances, given: {}".format(listener)
            )
    return saving_listeners


def _validate_exporters(exporters) -> tuple:
    if not exporters:
        return ()
    if isinstance(exporters, Exporter):
        exporters = [exporters]
    try:
        exporters = list(exporters)
    except TypeError:
        exporters = [exporters]
    names = []
    for exporter in exporters:
        if not isinstance(exporter, Exporter):
            raise TypeError(
                "`exporters` must be an Exporter, an iterable of Exporter, or `None`, found %s." % exporters
            )
        if not exporter.name:
            raise ValueError(
                "An Exporter cannot have a name that is `None` or empty. All exporter names: {}".format(
                    [e.name for e in exporters]
                )
            )
        if not isinstance(exporter.name, str):
            raise ValueError("An Exporter must have a string name. Given: {}".format(type(exporter.name)))
        if exporter.name in names:
            raise ValueError(
                "`exporters` must have unique names. Such a name cannot be `None`. All exporter names: {}".format(
                    [e.name for e in exporters]
                )
            )
        names.append(exporter.name)
    return tuple(exporters)


class TrainSpec(collections.namedtuple("TrainSpec", ["input_fn", "max_steps", "hooks", "saving_listeners"])):
    """The training half of `train_and_evaluate`.

    Args:
      input_fn: the training `input_fn`.
      max_steps: train until this global step (None: until the input ends).
      hooks: `SessionRunHook`s for training.
      saving_listeners: `CheckpointSaverListener`s.

    Raises:
      TypeError: `input_fn` not callable, or hooks/listeners of the wrong type.
      ValueError: `max_steps <= 0`.
    """

    def __new__(cls, input_fn, max_steps=None, hooks=None, saving_listeners=None):
        _validate_input_fn(input_fn)
        if max_steps is not None and max_steps <= 0:
            raise ValueError("Must specify max_steps > 0, given: {}".format(max_steps))
        return super(TrainSpec, cls).__new__(
            cls,
            input_fn=input_fn,
            max_steps=max_steps,
            hooks=_validate_hooks(hooks),
            saving_listeners=_validate_saving_listeners(saving_listeners),
        )


class EvalSpec(
    collections.namedtuple(
        "EvalSpec", ["input_fn", "steps", "name", "hooks", "exporters", "start_delay_secs", "throttle_secs"]
    )
):
    """The evaluation half of `train_and_evaluate`.

    Args:
      input_fn: the evaluation `input_fn`.
      steps: batches per evaluation (None: until the input ends).
      name: evaluation name (summaries in `eval_<name>`).
      hooks: `SessionRunHook`s for evaluation.
      exporters: an `Exporter` or iterable of them, run after each evaluation.
      start_delay_secs: delay before the first evaluation (distributed evaluator only).
      throttle_secs: evaluate at most once per this many seconds (a new checkpoint is needed too).

    Raises:
      TypeError/ValueError: invalid arguments (upstream's messages).
    """

    def __new__(
        cls, input_fn, steps=100, name=None, hooks=None, exporters=None, start_delay_secs=120, throttle_secs=600
    ):
        _validate_input_fn(input_fn)
        if steps is not None and steps <= 0:
            raise ValueError("Must specify steps > 0, given: {}".format(steps))
        if name is not None and not isinstance(name, str):
            raise TypeError("`name` must be string, given: {}".format(name))
        hooks = _validate_hooks(hooks)
        exporters = _validate_exporters(exporters)
        if start_delay_secs < 0:
            raise ValueError("Must specify start_delay_secs >= 0, given: {}".format(start_delay_secs))
        if throttle_secs < 0:
            raise ValueError("Must specify throttle_secs >= 0, given: {}".format(throttle_secs))
        return super(EvalSpec, cls).__new__(
            cls,
            input_fn=input_fn,
            steps=steps,
            name=name,
            hooks=hooks,
            exporters=exporters,
            start_delay_secs=start_delay_secs,
            throttle_secs=throttle_secs,
        )


def train_and_evaluate(estimator, train_spec: TrainSpec, eval_spec: EvalSpec) -> Tuple[Optional[Dict], List[Any]]:
    """Trains `estimator` with `train_spec`, evaluating with `eval_spec` after checkpoints, locally.

    As upstream's local mode: the evaluation (and the exporters) run after each checkpoint save at most every
    `eval_spec.throttle_secs`, and once more after the last checkpoint unless it was just evaluated. Checkpoint
    frequency comes from `RunConfig.save_checkpoints_steps/secs`.

    Args:
      estimator: an `Estimator` (of this core).
      train_spec: a `TrainSpec`.
      eval_spec: an `EvalSpec`.

    Returns:
      `(metrics of the last evaluation or None, export results of the last evaluation)`.

    Raises:
      TypeError: arguments of the wrong type.
      NotImplementedError: a distributed `TF_CONFIG` (cluster or evaluator task): this core runs
        `train_and_evaluate` on one machine only.
      RuntimeError: no new checkpoint after training to evaluate.
    """
    from tpu_estimator.estimator_core.estimator import Estimator

    if not isinstance(eval_spec, EvalSpec):
        raise TypeError("`eval_spec` must have type `tf.estimator.EvalSpec`. Got: {}".format(type(eval_spec)))
    if not isinstance(estimator, Estimator):
        raise TypeError("`estimator` must have type `tf.estimator.Estimator`. Got: {}".format(type(estimator)))
    if not isinstance(train_spec, TrainSpec):
        raise TypeError("`train_spec` must have type `tf.estimator.TrainSpec`. Got: {}".format(type(train_spec)))
    config = estimator.config
    if config.cluster_spec or config.task_type == TaskType.EVALUATOR:
        raise NotImplementedError(
            "train_and_evaluate with a distributed TF_CONFIG (task type {!r}, cluster {}) is not supported by "
            "tpu_estimator's Estimator core: it trains and evaluates on one machine. Unset the 'cluster' and 'task' "
            "of TF_CONFIG, or use upstream's tf.estimator on TensorFlow 2.15.".format(
                config.task_type, config.cluster_spec.as_dict() if config.cluster_spec else {}
            )
        )
    return _run_local(estimator, train_spec, eval_spec)


def _run_local(estimator, train_spec: TrainSpec, eval_spec: EvalSpec):
    tf.compat.v1.logging.info(
        "Start train and evaluate loop. The evaluate will happen after every checkpoint. Checkpoint frequency is "
        "determined based on RunConfig arguments: save_checkpoints_steps {} or save_checkpoints_secs {}.".format(
            estimator.config.save_checkpoints_steps, estimator.config.save_checkpoints_secs
        )
    )
    evaluator = _Evaluator(estimator, eval_spec, train_spec.max_steps)
    listener = _EvaluateAfterCheckpoint(evaluator, eval_spec.throttle_secs)
    estimator.train(
        input_fn=train_spec.input_fn,
        max_steps=train_spec.max_steps,
        hooks=list(train_spec.hooks),
        saving_listeners=train_spec.saving_listeners + (listener,),
    )
    metrics = listener.eval_result.metrics if listener.eval_result else None
    return metrics, listener.export_results


class _EvalResult(collections.namedtuple("EvalResult", ["status", "metrics", "checkpoint_path"])):
    EVALUATED = "evaluated"
    MISSING_CHECKPOINT = "missing checkpoint"
    NO_NEW_CHECKPOINT = "no new checkpoint"

    def __new__(cls, status, metrics=None, checkpoint_path=None):
        return super(_EvalResult, cls).__new__(cls, status, metrics, checkpoint_path)


class _Evaluator(object):
    """Evaluates the latest checkpoint (once per checkpoint) and runs the exporters."""

    def __init__(self, estimator, eval_spec: EvalSpec, max_training_steps: Optional[int]):
        self._estimator = estimator
        self._eval_spec = eval_spec
        self._max_training_steps = max_training_steps
        self._previous_ckpt_path = None

    def evaluate_and_export(self):
        latest_ckpt_path = self._estimator.latest_checkpoint()
        if not latest_ckpt_path:
            tf.compat.v1.logging.warning(
                "Estimator is not trained yet. Will start an evaluation when a checkpoint is ready."
            )
            return _EvalResult(_EvalResult.MISSING_CHECKPOINT), []
        if latest_ckpt_path == self._previous_ckpt_path:
            tf.compat.v1.logging.warning(
                "No new checkpoint ready for evaluation. Skip the current evaluation pass as evaluation results are "
                "expected to be same for the same checkpoint."
            )
            return _EvalResult(_EvalResult.NO_NEW_CHECKPOINT), []
        metrics = self._estimator.evaluate(
            input_fn=self._eval_spec.input_fn,
            steps=self._eval_spec.steps,
            name=self._eval_spec.name,
            checkpoint_path=latest_ckpt_path,
            hooks=self._eval_spec.hooks,
        )
        result = _EvalResult(_EvalResult.EVALUATED, metrics=metrics, checkpoint_path=latest_ckpt_path)
        is_final = bool(
            self._max_training_steps and result.metrics[tf.compat.v1.GraphKeys.GLOBAL_STEP] >= self._max_training_steps
        )
        export_results = self._export(result, is_final)
        self._previous_ckpt_path = latest_ckpt_path
        return result, export_results

    def _export(self, eval_result: _EvalResult, is_the_final_export: bool) -> List[Any]:
        export_dir_base = os.path.join(tf.compat.as_str_any(self._estimator.model_dir), "export")
        return [
            exporter.export(
                estimator=self._estimator,
                export_path=os.path.join(export_dir_base, tf.compat.as_str_any(exporter.name)),
                checkpoint_path=eval_result.checkpoint_path,
                eval_result=eval_result.metrics,
                is_the_final_export=is_the_final_export,
            )
            for exporter in self._eval_spec.exporters
        ]


class _EvaluateAfterCheckpoint(tf.compat.v1.train.CheckpointSaverListener):
    """Evaluates after checkpoint saves (not the first one, at step 0), throttled; and after the last one."""

    def __init__(self, evaluator: _Evaluator, eval_throttle_secs: int):
        self._evaluator = evaluator
        self._eval_throttle_secs = eval_throttle_secs
        self.eval_result = None
        self.export_results = None
        self._timer = None
        self._is_first_run = True

    def begin(self) -> None:
        self._timer = basic_session_run_hooks.SecondOrStepTimer(every_secs=self._eval_throttle_secs)
        self._is_first_run = True

    def after_save(self, session, global_step_value) -> None:
        del session
        if self._is_first_run:
            self._is_first_run = False
            return
        if self._timer.should_trigger_for_step(global_step_value):
            self._evaluate(global_step_value)
        else:
            tf.compat.v1.logging.info(
                "Skip the current checkpoint eval due to throttle secs ({} secs).".format(self._eval_throttle_secs)
            )

    def end(self, session, global_step_value) -> None:
        del session
        if global_step_value != self._timer.last_triggered_step():
            self._evaluate(global_step_value)

    def _evaluate(self, global_step_value) -> None:
        self._timer.update_last_triggered_step(global_step_value)
        self.eval_result, self.export_results = self._evaluator.evaluate_and_export()
        if self.eval_result.status != _EvalResult.EVALUATED:
            raise RuntimeError(
                "There was no new checkpoint after the training. Eval status: {}".format(self.eval_result.status)
            )
