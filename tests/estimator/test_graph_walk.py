"""`graph_walk.ancestor_ops`: the ops some ops depend on, through data and control inputs, pruned and filtered."""

import tensorflow as tf

from tpu_estimator.graph_walk import ancestor_ops


def _graph():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.constant(2.0, name="b")
        c = tf.constant(3.0, name="c")
        with tf.control_dependencies([c]):
            d = tf.add(a, b, name="d")
        e = tf.multiply(d, a, name="e")
        tf.constant(4.0, name="unrelated")
    return graph, e


def _names(ops):
    return sorted(op.name for op in ops)


def test_all_ancestors_once_through_data_and_control_inputs():
    graph, e = _graph()
    ops = list(ancestor_ops([e.op]))
    assert len(ops) == len(set(ops))
    assert _names(ops) == ["a", "b", "c", "d", "e"]


def test_pruned_ops_are_neither_yielded_nor_walked_through():
    graph, e = _graph()
    asked = []

    def prune(op):
        asked.append(op.name)
        return op.name == "d"

    assert _names(ancestor_ops([e.op], prune=prune)) == ["a", "e"]
    assert sorted(asked) == ["a", "d", "e"]  # each op reached asked once; nothing behind d reached


def test_follow_filters_data_inputs_only():
    graph, e = _graph()
    d = graph.get_operation_by_name("d")
    ops = ancestor_ops([d], follow=lambda tensor: tensor.op.name != "b")
    assert _names(ops) == ["a", "c", "d"]  # b's edge not followed; the control input c is
