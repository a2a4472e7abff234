"""A cluster of `tpu-estimator-server` workers on this machine's loopback interface, for benchmarks.

Each worker is its own process (`python -m tpu_estimator.app.cluster_server`) on a free 127.0.0.1 port with
`cpu_shards` logical CPU devices; the cluster stops (SIGTERM, then SIGKILL) when the `with` block ends. The
bytes the loopback interface carries (`/proc/net/dev`, Linux) measure what the gRPC runtime sends between the
client and the workers.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterator, List

START_TIMEOUT_SECS = 120
# `tpu_estimator.app.cluster_server.READY_MESSAGE`, not imported: that module defines absl flags when imported.
READY_MESSAGE = "tpu-estimator-server ready"


def free_ports(count: int) -> List[int]:
    """`count` distinct ports that are free on 127.0.0.1 right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def loopback_bytes() -> int:
    """Bytes received so far on the loopback interface (`lo` in `/proc/net/dev`; each byte sent is received once).

    Raises:
      OSError: no `/proc/net/dev` (not Linux) or no `lo` line.
    """
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                return int(counters.split()[0])
    raise OSError("/proc/net/dev has no 'lo' interface")


@contextlib.contextmanager
def loopback_cluster(num_hosts: int, cpu_shards: int) -> Iterator[Dict[str, List[str]]]:
    """Starts `num_hosts` workers of job `worker`; yields the cluster spec dict (`{'worker': [host:port, ...]}`).

    Raises:
      RuntimeError: a worker exited or did not print its ready line within `START_TIMEOUT_SECS` (its log is
        in the message).
    """
    spec = {"worker": ["127.0.0.1:{}".format(port) for port in free_ports(num_hosts)]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    processes, logs = [], []
    with tempfile.TemporaryDirectory(prefix="loopback_cluster_") as log_dir:
        try:
            for task in range(num_hosts):
                log_path = os.path.join(log_dir, "worker_{}.log".format(task))
                logs.append(log_path)
                argv = [sys.executable, "-m", "tpu_estimator.app.cluster_server", "--cluster=" + json.dumps(spec)]
                argv += ["--task={}".format(task), "--cpu_shards={}".format(cpu_shards)]
                with open(log_path, "w") as log:
                    processes.append(
                        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                    )
            for process, log_path in zip(processes, logs):
                wait_for_line(process, READY_MESSAGE, START_TIMEOUT_SECS, log_path)
            yield spec
        finally:
            for process in processes:
                _stop(process)


def wait_for_line(process: subprocess.Popen, text: str, timeout_secs: float, log_path: str) -> None:
    """Returns once `text` appears in the process's log file.

    Raises:
      RuntimeError: the process exited, or `timeout_secs` passed, first (with the end of its log).
    """
    deadline = time.time() + timeout_secs
    while time.time() < deadline:
        with open(log_path) as log:
            if text in log.read():
                return
        if process.poll() is not None:
            break
        time.sleep(0.2)
    with open(log_path) as log:
        raise RuntimeError(
            "{} did not print {!r} within {} s:\n{}".format(
                " ".join(process.args), text, timeout_secs, log.read()[-3000:]
            )
        )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=15)
