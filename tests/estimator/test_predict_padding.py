"""PREDICT's padded batches: padded rows repeat the last real row, so feature transformations that hold on the real
rows hold on the padding (issue 14 findings WEIGHTED_COLUMN_DENSE_PREDICT, SPARSE_PREDICT_ON_SHARDS). The cases
predict 13 rows in batches of 4 (a partial last batch) and must give the NumPy oracle's prediction for every row."""

import numpy as np
import pytest
import tensorflow as tf

from tests.conformance import cases
from tpu_estimator.inputs import input_pipeline

BASE = dict(cases.BASE_CASE, mode="predict")


def case_of(**overrides):
    return cases.working_case(BASE, **overrides)


def _evaluate(structure):
    with tf.Graph().as_default():
        tensors = structure()
        with tf.compat.v1.Session() as session:
            return session.run(tensors)


@pytest.mark.quick
def test_dense_padding_repeats_the_last_real_row():
    def build():
        batch = tf.constant([[1.0, 2.0], [3.0, 4.0]])
        return input_pipeline._pad({"x": batch, "i": tf.constant([7, 8], tf.int64)}, 4, "/device:CPU:0")

    padded, mask = _evaluate(build)
    np.testing.assert_array_equal(padded["x"], [[1, 2], [3, 4], [3, 4], [3, 4]])
    np.testing.assert_array_equal(padded["i"], [7, 8, 8, 8])
    np.testing.assert_array_equal(mask, [True, True, False, False])


def test_statically_full_batch_is_passed_through_without_padding_ops():
    with tf.Graph().as_default() as graph:
        sparse = tf.SparseTensor([[0, 0], [1, 0], [1, 1]], tf.constant([5, 6, 7], tf.int64), [2, 2])
        dense = tf.constant([[1.0], [2.0]])
        gate = tf.compat.v1.placeholder_with_default(True, [])
        guard = tf.debugging.Assert(gate, ["end of input"])
        guard_op = graph.get_operations()[-1]
        before = len(graph.get_operations())
        with tf.control_dependencies([guard]):
            padded, mask = input_pipeline._pad({"x": dense, "s": sparse, "none": None}, 2, "/device:CPU:0")
        added = graph.get_operations()[before:]
        # One identity per tensor (the SparseTensor's three components) and the mask: no gather, tile or assert.
        assert sorted(op.type for op in added) == ["Const", "Identity", "Identity", "Identity", "Identity"]
        # Every passed-through tensor still waits for the caller's control inputs (PER_HOST_V2's end guard).
        identities = [op for op in added if op.type == "Identity"]
        assert identities and all(op.control_inputs == [guard_op] for op in identities)
        with tf.compat.v1.Session() as session:
            values, mask_value = session.run(({"x": padded["x"], "s": padded["s"]}, mask))
    np.testing.assert_array_equal(values["x"], [[1.0], [2.0]])
    np.testing.assert_array_equal(values["s"].values, [5, 6, 7])
    assert padded["none"] is None
    np.testing.assert_array_equal(mask_value, [True, True])


def test_sparse_padding_repeats_the_last_real_row_in_order():
    def build():
        ids = tf.SparseTensor([[0, 0], [1, 0], [1, 2]], tf.constant([5, 6, 7], tf.int64), [2, 3])
        (padded, labels), mask = input_pipeline._pad((ids, None), 4, "/device:CPU:0")
        assert labels is None
        return padded, mask

    ids, mask = _evaluate(build)
    np.testing.assert_array_equal(ids.indices, [[0, 0], [1, 0], [1, 2], [2, 0], [2, 2], [3, 0], [3, 2]])
    np.testing.assert_array_equal(ids.values, [5, 6, 7, 6, 7, 6, 7])
    np.testing.assert_array_equal(ids.dense_shape, [4, 3])
    np.testing.assert_array_equal(mask, [True, True, False, False])


def test_empty_batch_pads_with_zeros_and_empty_rows():
    def build():
        dense = tf.zeros([0, 2], tf.float32)
        ids = tf.SparseTensor(tf.zeros([0, 2], tf.int64), tf.zeros([0], tf.int64), [0, 3])
        return input_pipeline._pad({"ids": ids, "x": dense}, 2, "/device:CPU:0")

    padded, mask = _evaluate(build)
    np.testing.assert_array_equal(padded["x"], np.zeros([2, 2]))
    assert padded["ids"].values.size == 0 and list(padded["ids"].dense_shape) == [2, 3]
    np.testing.assert_array_equal(mask, [False, False])


@pytest.mark.parametrize(
    "input_config,shards", [("PER_HOST_V1", 1), ("PER_HOST_V1", 2), ("PER_HOST_V2", 2), ("SLICED", 2)]
)
def test_predict_with_weighted_column_over_dense_ids_and_weights(tmp_path, input_config, shards):
    # Zero-padded weights were dropped by the column's dense-to-sparse conversion while zero ids were kept.
    case = case_of(embedding="weighted_columns", input_config=input_config, shards=shards)
    cases.run_case(case, str(tmp_path))


@pytest.mark.parametrize("input_config", ["PER_HOST_V1", "PER_HOST_V2", "SLICED"])
def test_predict_sparse_feature_without_embeddings_on_two_shards(tmp_path, input_config):
    # A replica whose rows were all padding got an empty SparseTensor: a lookup of 0 rows beside 2 rows of `x`.
    cases.run_case(case_of(id_format="sparse", input_config=input_config), str(tmp_path))
