"""`TensorInfeedHook`: a failure of its thread reaches the caller and never leaves the step waiting."""

import threading

import pytest
import tensorflow as tf

from tpu_estimator.input_pipeline import TensorInfeedHook


class _Later(tf.compat.v1.train.SessionRunHook):
    """Runs `op` in the session from another thread, `secs` after the session starts."""

    def __init__(self, op, secs):
        self._op, self._secs = op, secs

    def after_create_session(self, session, coord):
        threading.Timer(self._secs, lambda: session.run(self._op)).start()


@pytest.mark.timeout(60)
def test_a_feed_run_cancelled_while_the_session_runs_is_the_callers_error():
    # The thread's run waits on another queue (as an exchange thread's run waits on another host); something else
    # cancels it (an aborted collective): the step must not wait for a batch that never comes, and the caller gets
    # the cancellation.
    with tf.Graph().as_default():
        side = tf.queue.FIFOQueue(1, [tf.int32])
        feed = tf.queue.FIFOQueue(1, [tf.int32])
        fill_side = side.enqueue([0])
        with tf.control_dependencies([side.enqueue([1])]):  # blocks: `side` is full
            enqueue = feed.enqueue([2])
        hook = TensorInfeedHook(enqueue, feed.close(cancel_pending_enqueues=True))
        cancel = side.close(cancel_pending_enqueues=True)
        step = feed.dequeue()
        with tf.compat.v1.Session() as session:
            session.run(fill_side)
            creator = tf.compat.v1.train.ChiefSessionCreator()
            creator.create_session = lambda: session  # the session with `side` full
            with pytest.raises(tf.errors.CancelledError):
                with tf.compat.v1.train.MonitoredSession(creator, hooks=[hook, _Later(cancel, 0.5)]) as monitored:
                    monitored.run(step)
