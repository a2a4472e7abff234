"""What `input_fn` returns, turned into features, labels and the hooks that initialise the input."""

from typing import Any, List, Tuple

import tensorflow as tf

from tpu_estimator.estimator_core._tf_internal import fn_args as fn_args  # the arguments a function takes


class DatasetInitializerHook(tf.compat.v1.train.SessionRunHook):
    """Initialises a `tf.data` iterator when the session is created."""

    def __init__(self, iterator):
        self._iterator = iterator
        self._initializer = None

    def begin(self) -> None:
        self._initializer = self._iterator.initializer

    def after_create_session(self, session, coord) -> None:
        del coord
        session.run(self._initializer)


def parse_iterator_result(result: Any) -> Tuple[Any, Any]:
    """`(features, labels)` from an element: a 2-tuple/list is `(features, labels)`, anything else is features.

    Raises:
      ValueError: a list or tuple whose length is not 2.
    """
    if isinstance(result, (list, tuple)):
        if len(result) != 2:
            raise ValueError("input_fn should return (features, labels) as a len 2 tuple.")
        return result[0], result[1]
    return result, None


def parse_input_fn_result(result: Any) -> Tuple[Any, Any, List[tf.compat.v1.train.SessionRunHook]]:
    """`(features, labels, input_hooks)` from what `input_fn` returned.

    Args:
      result: a `tf.data.Dataset` of `(features, labels)` or features, a `(features, labels)` tuple, or features.

    Returns:
      features, labels (or None), and the hooks to run (the iterator initialiser for a `Dataset`).

    Raises:
      ValueError: the result (or the dataset element) is a list or tuple whose length is not 2.
    """
    input_hooks = []
    if isinstance(result, tf.compat.v2.data.Dataset):
        iterator = tf.compat.v1.data.make_initializable_iterator(result)
        input_hooks.append(DatasetInitializerHook(iterator))
        result = iterator.get_next()
    return parse_iterator_result(result) + (input_hooks,)


def has_dataset_or_queue_runner(maybe_tensor: Any) -> bool:
    """Whether the features come from a `tf.data` iterator or the graph has queue runners (input that ends)."""
    tensors = [x for x in tf.nest.flatten(maybe_tensor) if isinstance(x, tf.Tensor)]
    if any(t.op.type == "IteratorGetNext" for t in tensors):
        return True
    return bool(tf.compat.v1.get_default_graph().get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS))
