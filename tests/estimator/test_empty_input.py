"""An input that ends before the first training step is an error naming what to check (issue 36 item 4); upstream's
`train` returns having trained nothing. An input that ends later ends training quietly, as upstream's does, and a
hook that stops training before its first step is no input problem."""

import time

import pytest
import tensorflow as tf

from tests.estimator import models
from tpu_estimator.checkpoints.train_guard import EmptyTrainingInputError


def input_of(num_examples):
    def input_fn(params):
        ds = tf.data.Dataset.from_tensor_slices((models.X[:num_examples], models.Y[:num_examples]))
        return ds.batch(params["batch_size"], drop_remainder=True)

    return input_fn


@pytest.mark.parametrize("num_shards,use_tpu", [(2, True), (1, False)], ids=["two_shards", "cpu_path"])
def test_an_input_without_a_batch_is_an_error_within_seconds(tmp_path, num_shards, use_tpu):
    estimator = models.make_estimator(tmp_path, num_shards=num_shards, use_tpu=use_tpu, batch=16)
    start = time.time()
    with pytest.raises(EmptyTrainingInputError) as error:
        estimator.train(input_of(15), max_steps=10)  # fewer examples than one batch, drop_remainder=True
    assert time.time() - start < 30
    assert str(error.value).startswith(
        "train(): input_fn gave no batch: its input ended before the first training step, so nothing was trained "
        "(global step still 0, max_steps=10 not reached)."
    )
    # Resumed: the global step found is named.
    estimator.train(input_of(64), max_steps=3)
    with pytest.raises(EmptyTrainingInputError, match=r"\(global step still 3, steps=5 not run\)"):
        estimator.train(input_of(0), steps=5)
    assert estimator.get_variable_value("global_step") == 3


def test_an_input_ending_after_a_step_ends_training_quietly(tmp_path):
    """Upstream's behaviour: the steps read before the end are kept, inside a loop of several steps too."""
    estimator = models.make_estimator(tmp_path, num_shards=2, iterations_per_loop=4, batch=16)
    estimator.train(input_of(32), max_steps=10)
    assert estimator.get_variable_value("global_step") == 2


class StopAtOnce(tf.compat.v1.train.SessionRunHook):
    def after_create_session(self, session, coord):
        coord.request_stop()


def test_a_hook_stopping_before_the_first_step_is_not_an_input_error(tmp_path):
    estimator = models.make_estimator(tmp_path, num_shards=2, batch=16)
    estimator.train(input_of(64), max_steps=10, hooks=[StopAtOnce()])
    assert estimator.get_variable_value("global_step") == 0
