"""Running a test program as a job of one process per host on loopback (`tpu_estimator.app.hosts`), or as one
process, and reading what it left in its model_dir: shared by the host-process tests."""

import io
import json
import os
import subprocess
import sys
from typing import List

import tensorflow as tf

from tests.cluster.local_cluster import worker_env
from tpu_estimator.app import hosts

RUN_TIMEOUT_SECS = 240


def program_env() -> dict:
    """The environment the test programs run in."""
    env = worker_env()
    env["TF_USE_LEGACY_KERAS"] = "1"  # the programs' tf.compat.v1.layers on TF 2.16+
    return env


def run_program(program: str, args: List[str], num_hosts: int) -> None:
    """Runs `python program *args` as one process (`num_hosts` 1, no `TF_CONFIG`) or as a job of `num_hosts`.

    Raises:
      AssertionError: a process failed; the message holds the end of every host's output (the first host to fail
        says why the others did).
    """
    command = [sys.executable, program] + [str(a) for a in args]
    if num_hosts == 1:
        subprocess.run(command, env=program_env(), check=True, timeout=RUN_TIMEOUT_SECS, capture_output=True)
        return
    out = io.StringIO()
    codes = hosts.run_hosts(command, num_hosts, grace_secs=RUN_TIMEOUT_SECS, env=program_env(), out=out)
    lines = out.getvalue().splitlines()
    tails = ["\n".join([x for x in lines if x.startswith("[host {}]".format(h))][-25:]) for h in range(num_hosts)]
    assert codes == [0] * num_hosts, "\n".join(tails)


def checkpoint_values(model_dir) -> dict:
    """Every variable of the latest checkpoint in `model_dir`, by name."""
    path = tf.train.latest_checkpoint(str(model_dir))
    return {name: tf.train.load_variable(path, name) for name, _ in tf.train.list_variables(path)}


def host_results(model_dir, num_hosts: int) -> List[dict]:
    """What each host's program wrote to `model_dir/result_host<i>.json`."""
    return [json.load(open(os.path.join(model_dir, "result_host{}.json".format(h)))) for h in range(num_hosts)]
