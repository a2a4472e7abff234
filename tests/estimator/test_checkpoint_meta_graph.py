"""Checkpoints of the training loop: the meta graph saved with each one serializes every collection of ours (the
loop-length tensor is registered by name), so saving logs no "Issue encountered when serializing" warning."""

import logging
import os

import tensorflow as tf

from tests.conformance import cases, programs
from tpu_estimator.modes import hooks

CASE = dict(cases.BASE_CASE, iterations_per_loop=3, optimizer="sgd")


def test_saving_checkpoints_logs_no_serialization_warning(tmp_path, caplog):
    estimator = programs.make_estimator(CASE, str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        estimator.train(programs.make_input_fn(CASE, "train"), max_steps=5)
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if "Issue encountered when serializing" in m], messages
    # The loop-length tensor, found by its name, still sizes the loops: 3 + 2 steps, exactly max_steps.
    assert estimator.get_variable_value("global_step") == 5
    meta_graph = tf.compat.v1.MetaGraphDef()
    with open(os.path.join(str(tmp_path), "model.ckpt-5.meta"), "rb") as meta_file:
        meta_graph.ParseFromString(meta_file.read())
    names = meta_graph.collection_def[hooks.ITERATIONS_PER_LOOP_COLLECTION].bytes_list.value
    assert [name.decode() for name in names] == ["iterations_per_loop:0"]
