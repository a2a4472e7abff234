"""A host call as `TPUEstimatorSpec` holds it, `(fn, tensors)` (`host_call`, `eval_metrics`): checked with upstream's
messages, called, and on the CPU path run every step by a hook."""

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
