"""A nest of tensors through a `tf.queue.FIFOQueue`, and back: `QueuedStructure`.

The input pipeline's tensor queue, the embedding infeed and the embedding exchange each send a structure (features
and labels, sparse tensors among them) through a queue and rebuild it on the other side. Composites (`SparseTensor`)
travel as their component tensors; `None` leaves (the labels of a features-only `input_fn`) stay in the structure,
not in the queue; the dequeued tensors get the static shapes of the tensors queued.
"""

from typing import Any, List

import tensorflow as tf


class QueuedStructure(object):
    """One structure's layout in a queue.

    Args:
      structure: a nest of tensors, composites and `None` leaves.

    Attributes:
      tensors: the structure's tensors in queue order (composites as their components, no `None`).
      dtypes: their dtypes, the queue's component types.
    """

    def __init__(self, structure: Any):
        self._structure = structure
        self.tensors: List[tf.Tensor] = [t for t in self._leaves() if t is not None]
        self.dtypes = [t.dtype for t in self.tensors]

    def _leaves(self) -> List[Any]:
        return tf.nest.flatten(self._structure, expand_composites=True)

    def unpack(self, values: Any) -> Any:
        """The structure rebuilt from `values` (a dequeue's result: one tensor or a list, in `tensors` order).

        Args:
          values: what `queue.dequeue()` returned.

        Returns:
          The structure with the dequeued tensors, each with its queued tensor's static shape.
        """
        values = dequeued_list(values)
        if len(values) != len(self.tensors):
            raise ValueError("Expected {} queued tensors, got {}.".format(len(self.tensors), len(values)))
        for value, original in zip(values, self.tensors):
            value.set_shape(original.shape)
        remaining = iter(values)
        leaves = [None if leaf is None else next(remaining) for leaf in self._leaves()]
        return tf.nest.pack_sequence_as(self._structure, leaves, expand_composites=True)


def dequeued_list(values: Any) -> List[tf.Tensor]:
    """A dequeue's result as a list (a queue of one component dequeues a tensor, not a list)."""
    return list(values) if isinstance(values, (list, tuple)) else [values]
