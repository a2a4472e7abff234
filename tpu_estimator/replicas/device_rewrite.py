"""`rewrite`: run a computation as one device program, like `tf.compat.v1.tpu.rewrite` (exported as
`tpu_estimator.rewrite`)."""

from typing import Any, Callable, List, Optional, Sequence

import tensorflow as tf


def rewrite(
    computation: Callable[..., Any],
    inputs: Optional[Sequence[Any]] = None,
    infeed_queue=None,
    device_assignment=None,
    name: Optional[str] = None,
    xla_options=None,
) -> Any:
    """Builds `computation(*inputs)` in place, returning its outputs as upstream's `rewrite` does.

    Upstream compiles the computation for one TPU core; here it runs on the current device. Outputs follow
    upstream: a list of tensors (operations in the output become control dependencies of the tensors), `None`
    when the computation returns nothing.

    Args:
      computation: a Python function building the computation.
      inputs: a list of inputs, passed positionally.
      infeed_queue: must be None (there is no TPU infeed).
      device_assignment: must be None.
      name: unused (upstream's name of the replicated computation).
      xla_options: unused.

    Returns:
      The computation's outputs.

    Raises:
      ValueError: `infeed_queue` or `device_assignment` given.
    """
    del name, xla_options
    if infeed_queue is not None:
        raise ValueError("rewrite(infeed_queue=...) needs a TPU infeed; pass the tensors as inputs instead.")
    if device_assignment is not None:
        raise ValueError("rewrite(device_assignment=...) needs a TPU topology; remove it.")
    outputs = computation(*(list(inputs) if inputs else []))
    if outputs is None:
        return None
    flat = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    tensors: List[Any] = [o for o in flat if not isinstance(o, tf.Operation)]
    ops = [o for o in flat if isinstance(o, tf.Operation)]
    if ops and tensors:
        with tf.control_dependencies(ops):
            tensors = [tf.identity(t) for t in tensors]
    if not tensors:
        return ops[0] if len(ops) == 1 else tf.group(*ops)
    return tensors
