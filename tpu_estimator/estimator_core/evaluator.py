"""Evaluating the latest checkpoint and running the exporters: after checkpoint saves, or in an evaluator's loop.

The parts of upstream's `_TrainingExecutor` that evaluate: `Evaluator` (one evaluation of a new checkpoint, then
the exporters), `EvaluateAfterCheckpoint` (the saver listener of the local and `master` runs) and
`evaluate_continuously` (the `evaluator` task of a cluster).
"""

import collections
import os
import time
from typing import Any, List, Optional

import tensorflow as tf

from tpu_estimator.estimator_core import _tf_internal

_WARNING_INTERVAL_SECS = 600


class EvalResult(collections.namedtuple("EvalResult", ["status", "metrics", "checkpoint_path"])):
    """What one evaluation attempt gave: its status, and for `EVALUATED` the metrics and the checkpoint."""

    EVALUATED = "evaluated"
    MISSING_CHECKPOINT = "missing checkpoint"
    NO_NEW_CHECKPOINT = "no new checkpoint"

    def __new__(cls, status, metrics=None, checkpoint_path=None):
        return super(EvalResult, cls).__new__(cls, status, metrics, checkpoint_path)


class Evaluator(object):
    """Evaluates the latest checkpoint (once per checkpoint) and runs the exporters.

    Args:
      estimator: the `Estimator`.
      eval_spec: the `EvalSpec`.
      max_training_steps: the train spec's `max_steps`: an evaluation at or past it is the final export.
    """

    def __init__(self, estimator, eval_spec, max_training_steps: Optional[int]):
        self._estimator = estimator
        self._eval_spec = eval_spec
        self._max_training_steps = max_training_steps
        self._previous_ckpt_path = None
        self._last_warning_time = 0.0

    def evaluate_and_export(self, checkpoint_path: Optional[str] = None):
        """Evaluates a checkpoint not evaluated yet, then exports.

        Args:
          checkpoint_path: the checkpoint to evaluate; default the estimator's latest.

        Returns:
          `(EvalResult, [export results])`; the list is empty unless the status is `EVALUATED`.
        """
        latest_ckpt_path = checkpoint_path or self._estimator.latest_checkpoint()
        if not latest_ckpt_path:
            self._warn("Estimator is not trained yet. Will start an evaluation when a checkpoint is ready.")
            return EvalResult(EvalResult.MISSING_CHECKPOINT), []
        if latest_ckpt_path == self._previous_ckpt_path:
            self._warn(
                "No new checkpoint ready for evaluation. Skip the current evaluation pass as evaluation results are "
                "expected to be same for the same checkpoint."
            )
            return EvalResult(EvalResult.NO_NEW_CHECKPOINT), []
        metrics = self._estimator.evaluate(
            input_fn=self._eval_spec.input_fn,
            steps=self._eval_spec.steps,
            name=self._eval_spec.name,
            checkpoint_path=latest_ckpt_path,
            hooks=self._eval_spec.hooks,
        )
        result = EvalResult(EvalResult.EVALUATED, metrics=metrics, checkpoint_path=latest_ckpt_path)
        export_results = self._export(result, self.is_final(result))
        self._last_warning_time = 0.0
        self._previous_ckpt_path = latest_ckpt_path
        return result, export_results

    def is_final(self, result: EvalResult) -> bool:
        """Whether `result` evaluated a checkpoint at or past the training's `max_steps`."""
        if result.status != EvalResult.EVALUATED or not self._max_training_steps:
            return False
        return result.metrics[tf.compat.v1.GraphKeys.GLOBAL_STEP] >= self._max_training_steps

    def _warn(self, message: str) -> None:
        """Logs `message`, at most once per 10 minutes (an evaluator polls often)."""
        now = time.time()
        if now - self._last_warning_time > _WARNING_INTERVAL_SECS:
            tf.compat.v1.logging.warning(message)
            self._last_warning_time = now

    def _export(self, eval_result: EvalResult, is_the_final_export: bool) -> List[Any]:
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


class EvaluationThrottle(object):
    """Which checkpoint saves of a training run are evaluated: each one but the first (the run's start, before any
    step), at most once per `eval_throttle_secs`; and the last one unless it was just evaluated.

    Args:
      eval_throttle_secs: at most one evaluation per this many seconds (the last checkpoint is always evaluated).
    """

    def __init__(self, eval_throttle_secs: int):
        self._eval_throttle_secs = eval_throttle_secs
        self._timer = None
        self._is_first_save = True

    def begin(self) -> None:
        """Starts a training run."""
        self._timer = _tf_internal.SecondOrStepTimer(every_secs=self._eval_throttle_secs)
        self._is_first_save = True

    def due_after_save(self, global_step_value: int) -> bool:
        """Whether the checkpoint just saved at `global_step_value` is to be evaluated now."""
        if self._is_first_save:
            self._is_first_save = False
            return False
        if self._timer.should_trigger_for_step(global_step_value):
            return True
        tf.compat.v1.logging.info(
            "Skip the current checkpoint eval due to throttle secs ({} secs).".format(self._eval_throttle_secs)
        )
        return False

    def due_at_end(self, global_step_value: int) -> bool:
        """Whether the run's last checkpoint, at `global_step_value`, is still to be evaluated."""
        return global_step_value != self._timer.last_triggered_step()

    def evaluating(self, global_step_value: int) -> None:
        """Records that the checkpoint at `global_step_value` is evaluated now."""
        self._timer.update_last_triggered_step(global_step_value)


