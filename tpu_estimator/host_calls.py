"""Host calls (`host_call`, `eval_metrics`): validation, calling, and the hooks that run them."""

import tensorflow as tf

from tpu_estimator import _tf_internal


def validate(host_calls: dict) -> None:
    """Checks `{name: (fn, tensors)}` with upstream's messages.

    Raises:
      ValueError: not a pair, or tensors neither list/tuple nor dict.
      TypeError: the function is not callable.
    """
    for name, host_call in host_calls.items():
        if not isinstance(host_call, (tuple, list)):
            raise ValueError("{} should be tuple or list".format(name))
        if len(host_call) != 2:
            raise ValueError("{} should have two elements.".format(name))
        if not callable(host_call[0]):
            raise TypeError("{}[0] should be callable.".format(name))
        if not isinstance(host_call[1], (tuple, list, dict)):
            raise ValueError("{}[1] should be tuple or list, or dict.".format(name))


def call(host_call, tensors=None):
    """Calls `fn(*tensors)` or `fn(**tensors)`; `tensors` defaults to the call's own tensors."""
    fn, own = host_call
    tensors = own if tensors is None else tensors
    if isinstance(tensors, dict):
        return fn(**tensors)
    return fn(*tensors)


def flatten_tensors(host_call):
    """The call's tensors as a flat list (dict values in sorted key order)."""
    tensors = host_call[1]
    if isinstance(tensors, dict):
        return [tensors[key] for key in sorted(tensors)]
    return list(tensors)


def pack_tensors(host_call, flat):
    """Inverse of `flatten_tensors` for the structure of `host_call`."""
    tensors = host_call[1]
    if isinstance(tensors, dict):
        return dict(zip(sorted(tensors), flat))
    return list(flat)


def concat_over_replicas(name: str, host_calls_per_replica, device: str):
    """Concatenates each tensor of a host call over replicas on axis 0, on `device`.

    Raises:
      ValueError: a tensor is a scalar (it must keep a batch dimension to be concatenated).
    """
    flats = [flatten_tensors(call_) for call_ in host_calls_per_replica]
    result = []
    with tf.device(device):
        for index, tensor in enumerate(flats[0]):
            tensor = tf.convert_to_tensor(tensor)
            if tensor.shape.rank == 0:
                raise ValueError(
                    "All tensors outfed from TPU should preserve batch size dimension, but got scalar {} in {}. Reshape "
                    "it to rank 1 (e.g. tf.reshape(t, [1])).".format(tensor, name)
                )
            pieces = [tf.convert_to_tensor(flat[index]) for flat in flats]
            result.append(pieces[0] if len(pieces) == 1 else tf.concat(pieces, axis=0))
    return result


class SummaryWritersHook(tf.compat.v1.train.SessionRunHook):
    """Initialises the `tf.compat.v2.summary` writers of the graph (host calls create them) and flushes them."""

    def begin(self):
        self._init_ops = _tf_internal.summary_writer_initializer_ops()
        self._flush_ops = _tf_internal.summary_writer_flush_ops(self._init_ops)

    def after_create_session(self, session, coord):
        session.run(self._init_ops)

    def end(self, session):
        session.run(self._flush_ops)


class CpuHostCallHook(SummaryWritersHook):
    """Runs the host call's ops every step (upstream's CPU path)."""

    def __init__(self, ops):
        self._ops = ops

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._ops)
