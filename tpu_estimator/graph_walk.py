"""Walking a graph backwards: the ops that some ops depend on, through data and control inputs."""

from typing import Callable, Iterable, Iterator, Optional

import tensorflow as tf


def ancestor_ops(
    roots: Iterable[tf.Operation],
    prune: Optional[Callable[[tf.Operation], bool]] = None,
    follow: Optional[Callable[[tf.Tensor], bool]] = None,
) -> Iterator[tf.Operation]:
    """Yields `roots` and every op they depend on through data and control inputs, each once, depth-first.

    Args:
      roots: the ops to start from.
      prune: an op for which `prune(op)` is true is neither yielded nor walked through; asked once per op, when the
        walk reaches it (after the ops yielded before it, so it may read what the caller did with them).
      follow: the data inputs of a yielded op that are walked (`follow(tensor)` true; all when None). Control
        inputs are always walked.
    """
    seen = set()
    pending = list(roots)
    while pending:
        op = pending.pop()
        if op in seen:
            continue
        seen.add(op)
        if prune is not None and prune(op):
            continue
        yield op
        pending.extend(t.op for t in op.inputs if follow is None or follow(t))
        pending.extend(op.control_inputs)
