"""`TrainSpec`, `EvalSpec` and `train_and_evaluate`: train, evaluating (and exporting) after each checkpoint.

Locally here; on a cluster each task's role is in `distributed_training`; the evaluation itself in `evaluator`.
"""

import collections
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from tpu_estimator.estimator_core import distributed_training
from tpu_estimator.estimator_core import evaluator as evaluator_lib
from tpu_estimator.estimator_core.cluster import TaskType
from tpu_estimator.estimator_core.exporters import Exporter
from tpu_estimator.estimator_core.model_fn import instances_of


def _validate_input_fn(input_fn) -> None:
    if not callable(input_fn):
        raise TypeError("`input_fn` must be callable, given: {}".format(input_fn))


def _validate_hooks(hooks) -> tuple:
    message = "All hooks must be `SessionRunHook` instances, given: {}"
    return tuple(instances_of(tf.compat.v1.train.SessionRunHook, hooks, message))


def _validate_saving_listeners(saving_listeners) -> tuple:
    message = "All saving_listeners must be `CheckpointSaverListener` instances, given: {}"
    return tuple(instances_of(tf.compat.v1.train.CheckpointSaverListener, saving_listeners, message))


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


def train_and_evaluate(
    estimator, train_spec: TrainSpec, eval_spec: EvalSpec
) -> Optional[Tuple[Optional[Dict], List[Any]]]:
    """Trains `estimator` with `train_spec` and evaluates it with `eval_spec`, locally or as this task of a cluster.

    Locally (no `cluster` in `TF_CONFIG`), as upstream's: the evaluation (and the exporters) run after each
    checkpoint save at most every `eval_spec.throttle_secs`, and once more after the last checkpoint unless it was
    just evaluated. Checkpoint frequency comes from `RunConfig.save_checkpoints_steps/secs`.

    With a distributed `TF_CONFIG`, this task plays its role (`distributed_training.run_task`): `chief`, `worker`
    and `master` train between-graph with the variables on the `ps` tasks (the `master` also evaluates after its
    checkpoints), a `ps` serves until stopped, the `evaluator` evaluates each new checkpoint.

    A `TPUEstimator` replicates in-graph over its hosts from one client (docs/DISTRIBUTED.md), so it always runs
    the local loop in this process, the cluster's client; a `TF_CONFIG` task of another role is an error.

    Args:
      estimator: an `Estimator` (of this core).
      train_spec: a `TrainSpec`.
      eval_spec: an `EvalSpec`.

    Returns:
      Locally: `(metrics of the last evaluation or None, export results of the last evaluation)`. On a cluster:
      None (upstream leaves it undefined).

    Raises:
      TypeError: arguments of the wrong type.
      ValueError: an `evaluator` task with an index > 0, a task type without a role, or a `TPUEstimator` task that
        is not its cluster's client.
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
    if distributed_training.replicates_in_graph(estimator):
        distributed_training.check_in_graph_client_task(estimator)
        return _run_local(estimator, train_spec, eval_spec)
    if config.task_type == TaskType.EVALUATOR and config.task_id > 0:
        raise ValueError(
            "For distributed training, there can only be one `evaluator` task (with task id 0).  Given task id "
            "{}".format(config.task_id)
        )
    if config.cluster_spec or config.task_type == TaskType.EVALUATOR:
        distributed_training.run_task(estimator, train_spec, eval_spec)
        return None
    tf.compat.v1.logging.info("Running training and evaluation locally (non-distributed).")
    return _run_local(estimator, train_spec, eval_spec)


def _run_local(estimator, train_spec: TrainSpec, eval_spec: EvalSpec):
    tf.compat.v1.logging.info(
        "Start train and evaluate loop. The evaluate will happen after every checkpoint. Checkpoint frequency is "
        "determined based on RunConfig arguments: save_checkpoints_steps {} or save_checkpoints_secs {}.".format(
            estimator.config.save_checkpoints_steps, estimator.config.save_checkpoints_secs
        )
    )
    evaluator = evaluator_lib.Evaluator(estimator, eval_spec, train_spec.max_steps)
    listener = evaluator_lib.EvaluateAfterCheckpoint(evaluator, eval_spec.throttle_secs)
    estimator.train(
        input_fn=train_spec.input_fn,
        max_steps=train_spec.max_steps,
        hooks=list(train_spec.hooks),
        saving_listeners=train_spec.saving_listeners + (listener,),
    )
    metrics = listener.eval_result.metrics if listener.eval_result else None
    return metrics, listener.export_results
