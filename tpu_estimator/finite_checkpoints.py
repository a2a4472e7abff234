"""Checkpoints never hold NaN or Inf: `FiniteCheckpointListener`.

A step can make weights non-finite while the loss stays finite for a while (e.g. an auxiliary head on a dense
feature); without a check the next checkpoint saves the poisoned weights and a restart resumes from them. The
listener runs before every save of the `CheckpointSaverHook` (periodic, initial and final): it checks every value
the checkpoint will hold, the graph's global variables (dense weights, optimizer slots) and the tensors of its
saveable objects (the logical embedding tables and slots of `embedding.checkpointing`, saved through custom
saveables), and raises `NonFiniteCheckpointError` naming the variables and whether they hold NaN, Inf or both.
The save does not happen, so the latest checkpoint stays the last finite one; the error ends the training session
without its final save.

Cost: one pass over the saved values per save, as a single `Session.run` of one scalar per variable (`sum(v * 0)`
is 0 for finite values and NaN otherwise), so training steps between saves pay nothing.
"""

from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf


class NonFiniteCheckpointError(RuntimeError):
    """A checkpoint about to be written holds NaN or Inf values; it was not written."""


def _saved_tensors(graph: tf.Graph) -> List[Tuple[str, tf.Tensor]]:
    """(checkpoint name, tensor) of every floating value the default Saver of `graph` writes."""
    named = []
    seen = set()
    for variable in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
        if not variable.dtype.base_dtype.is_floating:
            continue
        name = variable.op.name
        if name not in seen:
            seen.add(name)
            named.append((name, variable.value() if hasattr(variable, "value") else tf.convert_to_tensor(variable)))
    for saveable in graph.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS):
        for spec in getattr(saveable, "specs", []):
            tensor = spec.tensor
            if tensor is None or not tensor.dtype.base_dtype.is_floating or spec.name in seen:
                continue
            seen.add(spec.name)
            named.append((spec.name, tensor))
    return named


class FiniteCheckpointListener(tf.compat.v1.train.CheckpointSaverListener):
    """Refuses to save a checkpoint holding NaN or Inf (see the module docstring).

    Args:
      model_dir: the directory the checkpoints go to (named in the error).
    """

    def __init__(self, model_dir: Optional[str] = None):
        self._model_dir = model_dir
        self._names: List[str] = []
        self._finite = None
        self._has_nan = None
        self._has_inf = None

    def begin(self) -> None:
        """Builds the checks over the current graph's saved values (before it is finalized)."""
        graph = tf.compat.v1.get_default_graph()
        named = _saved_tensors(graph)
        self._names = [name for name, _ in named]
        if not named:
            self._finite = None
            return
        with tf.name_scope("finite_checkpoint_check"), tf.device("/device:CPU:0"):
            # A placeholder zero: Grappler cannot fold `v * zero` to 0.
            zero = tf.compat.v1.placeholder_with_default(tf.zeros([], tf.float32), [], name="zero")
            # One reduction-axes constant per rank for every variable (a reduction adds its own otherwise: three
            # per variable, a third of the check's graph).
            axes = {}
            sums, nans, infs = [], [], []
            for _, tensor in named:
                rank = tensor.shape.rank
                if rank is not None and rank not in axes:
                    axes[rank] = tf.constant(list(range(rank)), tf.int32)
                axis = axes.get(rank)
                with tf.device(tensor.device):
                    value = tf.cast(tensor, tf.float32)
                    sums.append(tf.reduce_sum(value * zero, axis=axis))
                    nans.append(tf.reduce_any(tf.math.is_nan(value), axis=axis))
                    infs.append(tf.reduce_any(tf.math.is_inf(value), axis=axis))
            self._finite = tf.math.is_finite(tf.stack(sums))
            self._has_nan = nans
            self._has_inf = infs

    def before_save(self, session: tf.compat.v1.Session, global_step_value: int) -> None:
        """Raises before the save if a saved value is non-finite.

        Raises:
          NonFiniteCheckpointError: naming each non-finite variable with NaN, Inf or "NaN and Inf".
        """
        if self._finite is None:
            return
        finite = session.run(self._finite)
        if np.all(finite):
            return
        bad = [i for i, ok in enumerate(finite) if not ok]
        nans, infs = session.run(([self._has_nan[i] for i in bad], [self._has_inf[i] for i in bad]))
        raise NonFiniteCheckpointError(self._message(global_step_value, [self._names[i] for i in bad], nans, infs))

    def _message(self, step: int, names: Sequence[str], nans: Sequence[bool], infs: Sequence[bool]) -> str:
        kinds = ["NaN and Inf" if n and i else ("NaN" if n else "Inf") for n, i in zip(nans, infs)]
        listed = ", ".join("{!r} ({})".format(name, kind) for name, kind in zip(names, kinds))
        directory = self._model_dir or "model_dir"
        latest = tf.train.latest_checkpoint(self._model_dir) if self._model_dir else None
        kept = "the latest checkpoint stays {}".format(latest) if latest else "no checkpoint was written"
        return (
            "Not writing the checkpoint of global step {step} to {dir}: non-finite values in {listed}. Training "
            "stopped; {kept}. Look for the cause (learning rate, inputs, loss), then train again from it.".format(
                step=step, dir=directory, listed=listed, kept=kept
            )
        )
