"""What `TPUEstimator.train` adds around the Estimator's `train`: `guard_training`.

- The process is the only writer of `model_dir` for the whole run (`model_dir_lock.ModelDirLock`, chief only:
  other workers of a multi-worker job write no checkpoints); a run whose lock was taken over stops before its next
  checkpoint (`model_dir_lock.HeldLockListener`, the first saving listener).
- The `checkpoint` state file is checked before it is trusted (`checkpoint_state.verify_checkpoint_state`: a
  damaged one, or one older than an intact checkpoint, is an error naming it, raised before anything is written),
  and what interrupted saves left behind is removed (chief only, under the lock).
- With `max_steps` already reached by the latest checkpoint in `model_dir` (whoever wrote it), no step runs and
  a warning names the step found.
- An input that ends before the first training step is an error (`EmptyTrainingInputError`), where upstream's
  `train` returns having trained nothing: `max_steps`/`steps` were not honoured, and an input that gives no example
  (an empty file, a filter or skipped malformed lines dropping everything, fewer examples than one batch with
  `drop_remainder`) is a mistake to report. An input that ends later ends training quietly, as upstream's.
- No checkpoint holds NaN or Inf (`finite_checkpoints.FiniteCheckpointListener` joins the saving listeners
  whenever the config saves checkpoints).
"""

import contextlib
from typing import Any, Iterator, List, Optional

import tensorflow as tf

from tpu_estimator.checkpoints import checkpoint_state
from tpu_estimator.checkpoints.finite_checkpoints import FiniteCheckpointListener
from tpu_estimator.checkpoints.model_dir_lock import HeldLockListener, ModelDirLock
from tpu_estimator.estimator_core.checkpoint_step import reached_max_steps

_log = tf.get_logger()


class EmptyTrainingInputError(ValueError):
    """`train()`'s `input_fn` ended before the first training step: nothing was trained."""


class _FirstStepWatch(tf.compat.v1.train.SessionRunHook):
    """Sees whether the input ended before the first step: a `Session.run` began and never ended, the session
    still closed cleanly (a `MonitoredSession` ends quietly on `OutOfRangeError` only), and the global step did not
    move (a loop of several steps keeps the steps it ran before its input ended)."""

    def __init__(self):
        self.ended_before_first_step = False
        self.global_step = None

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()
        self._started = self._finished = 0

    def after_create_session(self, session, coord):
        self.global_step = int(session.run(self._global_step))

    def before_run(self, run_context):
        self._started += 1

    def after_run(self, run_context, run_values):
        self._finished += 1

    def end(self, session):
        if self._finished == 0 and self._started > 0 and int(session.run(self._global_step)) == self.global_step:
            self.ended_before_first_step = True


class GuardedTraining(object):
    """What `guard_training` yields.

    Attributes:
      already_done: `max_steps` is already reached: train nothing.
      saving_listeners: the listeners to pass to the Estimator's `train`.
      hooks: the hooks to add to `train`'s.
    """

    def __init__(self, already_done: bool, saving_listeners: List[Any]):
        self.already_done = already_done
        self._watch = _FirstStepWatch()
        self.hooks = [self._watch]
        self.saving_listeners = saving_listeners

    def check_trained(self, steps: Optional[int], max_steps: Optional[int]) -> None:
        """Raises `EmptyTrainingInputError` when the input ended before the first step of the run just ended."""
        if not self._watch.ended_before_first_step:
            return
        if max_steps is not None:
            limit = ", max_steps={} not reached".format(max_steps)
        elif steps is not None:
            limit = ", steps={} not run".format(steps)
        else:
            limit = ""
        raise EmptyTrainingInputError(
            "train(): input_fn gave no batch: its input ended before the first training step, so nothing was trained "
            "(global step still {}{}). Check the data it reads: an empty file or dataset, a filter or skipped "
            "malformed lines dropping every example, or fewer examples than one batch with "
            "drop_remainder=True.".format(self._watch.global_step, limit)
        )


@contextlib.contextmanager
def guard_training(
    estimator: Any, steps: Optional[int], max_steps: Optional[int], saving_listeners: Optional[List[Any]]
) -> Iterator[GuardedTraining]:
    """Holds the `model_dir` lock while the body trains (see the module docstring).

    Args:
      estimator: the Estimator about to train (its `model_dir` and `config` are used).
      steps: `train`'s `steps`.
      max_steps: `train`'s `max_steps`.
      saving_listeners: `train`'s `saving_listeners`.

    Yields:
      A `GuardedTraining`.

    Raises:
      model_dir_lock.ModelDirLockedError: another live process trains into `model_dir`.
      checkpoint_state.DamagedCheckpointStateError: the `checkpoint` state file of `model_dir` cannot be trusted.
    """
    config = estimator.config
    lock = ModelDirLock(estimator.model_dir) if config.is_chief else None
    if lock is not None:
        lock.acquire()
    try:
        if lock is not None:
            checkpoint_state.verify_checkpoint_state(estimator.model_dir, for_training=True)
            checkpoint_state.remove_interrupted_saves(estimator.model_dir)
        found = reached_max_steps(estimator.model_dir, steps, max_steps)
        if found is not None:
            _log.warning(
                "Not training: the latest checkpoint in %s is at global step %d, max_steps=%d is already reached. "
                "Raise max_steps (or pass steps) to train further.",
                estimator.model_dir,
                found,
                max_steps,
            )
            yield GuardedTraining(True, list(saving_listeners or []))
            return
        listeners = list(saving_listeners or [])
        saves = bool(config.save_checkpoints_steps or config.save_checkpoints_secs)
        if saves:
            listeners.append(FiniteCheckpointListener(estimator.model_dir))
        if lock is not None and (saves or listeners):
            # First: no listener of the run acts on a save that another trainer's lock forbids. Without a checkpoint
            # cadence and listeners there is no save to guard (and the Estimator refuses listeners without a saver).
            listeners.insert(0, HeldLockListener(lock))
        yield GuardedTraining(False, listeners)
    finally:
        if lock is not None:
            lock.release()
