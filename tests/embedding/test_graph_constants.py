"""embedding.graph_constants: one Const per value inside `sharing()`, usable under any control flow."""

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from embedding import graph_constants


def test_one_op_per_value_and_dtype_inside_sharing_only():
    with tf.Graph().as_default() as graph:
        with graph_constants.sharing():
            a, b = graph_constants.constant(0, tf.int32), graph_constants.constant(0, tf.int32)
            c = graph_constants.constant(0, tf.int64)
            d = graph_constants.constant([1, -1], tf.int32)
        e = graph_constants.constant(0, tf.int32)  # Outside: a plain new constant.
        assert a is b
        assert len({id(a), id(c), id(d), id(e)}) == 4
        assert [op.type for op in graph.get_operations()].count("Const") == 4


def test_shared_constant_carries_no_outer_control_dependency_and_one_per_loop_or_branch():
    with tf.Graph().as_default() as graph:
        gate = tf.compat.v1.placeholder_with_default(1.0, [])
        with graph_constants.sharing():

            def body(i, total):
                with tf.control_dependencies([gate]):
                    step = graph_constants.constant(3, tf.int32)
                branch = tf.compat.v1.cond(i < 1, lambda: graph_constants.constant(3, tf.int32) * 10, lambda: step)
                return i + 1, total + step + branch

            # TF1 dataflow control flow, as the training loop builds it (tpu_estimator._tf_internal.v1_control_flow).
            v2, control_flow_util.ENABLE_CONTROL_FLOW_V2 = control_flow_util.ENABLE_CONTROL_FLOW_V2, False
            try:
                loop = tf.compat.v1.while_loop(lambda i, _: i < 2, body, [tf.constant(0), tf.constant(0)])
            finally:
                control_flow_util.ENABLE_CONTROL_FLOW_V2 = v2
        threes = [op for op in graph.get_operations() if op.type == "Const" and op.outputs[0].dtype == tf.int32]
        consts = [op for op in threes if tf.make_ndarray(op.get_attr("value")).tolist() == 3]
        assert len(consts) == 2  # One in the loop body (used twice), one in the conditional's branch.
        assert all(gate.op not in op.control_inputs for op in consts)
        with tf.compat.v1.Session() as session:
            assert session.run(loop)[1] == (3 + 30) + (3 + 3)


def test_eager_constants_are_values():
    with graph_constants.sharing():
        value = graph_constants.constant(np.ones([2]), tf.float32)
    np.testing.assert_array_equal(value.numpy(), [1.0, 1.0])
