"""Batch sizes beyond TensorFlow's int32 batch dimension are refused when the estimator is made, naming the argument
(issue 36 item 7: a batch of 2**31 ended in an OverflowError deep in graph construction)."""

import pytest
import tensorflow as tf

import tpu_estimator as te


def model_fn(features, labels, mode, params):
    loss = tf.reduce_mean(features["x"])
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=tf.no_op())


def make(tmp_path, **batch_sizes):
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=1))
    arguments = dict(train_batch_size=8)
    arguments.update(batch_sizes)
    return te.TPUEstimator(model_fn=model_fn, config=config, **arguments)


@pytest.mark.parametrize("name", ["train_batch_size", "eval_batch_size", "predict_batch_size"])
def test_a_batch_of_2_to_the_31_is_refused_naming_the_argument(tmp_path, name):
    with pytest.raises(ValueError) as raised:
        make(tmp_path, **{name: 2**31})
    assert str(raised.value) == f"{name} must be less than 2**31 (TensorFlow's int32 batch dimension), got 2147483648"
    make(tmp_path, **{name: 2**31 - 1})  # the largest accepted
