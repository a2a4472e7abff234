"""`tpu-estimator-hosts` hands SIGTERM/SIGINT to its hosts, waits for them (bounded by `--stop_secs`), kills the
rest, and leaves no host behind (`tpu_estimator/app/hosts.py`).

The hosts are small Python processes (no TensorFlow) that listen on their `TF_CONFIG` port as a host's server does;
one of them (the chief or the other) ignores the signal, as a host busy in a long step or stuck would.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HOST = """
import json, os, signal, socket, sys, time
tf_config = json.loads(os.environ["TF_CONFIG"])
index = tf_config["task"]["index"]
port = int(tf_config["cluster"]["worker"][index].rpartition(":")[2])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen()
if index == int(sys.argv[1]):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
print("ready", os.getpid(), port, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    "signum,ignoring", [(signal.SIGTERM, 0), (signal.SIGINT, 1)], ids=["sigterm_chief_ignores", "sigint_host1_ignores"]
)
def test_a_signal_to_the_launcher_stops_every_host_and_leaves_no_orphan(tmp_path, signum, ignoring):
    command = [sys.executable, "-m", "tpu_estimator.app.hosts", "--num_hosts=2", "--stop_secs=3", "--"]
    command += [sys.executable, "-c", HOST, str(ignoring)]
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("TF_CONFIG", None)
    log_path = tmp_path / "launcher.log"
    with open(log_path, "w") as log:
        launcher = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    hosts = {}
    try:
        deadline = time.time() + 60
        while len(hosts) < 2 and time.time() < deadline and launcher.poll() is None:
            for host, pid, port in re.findall(r"^\[host (\d)\] ready (\d+) (\d+)$", log_path.read_text(), re.M):
                hosts[int(host)] = (int(pid), int(port))
            time.sleep(0.1)
        assert len(hosts) == 2, log_path.read_text()
        assert all(_listening(port) for _, port in hosts.values())

        signalled = time.time()
        launcher.send_signal(signum)
        code = launcher.wait(timeout=30)
        ended = time.time() - signalled
        # The obedient host ends at once; the one ignoring the signal is killed after --stop_secs.
        assert 2.5 < ended < 10, ended
        assert code == 128 + signum, log_path.read_text()
        for pid, port in hosts.values():
            assert not _alive(pid), (pid, log_path.read_text())
            assert not _listening(port), port
        output = log_path.read_text()
        codes = [-signal.SIGKILL if h == ignoring else -signum for h in range(2)]
        assert (
            "tpu-estimator-hosts: stopped by {}: every host was handed it and has ended (exit status {}).".format(
                signal.Signals(signum).name, ", ".join(str(c) for c in codes)
            )
            in output
        ), output
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid, _ in hosts.values():  # orphans left by a launcher that did not stop them
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
