"""Input iterators without an idle tf.data autotuner (issue 38): a pipeline with nothing to tune is read with
`autotune.enabled=False` (no model thread for the session's close to wait for), yielding the same elements; a
pipeline with anything to tune, or whose autotune options the user set, is read as it is."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import dataset_options_pb2

from tpu_estimator.inputs import dataset_autotune
from tpu_estimator.inputs.input_pipeline import _Source

D = tf.data.Dataset


def _with_options(**autotune):
    options = tf.data.Options()
    for key, value in autotune.items():
        setattr(options.autotune, key, value)
    return options


CASES = {
    # Nothing to tune: sequential transformations, fixed prefetch, infinite repeat (-1 is no AUTOTUNE there), a
    # captured -1 in a map function, options that leave autotuning alone.
    "sequential": (lambda: D.range(10).map(lambda x: x + 1).batch(2).prefetch(4), False),
    "repeat_take": (lambda: D.range(10).repeat().take(-1), False),
    "captured_minus_one": (lambda: D.range(10).map(lambda x: x + tf.constant(-1, tf.int64)), False),
    "other_options": (lambda: D.range(10).with_options(tf.data.Options()), False),
    # Work for the autotuner, or the user's choice.
    "prefetch_autotune": (lambda: D.range(10).prefetch(tf.data.AUTOTUNE), True),
    "parallel_map_fixed": (lambda: D.range(10).map(lambda x: x, num_parallel_calls=2), True),
    "parallel_map_autotune": (lambda: D.range(10).map(lambda x: x, num_parallel_calls=tf.data.AUTOTUNE), True),
    "interleave": (lambda: D.range(3).interleave(lambda x: D.range(x)), True),
    "user_cpu_budget": (lambda: D.range(10).with_options(_with_options(cpu_budget=1)), True),
    "user_enabled": (lambda: D.range(10).with_options(_with_options(enabled=True)), True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_work_for_the_autotuner_is_found_in_the_graph(name):
    build, expected = CASES[name]
    with tf.Graph().as_default():
        assert dataset_autotune.has_work_for_autotune(build()) is expected


def _autotune_enabled_values(tensor):
    """The `autotune.enabled` values the OptionsDataset ops above `tensor` set."""
    values, stack, seen = [], [tensor.op], set()
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type == "OptionsDataset":
            options = dataset_options_pb2.Options()
            options.ParseFromString(op.get_attr("serialized_options"))
            if options.autotune_options.HasField("enabled"):
                values.append(options.autotune_options.enabled)
        stack.extend(t.op for t in op.inputs)
    return values


def _iterated_dataset():
    """The dataset the graph's one iterator is made from."""
    (make_iterator,) = [op for op in tf.compat.v1.get_default_graph().get_operations() if op.type == "MakeIterator"]
    return make_iterator.inputs[0]


def test_the_input_iterator_reads_a_sequential_pipeline_without_autotuning_and_the_same_elements():
    def pipeline():
        ids = np.arange(12, dtype=np.int64)
        return D.from_tensor_slices((ids, ids * 2.0)).map(lambda i, x: ({"i": i}, x)).batch(4).prefetch(2)

    with tf.Graph().as_default():
        source = _Source(pipeline(), "/cpu:0", allow_tensors=False, sleep_secs=None, position_index=None)
        assert _autotune_enabled_values(_iterated_dataset()) == [False]
        got = source._iterator.get_next()
        expected = tf.compat.v1.data.make_one_shot_iterator(pipeline()).get_next()
        with tf.compat.v1.Session() as session:
            session.run(source.initializer)
            for _ in range(3):
                ours, theirs = session.run([got, expected])
                np.testing.assert_array_equal(ours[0]["i"], theirs[0]["i"])
                np.testing.assert_array_equal(ours[1], theirs[1])


def test_the_input_iterator_keeps_autotuning_where_it_has_work():
    with tf.Graph().as_default():
        _Source(
            D.range(8).prefetch(tf.data.AUTOTUNE),
            "/cpu:0",
            allow_tensors=False,
            sleep_secs=None,
            position_index=None,
        )
        assert _autotune_enabled_values(_iterated_dataset()) == []
