"""Where the upstream embedding API we mirror differs between TensorFlow 2.15 and TensorFlow 2.16-2.21.

Detected from the installed TensorFlow (what it exports), never from its version string.
"""

from typing import Any, Sequence

import tensorflow as tf

# TF >= 2.16: `tf.tpu.experimental.embedding.CustomCombiner`, a per-sample combiner function for SparseCore TPUs.
CUSTOM_COMBINER = getattr(tf.tpu.experimental.embedding, "CustomCombiner", None)


def combiner_error(accepted: Sequence[str], combiner: Any) -> str:
    """The installed TensorFlow's `TableConfig` message for a combiner outside `accepted`.

    Args:
      accepted: the combiner names `TableConfig` accepts.
      combiner: the rejected `combiner` argument.

    Returns:
      The message, worded as the installed TensorFlow's `tf.tpu.experimental.embedding.TableConfig` words it.
    """
    if CUSTOM_COMBINER is None:
        return f"Argument `combiner` must be one of {tuple(accepted)}. Received: {combiner}"
    if isinstance(combiner, str):
        return f"String argument `combiner` must be in {tuple(accepted)}. Received: {combiner}"
    if isinstance(combiner, CUSTOM_COMBINER):
        return (
            f"Argument `combiner`: tf.tpu.experimental.embedding.CustomCombiner is not supported off TPU "
            f"(it needs SparseCores). Use one of {tuple(accepted)}. Received: {combiner}"
        )
    return f"Argument `combiner` should either be a str or a CustomCombiner. Received: {type(combiner)}"
