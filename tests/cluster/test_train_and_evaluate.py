"""`train_and_evaluate(TPUEstimator)` under a distributed `TF_CONFIG`, on our Estimator core.

TPUEstimator replicates in-graph from one client: the `chief` task (the client) runs the local loop over the hosts;
a `worker`, `ps` or `evaluator` task is an error that says what runs there instead.
"""

import json
import os

import numpy as np
import pytest
from google.protobuf import text_format

import tpu_estimator as te
from tests.cluster.local_cluster import free_ports
from tests.estimator import models as dense_models
from tests.estimator_core import helpers
from tpu_estimator import _estimator_lib, estimator_core
from tpu_estimator import estimator as tf_estimator

pytestmark = pytest.mark.skipif(
    _estimator_lib.CORE != "ours", reason="our core's train_and_evaluate (TF 2.15 runs upstream's unchanged)"
)


def _set_tf_config(monkeypatch, workers, task_type):
    cluster = {"chief": ["127.0.0.1:{}".format(free_ports(1)[0])], "worker": list(workers)}
    if task_type == "ps":
        cluster["ps"] = ["127.0.0.1:{}".format(free_ports(1)[0])]
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}}))


def _estimator(model_dir):
    config = te.RunConfig(
        model_dir=str(model_dir),
        save_checkpoints_steps=2,
        tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=4),
    )
    return te.TPUEstimator(
        model_fn=dense_models.make_model_fn(), config=config, train_batch_size=16, eval_batch_size=16
    )


def _variable_devices(model_dir):
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    with open(os.path.join(str(model_dir), "graph.pbtxt")) as f:
        text_format.Parse(f.read(), graph)
    return {node.name: node.device for node in graph.node if node.op in ("VarHandleOp", "VariableV2")}


def test_the_chief_is_the_client_and_trains_and_evaluates_on_the_hosts(tmp_path, monkeypatch, cluster2):
    _set_tf_config(monkeypatch, cluster2.addresses, "chief")
    estimator = _estimator(tmp_path)
    assert estimator.config.tpu_cluster.addresses == tuple(cluster2.addresses)
    metrics, _ = tf_estimator.train_and_evaluate(
        estimator,
        tf_estimator.TrainSpec(dense_models.dataset_input_fn, max_steps=4),
        tf_estimator.EvalSpec(dense_models.dataset_input_fn, steps=2, throttle_secs=0),
    )
    assert metrics["global_step"] == 4
    # Evaluated in this process after the checkpoints at 2 and 4, with the final checkpoint's values.
    assert [step for step, _ in helpers.event_values(estimator.eval_dir(), "mse")] == [2, 4]
    again = estimator.evaluate(dense_models.dataset_input_fn, steps=2)
    for key in ("loss", "mse", "mean_prediction"):
        np.testing.assert_allclose(metrics[key], again[key], rtol=1e-6, err_msg=key)
    # The variables lived on the hosts (in-graph), not on a ps.
    devices = _variable_devices(tmp_path)
    assert devices.pop("global_step") == ""  # placed by the session, on task 0
    assert devices and set(devices.values()) == {"/job:worker/task:0/device:CPU:0"}, devices


@pytest.mark.parametrize("task_type", ["worker", "ps", "evaluator"])
def test_other_tasks_are_told_what_to_run(tmp_path, monkeypatch, task_type):
    _set_tf_config(monkeypatch, ["127.0.0.1:{}".format(free_ports(1)[0])], task_type)
    # Workers without a chief are the hosts of a job of one process per host: the seam's train_and_evaluate runs
    # their loop (tests/cluster/test_host_train_and_evaluate.py), the core's says so.
    expected = {
        "worker": "with one process per host .*runs through tpu_estimator.estimator.train_and_evaluate",
        "ps": "runs in its cluster's client only, but TF_CONFIG makes this a 'ps' task.*tpu-estimator-server",
        "evaluator": "runs in its cluster's client only, but TF_CONFIG makes this a 'evaluator' task.*tpu-estimator",
    }[task_type]
    with pytest.raises(ValueError, match=expected):
        estimator_core.train_and_evaluate(
            _estimator(tmp_path),
            tf_estimator.TrainSpec(dense_models.dataset_input_fn, max_steps=1),
            tf_estimator.EvalSpec(dense_models.dataset_input_fn, steps=1),
        )
    assert not os.listdir(tmp_path)  # Nothing ran.
