"""The process-wide changes of TensorFlow's module state (`_tf_internal.py`) last while any caller is inside, across
nesting and threads, and are undone when the last one leaves."""

import threading

import tensorflow as tf
from tensorflow.python.ops import control_flow_util
from tensorflow.python.tpu.ops import tpu_ops
from tensorflow.python.training import monitored_session

from tpu_estimator import _tf_internal


def test_v1_control_flow_holds_until_the_last_thread_leaves():
    original = control_flow_util.ENABLE_CONTROL_FLOW_V2
    first_in, second_in, first_out, second_done = (threading.Event() for _ in range(4))
    seen = {}

    def first():
        with _tf_internal.v1_control_flow():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        with _tf_internal.v1_control_flow():
            second_in.set()
            first_out.wait(10)
            # The first thread has left: this one still builds TF1 loops.
            seen["after_first_left"] = control_flow_util.ENABLE_CONTROL_FLOW_V2
            with tf.Graph().as_default():
                loop = tf.compat.v1.while_loop(lambda i: i < 3, lambda i: i + 1, [tf.constant(0)])
                seen["loop_op"] = loop.op.type
        second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert second_done.is_set()
    assert seen == {"after_first_left": False, "loop_op": "Exit"}
    assert control_flow_util.ENABLE_CONTROL_FLOW_V2 == original


def test_nested_patches_are_undone_by_the_outermost():
    original_sum = tpu_ops.gen_tpu_ops.cross_replica_sum
    original_errors = monitored_session._PREEMPTION_ERRORS
    calls = []
    with _tf_internal.cross_replica_sum_as_ours(lambda x, groups, name: calls.append(groups) or x):
        with _tf_internal.cross_replica_sum_as_ours(lambda x, groups, name: None):  # the first one's stays
            assert tpu_ops.gen_tpu_ops.cross_replica_sum(1.0, [[0, 1]]) == 1.0
        assert tpu_ops.gen_tpu_ops.cross_replica_sum(2.0, None) == 2.0
        with _tf_internal.without_session_recovery():
            with _tf_internal.without_session_recovery():
                pass
            assert monitored_session._PREEMPTION_ERRORS == ()
    assert calls == [[[0, 1]], None]
    assert tpu_ops.gen_tpu_ops.cross_replica_sum is original_sum
    assert monitored_session._PREEMPTION_ERRORS == original_errors
