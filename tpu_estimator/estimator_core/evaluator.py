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

    def evaluate_and_export(self):
        """Evaluates a checkpoint not evaluated yet, then exports.

        Returns:
          `(EvalResult, [export results])`; the list is empty unless the status is `EVALUATED`.
        """
        latest_ckpt_path = self._estimator.latest_checkpoint()
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


class EvaluateAfterCheckpoint(tf.compat.v1.train.CheckpointSaverListener):
    """Evaluates after checkpoint saves (not the first one, at step 0), throttled; and after the last one.

    Args:
      evaluator: the `Evaluator`.
      eval_throttle_secs: at most one evaluation per this many seconds (the last checkpoint is always evaluated).
    """

    def __init__(self, evaluator: Evaluator, eval_throttle_secs: int):
        self._evaluator = evaluator
        self._eval_throttle_secs = eval_throttle_secs
        self.eval_result = None
        self.export_results = None
        self._timer = None
        self._is_first_run = True

    def begin(self) -> None:
        self._timer = _tf_internal.SecondOrStepTimer(every_secs=self._eval_throttle_secs)
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
        if self.eval_result.status != EvalResult.EVALUATED:
            raise RuntimeError(
                "There was no new checkpoint after the training. Eval status: {}".format(self.eval_result.status)
            )


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
