"""`graph_walk`: the ops some ops depend on, through data and control inputs; a walk its caller steers."""

import tensorflow as tf

from tpu_estimator.graph_walk import AncestorWalk, ancestor_ops


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


def test_ops_not_gone_through_are_yielded_and_nothing_behind_them_is_reached():
    graph, e = _graph()
    reached = []
    walk = AncestorWalk([e.op])
    for op in walk:
        reached.append(op.name)
        if op.name != "d":
            walk.go_through(op)
    assert sorted(reached) == ["a", "d", "e"]  # each op once; nothing behind d


def test_go_through_chosen_data_inputs_and_every_control_input():
    graph, e = _graph()
    d = graph.get_operation_by_name("d")
    walk = AncestorWalk([d])
    reached = []
    for op in walk:
        reached.append(op.name)
        walk.go_through(op, [t for t in op.inputs if t.op.name != "b"])
    assert _names(graph.get_operation_by_name(n) for n in reached) == ["a", "c", "d"]  # not b; the control input c