class ThrottledEvaluations(tf.compat.v1.train.CheckpointSaverListener):
    """A listener that acts on the checkpoint saves `EvaluationThrottle` picks: `_evaluate(global_step_value)`.

    Args:
      eval_throttle_secs: at most one evaluation per this many seconds (the last checkpoint is always evaluated).
    """

    def __init__(self, eval_throttle_secs: int):
        self._throttle = EvaluationThrottle(eval_throttle_secs)

    def begin(self) -> None:
        self._throttle.begin()

    def after_save(self, session, global_step_value) -> None:
        del session
        if self._throttle.due_after_save(global_step_value):
            self._throttle.evaluating(global_step_value)
            self._evaluate(global_step_value)

    def end(self, session, global_step_value) -> None:
        del session
        if self._throttle.due_at_end(global_step_value):
            self._throttle.evaluating(global_step_value)
            self._evaluate(global_step_value)

    def _evaluate(self, global_step_value: int) -> None:
        """What an evaluation of the checkpoint at `global_step_value` does (the subclass's)."""
        raise NotImplementedError


class EvaluateAfterCheckpoint(ThrottledEvaluations):
    """Evaluates after the checkpoint saves `EvaluationThrottle` picks.

    Args:
      evaluator: the `Evaluator`.
      eval_throttle_secs: at most one evaluation per this many seconds (the last checkpoint is always evaluated).
    """

    def __init__(self, evaluator: Evaluator, eval_throttle_secs: int):
        super().__init__(eval_throttle_secs)
        self._evaluator = evaluator
        self.eval_result = None
        self.export_results = None

    def _evaluate(self, global_step_value) -> None:
        del global_step_value  # the new checkpoint is the one just saved
        self.eval_result, self.export_results = evaluate_new_checkpoint(self._evaluator)


def evaluate_new_checkpoint(evaluator: Evaluator, checkpoint_path: Optional[str] = None):
    """`evaluator.evaluate_and_export(checkpoint_path)`, which must find a checkpoint it has not evaluated yet.

    Args:
      evaluator: the `Evaluator`.
      checkpoint_path: the checkpoint to evaluate; default the estimator's latest.

    Returns:
      `(EvalResult, [export results])`.

    Raises:
      RuntimeError: there is no new checkpoint.
    """
    result, export_results = evaluator.evaluate_and_export(checkpoint_path)
    if result.status != EvalResult.EVALUATED:
        raise RuntimeError("There was no new checkpoint after the training. Eval status: {}".format(result.status))
    return result, export_results


def evaluate_continuously(estimator, eval_spec, max_training_steps: Optional[int]) -> Optional[EvalResult]:
    """The `evaluator` task: evaluates each new checkpoint until one reaches `max_training_steps`.

    Waits `eval_spec.start_delay_secs` first; then evaluates (and exports) the latest checkpoint when it is new, at
    most once per `eval_spec.throttle_secs`. Without `max_training_steps` it never returns, as upstream's.

    Args:
      estimator: the `Estimator` (its config is the evaluator's: no cluster, local session).
      eval_spec: the `EvalSpec`.
      max_training_steps: the train spec's `max_steps`.

    Returns:
      The last `EvalResult` (the one at or past `max_training_steps`).
    """
    if eval_spec.start_delay_secs:
        tf.compat.v1.logging.info("Waiting %f secs before starting eval.", eval_spec.start_delay_secs)
        time.sleep(eval_spec.start_delay_secs)
    evaluator = Evaluator(estimator, eval_spec, max_training_steps)
    while True:
        start = time.time()
        result, _ = evaluator.evaluate_and_export()
        if evaluator.is_final(result):
            tf.compat.v1.logging.info(
                "Exiting evaluation, global_step=%s >= train max_steps=%s",
                result.metrics[tf.compat.v1.GraphKeys.GLOBAL_STEP],
                max_training_steps,
            )
            return result
        remaining = eval_spec.throttle_secs - (time.time() - start)
        if remaining > 0:
            tf.compat.v1.logging.info("Waiting %f secs before starting next eval run.", remaining)
            time.sleep(remaining)
        elif eval_spec.throttle_secs == 0 and result.status != EvalResult.EVALUATED:
            tf.compat.v1.logging.warning(
                "EvalSpec.throttle_secs is set as 0. This might overload the job before finding (next) new "
                "checkpoint. Please consider to increase it."
            )
