"""Checkpoints of the training loop: the meta graph saved with each one serializes every collection in it (the
loop-length tensor is handed to its hook, in no collection), so saving logs no "Issue encountered when serializing"
warning."""

import logging
import os

import tensorflow as tf

from tests.conformance import cases, programs

CASE = dict(cases.BASE_CASE, iterations_per_loop=3, optimizer="sgd")


def test_saving_checkpoints_logs_no_serialization_warning(tmp_path, caplog):
    estimator = programs.make_estimator(CASE, str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        estimator.train(programs.make_input_fn(CASE, "train"), max_steps=5)
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if "Issue encountered when serializing" in m], messages
    # The loop-length tensor, handed to the loop's stop hook, sizes the loops: 3 + 2 steps, exactly max_steps.
    assert estimator.get_variable_value("global_step") == 5
    meta_graph = tf.compat.v1.MetaGraphDef()
    with open(os.path.join(str(tmp_path), "model.ckpt-5.meta"), "rb") as meta_file:
        meta_graph.ParseFromString(meta_file.read())
    assert not [key for key in meta_graph.collection_def if key.startswith("tpu_estimator")]
    assert "iterations_per_loop" in {node.name for node in meta_graph.graph_def.node}
