"""`TensorInfeedHook`: a failure of its thread reaches the caller and never leaves the step waiting."""

import threading

import pytest
import tensorflow as tf

from tpu_estimator.inputs.input_pipeline import TensorInfeedHook, drain


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


def _counting_loop(steps_per_run, stop_signal, queue, record):
    """An enqueue loop of `steps_per_run` steps per run that records when a run starts and when it completes."""

    def mark(event):
        return tf.py_function(lambda: record.append(event) or 0, [], tf.int32)

    with tf.control_dependencies([mark("started")]):
        start = tf.constant(0)

    def body(index):
        with tf.control_dependencies([queue.enqueue([index])]):
            return index + 1

    loop = tf.compat.v1.while_loop(
        lambda index: tf.logical_and(index < steps_per_run, tf.logical_not(stop_signal.is_closed())), body, [start]
    )
    with tf.control_dependencies([loop]):
        return mark("completed")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("drained", [True, False], ids=["drained", "cancelled"])
def test_the_sessions_end_lets_the_threads_last_run_complete_instead_of_cancelling_it(drained):
    # The thread runs ahead until the queue is full; the caller stops after 3 steps. Drained, the thread's pending
    # run completes (a cancelled run is a C++ warning in TensorFlow's log at every run's end); the reference case
    # shows the run that would otherwise be cancelled.
    record = []
    with tf.Graph().as_default():
        queue = tf.queue.FIFOQueue(2, [tf.int32], shapes=[[]])
        stop_signal = tf.queue.FIFOQueue(1, [tf.bool], shapes=[[]])
        enqueue = _counting_loop(10, stop_signal, queue, record)
        hook = TensorInfeedHook(
            enqueue.op,
            queue.close(cancel_pending_enqueues=True),
            stop_op=stop_signal.close() if drained else None,
            drain_op=drain([queue]) if drained else None,
        )
        step, size = queue.dequeue(), queue.size()
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as monitored:
            taken = [monitored.run(step) for _ in range(3)]
            while monitored.run(size) < 2:  # the thread waits on a full queue
                pass
    assert taken == [0, 1, 2]
    if drained:
        assert record == ["started", "completed"]
    else:
        assert record == ["started"]
