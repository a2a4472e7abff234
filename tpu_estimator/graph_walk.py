"""Walking a graph backwards: the ops that some ops depend on, through data and control inputs."""

from typing import Iterable, Iterator, Optional

import tensorflow as tf


class AncestorWalk(object):
    """A depth-first walk from `roots` back through the ops they depend on, steered by its caller.

    Iterating yields each op once; the walk goes on through an op's inputs only when the caller says so
    (`go_through`), so the caller decides with its own code which ops to skip and which inputs to follow:

        walk = AncestorWalk(roots)
        for op in walk:
            if not wanted(op):
                continue
            ...
            walk.go_through(op)

    Args:
      roots: the ops to start from.
    """

    def __init__(self, roots: Iterable[tf.Operation]):
        self._seen = set()
        self._pending = list(roots)

    def __iter__(self) -> Iterator[tf.Operation]:
        while self._pending:
            op = self._pending.pop()
            if op in self._seen:
                continue
            self._seen.add(op)
            yield op

    def go_through(self, op: tf.Operation, data_inputs: Optional[Iterable[tf.Tensor]] = None) -> None:
        """Walks on from `op` through its control inputs and `data_inputs` (all its data inputs when None)."""
        inputs = op.inputs if data_inputs is None else data_inputs
        self._pending.extend(t.op for t in inputs)
        self._pending.extend(op.control_inputs)


def ancestor_ops(roots: Iterable[tf.Operation]) -> Iterator[tf.Operation]:
    """Yields `roots` and every op they depend on through data and control inputs, each once."""
    walk = AncestorWalk(roots)
    for op in walk:
        yield op
        walk.go_through(op)
