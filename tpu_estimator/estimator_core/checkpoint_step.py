"""The global step of a model directory's latest checkpoint, and whether `train(max_steps=...)` has reached it.

Shared by our `Estimator.train` (which then trains nothing, as upstream's), `TPUEstimator.train`'s guard on both
Estimator cores (`tpu_estimator/checkpoints/train_guard.py`, which also warns) and the command line (`app/commands.py`).
"""

import numbers
from typing import Any, Optional

import tensorflow as tf


def global_step_in(checkpoint_path: str) -> int:
    """The global step saved in the checkpoint `checkpoint_path`.

    Raises:
      tf.errors.OpError, ValueError: the checkpoint cannot be read or holds no global step.
    """
    return int(tf.train.load_variable(checkpoint_path, tf.compat.v1.GraphKeys.GLOBAL_STEP))


def checkpoint_global_step(model_dir: str) -> Optional[int]:
    """The global step of the latest checkpoint in `model_dir`; None without a checkpoint or a global step in it."""
    path = tf.train.latest_checkpoint(model_dir)
    if path is None:
        return None
    try:
        return global_step_in(path)
    except (tf.errors.OpError, ValueError):
        return None


def load_global_step_from_checkpoint_dir(checkpoint_dir: str) -> Any:
    """Upstream's `estimator._load_global_step_from_checkpoint_dir`, which public TPU programs call to resume
    (tensorflow/tpu's EfficientNet `main.py` and others; `tpu_estimator/compat/legacy_modules.py` lists them).

    As upstream's: the global step tensor's value as the checkpoint reader returns it (a NumPy integer), and 0 for
    any failure (no directory, no checkpoint, no global step in it, an unreadable file).

    Args:
      checkpoint_dir: a model directory.

    Returns:
      The latest checkpoint's global step, or 0.
    """
    try:
        reader = tf.compat.v1.train.NewCheckpointReader(tf.train.latest_checkpoint(checkpoint_dir))
        return reader.get_tensor(tf.compat.v1.GraphKeys.GLOBAL_STEP)
    except Exception:  # noqa: BLE001 - upstream returns 0 on any failure (a bare except there).
        return 0


def reached_max_steps(model_dir: str, steps: Optional[int], max_steps: Optional[int]) -> Optional[int]:
    """The latest checkpoint's global step when `train(steps=steps, max_steps=max_steps)` has no step to run:
    `max_steps` alone, positive and reached by that step. None otherwise (invalid arguments included, which are the
    Estimator's to refuse)."""
    if steps is not None or not isinstance(max_steps, numbers.Real) or max_steps <= 0:
        return None
    found = checkpoint_global_step(model_dir)
    return found if found is not None and found >= max_steps else None
