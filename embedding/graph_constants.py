"""Small constants (axes, shapes, offsets) shared by the ops that one engine call builds in a graph.

Every `tf.reshape(x, [-1])`, `tf.concat(xs, axis=0)` or `tf.split(x, sizes, axis=0)` adds its own `Const` node,
and inside a `tf.compat.v1.while_loop` each of them also carries a control input and a while-context entry. The
engine builds such ops per table and per feature, so a many-table training graph held hundreds of copies of the
same few constants. Inside `sharing()` (entered by the engine around preprocessing, lookups and updates),
`constant(value, dtype)` returns ONE op per value, dtype, graph and control-flow context.

Only for ops on the device the enclosing call runs on (the host): a shared constant keeps the device of its
first use, so the per-shard ops under their own device scope make their own constants. A call that builds host
work on several hosts puts each host's ops under `placed(device)`, which keeps one set of shared constants per
host (a constant of one host read on another would cross the network every step).
"""

import contextlib
import threading
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import numpy as np
import tensorflow as tf

from embedding import _tf_internal

_state = threading.local()


@contextlib.contextmanager
def sharing() -> Iterator[None]:
    """Within this block (and any nested one), `constant()` shares its ops; no effect when executing eagerly."""
    if tf.executing_eagerly() or getattr(_state, "cache", None) is not None:
        yield
        return
    _state.cache = {}
    try:
        yield
    finally:
        _state.cache = None


@contextlib.contextmanager
def placed(device: str) -> Iterator[None]:
    """Ops built within go to `device`, and `constant()` shares constants only among ops built for `device`."""
    previous = getattr(_state, "device", None)
    _state.device = device
    try:
        with tf.device(device):
            yield
    finally:
        _state.device = previous


def constant(value: Any, dtype: tf.DType) -> tf.Tensor:
    """`tf.constant(value, dtype)`; in `sharing()`, one op per value, dtype, graph and control-flow context.

    Args:
      value: a Python or NumPy scalar or array.
      dtype: its dtype.

    Returns:
      The constant tensor.
    """
    cache: Optional[Dict[Tuple, tf.Tensor]] = getattr(_state, "cache", None)
    if cache is None or tf.executing_eagerly():
        return tf.constant(value, dtype)
    graph = tf.compat.v1.get_default_graph()
    context = _tf_internal.control_flow_context(graph)  # The while loop or cond branch being built, or None.
    array = np.asarray(value, dtype=dtype.as_numpy_dtype)
    key = (graph, context, getattr(_state, "device", None), dtype, array.shape, array.tobytes())
    if key not in cache:
        # Without the control dependencies in force: a constant shared by ops under different control dependencies
        # must not carry the first one's. In the loop or branch, the constant belongs to it (its frame's control
        # input only), where one made outside would need an Enter or Switch in each.
        with _tf_internal.without_control_dependencies(graph):
            cache[key] = tf.constant(array, dtype)
    return cache[key]


def unfoldable(value: Any, dtype: tf.DType) -> tf.Tensor:
    """A scalar `value` that Grappler cannot fold into its users (a placeholder with a constant default); in
    `sharing()`, one per value, dtype, graph and control-flow context.

    Executing eagerly, a plain constant.
    """
    if tf.executing_eagerly():
        return tf.constant(value, dtype)
    cache: Optional[Dict[Tuple, tf.Tensor]] = getattr(_state, "cache", None)
    graph = tf.compat.v1.get_default_graph()
    context = _tf_internal.control_flow_context(graph)
    key = ("unfoldable", graph, context, dtype, np.asarray(value, dtype=dtype.as_numpy_dtype).tobytes())
    if cache is not None and key in cache:
        return cache[key]
    with _tf_internal.without_control_dependencies(graph):
        tensor = tf.compat.v1.placeholder_with_default(tf.constant(value, dtype), [])
    if cache is not None:
        cache[key] = tensor
    return tensor


def shared(key: Any, build: Callable[[], tf.Tensor]) -> tf.Tensor:
    """`build()`, a tensor computed from shared constants only; in `sharing()`, built once per key, graph and
    control-flow context (like `constant`, outside the control dependencies in force).

    Args:
      key: a hashable description of what `build` computes.
      build: builds the tensor (from `constant()`s only, so that it is valid wherever the constants are).
    """
    cache: Optional[Dict[Tuple, tf.Tensor]] = getattr(_state, "cache", None)
    if cache is None or tf.executing_eagerly():
        return build()
    graph = tf.compat.v1.get_default_graph()
    context = _tf_internal.control_flow_context(graph)
    full_key = ("shared", graph, context, key)
    if full_key not in cache:
        with _tf_internal.without_control_dependencies(graph):
            cache[full_key] = build()
    return cache[full_key]
