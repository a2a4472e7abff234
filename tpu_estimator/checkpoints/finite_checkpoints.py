"""Checkpoints never hold NaN or Inf: `FiniteCheckpointListener`.

A step can make weights non-finite while the loss stays finite for a while (e.g. an auxiliary head on a dense
feature); without a check the next checkpoint saves the poisoned weights and a restart resumes from them. The
listener runs before every save of the `CheckpointSaverHook` (periodic, initial and final): it checks every value
the checkpoint will hold, the graph's global variables (dense weights, optimizer slots) and the tensors of its
saveable objects (the logical embedding tables and slots of `embedding.checkpointing`, saved through custom
saveables), and raises `NonFiniteCheckpointError` naming the variables and whether they hold NaN, Inf or both.
The save does not happen, so the latest checkpoint stays the last finite one; the error ends the training session
without its final save.

Cost: one pass over the saved values per save, as a single `Session.run` of one `CheckNumerics` op per saved
tensor on its device (nothing is fetched), so training steps between saves pay nothing. The graph holds that one
op per saved tensor: the values are read through the reads that exist already (a variable's own read, the
saveables' reads that the Saver uses too). Only when the check fails is each tensor checked on its own, and the
non-finite ones fetched, one at a time, to tell NaN from Inf on the host.
"""

from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from tpu_estimator import _tf_internal

_CHECKED_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)  # The dtypes CheckNumerics takes.


class NonFiniteCheckpointError(RuntimeError):
    """A checkpoint about to be written holds NaN or Inf values; it was not written."""


def _saved_tensors(graph: tf.Graph) -> List[Tuple[str, tf.Tensor]]:
    """(checkpoint name, tensor) of every floating value the default Saver of `graph` writes.

    A saveable may write one name as several slices (a sharded embedding table, one slice per shard): each slice is
    a tensor of its own, under the same name.
    """
    named = []
    seen = set()
    for variable in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
        if not variable.dtype.base_dtype.is_floating:
            continue
        name = variable.op.name
        if name not in seen:
            seen.add(name)
            named.append((name, _tf_internal.variable_value(variable)))
    slices = set()
    for saveable in graph.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS):
        for spec in getattr(saveable, "specs", []):
            if spec.name in seen or (spec.name, spec.slice_spec) in slices:
                continue
            dtype = getattr(spec, "dtype", None)
            if dtype is not None and not dtype.base_dtype.is_floating:
                continue  # Not read: the Saver reads it when it saves.
            # Built where the Saver builds it, which then saves this same tensor (a spec may build its tensor once).
            with tf.device(tf.DeviceSpec.from_string(spec.device or "").replace(device_type="CPU", device_index=0)):
                tensor = spec.tensor
            if tensor is None or not tensor.dtype.base_dtype.is_floating:
                continue
            slices.add((spec.name, spec.slice_spec))
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
        self._tensors: List[tf.Tensor] = []
        self._checks: List[tf.Operation] = []

    def begin(self) -> None:
        """Builds the check over the current graph's saved values (before it is finalized)."""
        graph = tf.compat.v1.get_default_graph()
        named = _saved_tensors(graph)
        self._names = [name for name, _ in named]
        self._tensors = [tensor for _, tensor in named]
        self._checks = []
        with tf.name_scope("finite_check"):
            for tensor in self._tensors:
                with tf.device(tensor.device):
                    if tensor.dtype.base_dtype not in _CHECKED_DTYPES:
                        tensor = tf.cast(tensor, tf.float32)  # E.g. 8-bit floats: no CheckNumerics kernel.
                    self._checks.append(tf.debugging.check_numerics(tensor, "").op)

    def before_save(self, session: tf.compat.v1.Session, global_step_value: int) -> None:
        """Raises before the save if a saved value is non-finite.

        Raises:
          NonFiniteCheckpointError: naming each non-finite variable with NaN, Inf or "NaN and Inf".
        """
        if not self._checks:
            return
        try:
            session.run(self._checks)  # The ops as targets: no op joining them (nor a marked control input each).
            return
        except tf.errors.InvalidArgumentError as error:
            failed = error
        kinds: Dict[str, Tuple[bool, bool]] = {}  # Name -> (has NaN, has Inf), in the order of the saved values.
        for name, tensor, check in zip(self._names, self._tensors, self._checks):
            try:
                session.run(check)  # On the tensor's device: nothing is fetched.
                continue
            except tf.errors.InvalidArgumentError:
                pass
            value = session.run(tensor)  # Non-finite tensors only, one at a time.
            nan, inf = kinds.get(name, (False, False))
            kinds[name] = (nan or bool(np.isnan(value).any()), inf or bool(np.isinf(value).any()))
            del value
        if not kinds:
            raise failed  # Not a non-finite value.
        raise NonFiniteCheckpointError(self._message(global_step_value, kinds))

    def _message(self, step: int, kinds: Dict[str, Tuple[bool, bool]]) -> str:
        listed = ", ".join(
            "{!r} ({})".format(name, "NaN and Inf" if nan and inf else ("NaN" if nan else "Inf"))
            for name, (nan, inf) in kinds.items()
        )
        directory = self._model_dir or "model_dir"
        latest = tf.train.latest_checkpoint(self._model_dir) if self._model_dir else None
        kept = "the latest checkpoint stays {}".format(latest) if latest else "no checkpoint was written"
        return (
            "Not writing the checkpoint of global step {step} to {dir}: non-finite values in {listed}. Training "
            "stopped; {kept}. Look for the cause (learning rate, inputs, loss), then train again from it.".format(
                step=step, dir=directory, listed=listed, kept=kept
            )
        )
