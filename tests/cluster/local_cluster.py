"""Loopback clusters for the tests: worker subprocesses on 127.0.0.1, free ports, bounded waits, always killed."""

import json
import os
import signal
import socket
import subprocess
import sys
from typing import List, Optional, Sequence

from tpu_estimator.app.loopback_cluster import wait_for_line

# A plain tf.distribute.Server, as users start one (2 logical CPUs unless told otherwise).
_WORKER = """
import json, sys
import tensorflow as tf
cluster, task, cpus = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=task,
                              config=tf.compat.v1.ConfigProto(device_count={"CPU": cpus}), start=True)
print("worker ready", flush=True)
server.join()
"""

START_TIMEOUT_SECS = 90


def free_ports(count: int) -> List[int]:
    """`count` distinct ports free right now on 127.0.0.1."""
    sockets, ports = [], []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in sockets:
        sock.close()
    return ports


def worker_env() -> dict:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class LocalCluster(object):
    """`num_workers` worker processes of job `worker` on loopback ports.

    Args:
      num_workers: number of tasks.
      log_dir: where each worker's output goes.
      cpus: logical CPU devices per worker.
      command: optional argv builder `command(cluster_json, task, cpus) -> list` (default: a plain Server).
      cwd: the workers' working directory (default: this process's).
    """

    def __init__(self, num_workers: int, log_dir: str, cpus: int = 2, command=None, cwd: Optional[str] = None):
        self.addresses = ["127.0.0.1:{}".format(p) for p in free_ports(num_workers)]
        self.spec = {"worker": list(self.addresses)}
        self._log_dir = log_dir
        self._cpus = cpus
        self._command = command
        self._cwd = cwd
        self.processes: List[Optional[subprocess.Popen]] = [None] * num_workers
        self.log_paths = [os.path.join(log_dir, "worker_{}.log".format(i)) for i in range(num_workers)]

    @property
    def target(self) -> str:
        return "grpc://" + self.addresses[0]

    def _argv(self, task: int) -> List[str]:
        if self._command is not None:
            return self._command(json.dumps(self.spec), task, self._cpus)
        return [sys.executable, "-c", _WORKER, json.dumps(self.spec), str(task), str(self._cpus)]

    def start(self, tasks: Optional[Sequence[int]] = None) -> "LocalCluster":
        tasks = range(len(self.addresses)) if tasks is None else tasks
        for task in tasks:
            with open(self.log_paths[task], "w") as log:
                self.processes[task] = subprocess.Popen(
                    self._argv(task),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=worker_env(),
                    start_new_session=True,
                    cwd=self._cwd,
                )
        for task in tasks:
            wait_for_line(self.processes[task], "ready", START_TIMEOUT_SECS, self.log_paths[task])
        return self

    def kill(self, task: int) -> None:
        process = self.processes[task]
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        self.processes[task] = None

    def stop(self) -> None:
        for task in range(len(self.processes)):
            self.kill(task)

    def resolver(self):
        import tensorflow as tf

        return tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(self.spec))


def terminate(process: subprocess.Popen, timeout: float = 30) -> int:
    """Sends SIGTERM and waits (bounded); returns the exit code."""
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=timeout)
