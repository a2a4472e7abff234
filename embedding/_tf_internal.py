"""The few `tensorflow.python` internals `embedding/` needs, each wrapped once here.

Every other module of `embedding/` uses public TensorFlow APIs (tests/estimator/test_layering.py checks), except
`checkpointing.py`, which keeps the checkpoint internals of the shard variables behind itself for now.
"""

import contextlib
from typing import Iterator, Sequence

import tensorflow as tf


def control_flow_context(graph: tf.Graph):
    """The graph's current (TF1) control-flow context: None at the root, else the while loop or cond branch being
    built. Tensors made in one context can only be used in it (or in contexts nested in it)."""
    return graph._get_control_flow_context()


@contextlib.contextmanager
def without_control_dependencies(graph: tf.Graph) -> Iterator[None]:
    """Builds ops with no control dependencies, in the current control-flow context (loop or cond).

    `graph.control_dependencies(None)` also leaves the control-flow context (and restores it on exit); this stays in
    it, so that what is built belongs to the loop or branch (its frame's control input only).
    """
    context = graph._get_control_flow_context()
    with graph.control_dependencies(None):
        graph._set_control_flow_context(context)
        yield


def shard_info(shape: Sequence[int], offset: Sequence[int]):
    """The `shard_info` argument of a Keras/`tf.Module` initializer for the slice at `offset` of `shape`."""
    from tensorflow.python.trackable import base as trackable_base

    return trackable_base.ShardInfo(list(shape), tuple(offset))
