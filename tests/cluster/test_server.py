"""`tpu-estimator-server`: flags and TF_CONFIG, serving a client run, stopping on SIGTERM."""

import json
import sys

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.cluster import model
from tests.cluster.local_cluster import LocalCluster, terminate
from tests.estimator import models
from tpu_estimator import cluster_server


def test_cluster_flag_forms_and_tf_config():
    assert cluster_server.parse_cluster("worker=h:1,h:2;ps=h:3") == {"worker": ["h:1", "h:2"], "ps": ["h:3"]}
    assert cluster_server.parse_cluster('{"worker": ["h:1"]}') == {"worker": ["h:1"]}
    with pytest.raises(ValueError, match="must be 'job=host:port,host:port'"):
        cluster_server.parse_cluster("h:1,h:2")
    assert cluster_server.resolve_task("worker=h:1,h:2", None, 1, "") == ({"worker": ["h:1", "h:2"]}, "worker", 1)
    tf_config = json.dumps({"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}})
    assert cluster_server.resolve_task(None, None, None, tf_config) == ({"worker": ["h:1", "h:2"]}, "worker", 1)
    with pytest.raises(ValueError, match=r"--task must be in \[0, 2\) for job 'worker'"):
        cluster_server.resolve_task("worker=h:1,h:2", None, 2, "")
    with pytest.raises(ValueError, match="No cluster: pass --cluster"):
        cluster_server.resolve_task(None, None, 0, "")


def _host_input_fn(params):
    """Host h of H reads the h-th block of every 16-row batch: the same global batches on any host count."""
    context = params["context"]
    dataset = tf.data.Dataset.from_tensor_slices((models.X, models.Y)).repeat()
    return model.host_rows(dataset, 16, context.num_hosts, context.current_host, params["batch_size"])


def _server_command(cluster_json, task, cpus):
    return [
        sys.executable,
        "-m",
        "tpu_estimator.cluster_server",
        "--cluster=" + cluster_json,
        "--task=%d" % task,
        "--cpu_shards=%d" % cpus,
    ]


def test_servers_serve_a_client_run_and_stop_on_sigterm(tmp_path):
    cluster = LocalCluster(2, str(tmp_path), command=_server_command)
    try:
        cluster.start()
        # num_shards unset: 2 hosts x 2 logical CPUs = 4 shards, trained like 1 host x 4.
        config = te.RunConfig(
            model_dir=str(tmp_path / "cluster"),
            cluster=cluster.resolver(),
            tpu_config=te.TPUConfig(iterations_per_loop=2),
        )
        est = te.TPUEstimator(model_fn=models.make_model_fn(), config=config, train_batch_size=16)
        assert config.num_shards == 4
        est.train(_host_input_fn, max_steps=2)
        local = models.make_estimator(tmp_path / "local", num_shards=4, iterations_per_loop=2, batch=16)
        local.train(_host_input_fn, max_steps=2)
        got, expected = models.variables_of(est), models.variables_of(local)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
        codes = [terminate(process) for process in cluster.processes]
        assert codes == [0, 0]
        for task, path in enumerate(cluster.log_paths):
            with open(path) as log:
                text = log.read()
            assert "/job:worker/task:%d serves" % task in text and "2 logical CPU(s)" in text, text
            assert "/job:worker/task:%d stopping" % task in text, text
    finally:
        cluster.stop()
