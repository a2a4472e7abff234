"""What `TPUEstimator.train` adds around the Estimator's `train`: `guard_training`.

- The process is the only writer of `model_dir` for the whole run (`model_dir_lock.ModelDirLock`, chief only:
  other workers of a multi-worker job write no checkpoints).
- With `max_steps` already reached by the latest checkpoint in `model_dir` (whoever wrote it), no step runs and
  a warning names the step found.
- No checkpoint holds NaN or Inf (`finite_checkpoints.FiniteCheckpointListener` joins the saving listeners
  whenever the config saves checkpoints).
"""

import contextlib
from typing import Any, Iterator, List, Optional

import tensorflow as tf

from tpu_estimator.estimator_core.checkpoint_step import reached_max_steps
from tpu_estimator.finite_checkpoints import FiniteCheckpointListener
from tpu_estimator.model_dir_lock import ModelDirLock

_log = tf.get_logger()


class GuardedTraining(object):
    """What `guard_training` yields.

    Attributes:
      already_done: `max_steps` is already reached: train nothing.
      saving_listeners: the listeners to pass to the Estimator's `train`.
    """

    def __init__(self, already_done: bool, saving_listeners: List[Any]):
        self.already_done = already_done
        self.saving_listeners = saving_listeners


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
    """
    config = estimator.config
    lock = ModelDirLock(estimator.model_dir) if config.is_chief else None
    if lock is not None:
        lock.acquire()
    try:
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
        if config.save_checkpoints_steps or config.save_checkpoints_secs:
            listeners.append(FiniteCheckpointListener(estimator.model_dir))
        yield GuardedTraining(False, listeners)
    finally:
        if lock is not None:
            lock.release()
