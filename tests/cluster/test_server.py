"""`tpu-estimator-server`: flags and TF_CONFIG, serving a client run, stopping on SIGTERM; impossible ports are
refused, and the ready line says that TensorFlow's server listens on every interface (issue 36 item 5)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.cluster import model
from tests.cluster.local_cluster import LocalCluster, terminate, worker_env
from tests.estimator import models
from tpu_estimator.app import cluster_server


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


def test_impossible_ports_are_refused_naming_the_address():
    cluster_server.check_addresses({"worker": ["h:1", "h:65535"], "ps": ["10.0.0.1:2222"]})
    for address in ("127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", "127.0.0.1:http", ":2222", "h:-1"):
        with pytest.raises(ValueError) as error:
            cluster_server.check_addresses({"worker": ["h:1", address]})
        assert str(error.value) == (
            f"--cluster: /job:worker/task:1 has address {address!r}: give host:port with a port in 1..65535."
        )


def test_the_server_refuses_port_99999_instead_of_claiming_it():
    """TensorFlow alone listens on port 99999 % 65536 (or any free port for 0) and reports that one."""
    proc = subprocess.run(
        [sys.executable, "-m", "tpu_estimator.app.cluster_server", "--cluster=worker=127.0.0.1:99999", "--task=0"],
        capture_output=True, text=True, env=worker_env(), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert cluster_server.READY_MESSAGE not in proc.stdout + proc.stderr
    assert "--cluster: /job:worker/task:0 has address '127.0.0.1:99999': give host:port with a port in 1..65535." in (
        proc.stderr
    )


def _listening_addresses(pid):
    """The local `(address hex, port)` of the TCP sockets process `pid` listens on (Linux /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    address, port = fields[1].split(":")
                    found.append((address, int(port, 16)))
    return found


def _host_input_fn(params):
    """Host h of H reads the h-th block of every 16-row batch: the same global batches on any host count."""
    context = params["context"]
    dataset = tf.data.Dataset.from_tensor_slices((models.X, models.Y)).repeat()
    return model.host_rows(dataset, 16, context.num_hosts, context.current_host, params["batch_size"])


def _server_command(cluster_json, task, cpus):
    return [
        sys.executable,
        "-m",
        "tpu_estimator.app.cluster_server",
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
        # What the ready line says: the port of the address, on every interface (all-zero local address).
        for process, address in zip(cluster.processes, cluster.addresses):
            port = int(address.rpartition(":")[2])
            listening = _listening_addresses(process.pid)
            assert listening and all(p == port and set(a) == {"0"} for a, p in listening), listening
        codes = [terminate(process) for process in cluster.processes]
        assert codes == [0, 0]
        for task, path in enumerate(cluster.log_paths):
            with open(path) as log:
                text = log.read()
            assert "/job:worker/task:%d serves" % task in text and "2 logical CPU(s)" in text, text
            assert "/job:worker/task:%d stopping" % task in text, text
            assert cluster_server.ready_line("worker", task, cluster.addresses[task]) + "\n" in text, text
            assert (
                "listens on every interface of this host at port {} (it cannot bind one address) and runs any "
                "graph sent to it: keep the port private".format(cluster.addresses[task].rpartition(":")[2])
                in text
            )
    finally:
        cluster.stop()
