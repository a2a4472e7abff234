"""One process per host: hosts' ports outside 1..65535 are refused before any server starts (the launcher's
`--first_port` too), and a host's process says on stderr that TensorFlow's server listens on every interface and how
to keep its port private (`cluster.check_host_addresses`, `cluster.open_port_notice`, `app/hosts.py`)."""

import json
import os
import socket
import subprocess
import sys

import pytest

import tpu_estimator as te
from tests.cluster.host_jobs import program_env
from tests.cluster.local_cluster import free_ports

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("bad_port", [0, 70000, 65536])
@pytest.mark.parametrize("this_host", [0, 1])
def test_a_host_port_outside_1_to_65535_is_refused_before_any_server_starts(monkeypatch, tmp_path, bad_port, this_host):
    # TensorFlow alone listens on 70000 % 65536 = 4464, or on any free port for 0: no other host could reach it.
    (good_port,) = free_ports(1)
    addresses = ["127.0.0.1:{}".format(good_port), "127.0.0.1:{}".format(bad_port)]
    tf_config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": this_host}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    monkeypatch.setenv("TPU_ESTIMATOR_HOSTS_WAIT_SECS", "3")  # unrefused, the start wait would end after 3 s
    with pytest.raises(ValueError) as error:
        te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(num_shards=2))
    assert str(error.value).startswith(
        "TF_CONFIG: /job:worker/task:1 has address '127.0.0.1:{}': give every host as host:port with a port in "
        "1..65535".format(bad_port)
    )
    assert not _listening(good_port)


@pytest.mark.parametrize("first_port", [65535, 70000])
def test_the_launcher_refuses_ports_past_65535(first_port):
    command = [sys.executable, "-m", "tpu_estimator.app.hosts", "--num_hosts=2", "--first_port=%d" % first_port]
    result = subprocess.run(
        command + ["--", sys.executable, "-c", "print('ran')"],
        env=dict(os.environ, PYTHONPATH=REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result
    assert "ran" not in result.stdout
    assert (
        "--first_port={} with --num_hosts=2: the hosts' ports {}..{} must lie in 1..65535".format(
            first_port, first_port, first_port + 1
        )
        in result.stderr
    ), result.stderr


@pytest.mark.parametrize("other_host", ["127.0.0.1", "10.255.255.1"], ids=["all_local", "one_elsewhere"])
def test_a_host_says_on_stderr_that_its_server_listens_on_every_interface(other_host):
    own, other = free_ports(2)
    addresses = ["127.0.0.1:{}".format(own), "{}:{}".format(other_host, other)]
    tf_config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": 0}}
    code = "import tpu_estimator as te\nte.RunConfig(model_dir='unused', tpu_config=te.TPUConfig(num_shards=2))\n"
    # Host 1 never starts: the start wait ends after 1 s (the notice comes before it).
    env = dict(program_env(), TF_CONFIG=json.dumps(tf_config), TPU_ESTIMATOR_HOSTS_WAIT_SECS="1", PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "did not start within 1 s" in result.stderr
    notice = (
        "tpu_estimator: host /job:worker/task:0 (127.0.0.1:{}): TensorFlow's gRPC server listens on every interface "
        "of this machine at port {} and runs any graph sent to it, unauthenticated; keep the port private: ".format(
            own, own
        )
    )
    assert notice in result.stderr, result.stderr
    if other_host == "127.0.0.1":
        assert "every host of this job is on this machine's loopback address, but the server cannot bind loopback" in (
            result.stderr
        )
        assert "iptables -A INPUT -p tcp --dport {} ! -i lo -j DROP".format(own) in result.stderr
    else:
        assert "run the hosts on a private network, or allow the port from the job's hosts only" in result.stderr
