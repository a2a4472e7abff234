"""Running a test program as a job of one process per host on loopback (`tpu_estimator.app.hosts`), or as one
process, and reading what it left in its model_dir: shared by the host-process tests."""

import io
import json
import os
import subprocess
import sys
import time
from typing import List, Tuple

import pytest
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
    run_program_command(command, num_hosts)


def run_program_command(command: List[str], num_hosts: int) -> None:
    """Runs `command` as a job of `num_hosts` (`tpu_estimator.app.hosts`).

    Raises:
      AssertionError: a host failed; the message holds the end of every host's output.
    """
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


def check_hosts_as_one(one: dict, many: List[dict]) -> dict:
    """Every host of a job reports the one-host run's metrics, and the hosts' predictions (each its own rows, by row
    id) together are the one host's; returns them joined."""
    for result in many:  # every host reports the job's metrics: replica 0's loss, every host's rows
        for key, value in one["metrics"].items():
            assert result["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    joined = {}
    for result in many:
        assert not set(result["predictions"]) & set(joined)
        joined.update(result["predictions"])
    assert set(joined) == set(one["predictions"])
    for row, logit in one["predictions"].items():
        assert joined[row] == pytest.approx(logit, rel=1e-5, abs=1e-6), row
    return joined


def kill_one_host_mid_training(
    program: str, args: List[str], model_dir, log_dir, killed: int
) -> Tuple[int, float, str]:
    """Runs `python program *args` as a job of 2 hosts, kills host `killed` once `model_dir` has `model.ckpt-4`,
    and waits for the other host to end.

    Returns:
      The survivor's exit code, the seconds from the kill to its end, and its output.

    Raises:
      AssertionError: the survivor ended before the kill (the message holds the end of its output).
    """
    survivor = 1 - killed
    addresses = hosts.loopback_addresses(2)
    command = [sys.executable, program] + [str(a) for a in args]
    log_paths = [os.path.join(str(log_dir), "host{}.log".format(h)) for h in range(2)]
    logs, processes = [], []
    for host in range(2):
        env = dict(program_env(), TF_CONFIG=hosts.host_tf_config(addresses, host))
        logs.append(open(log_paths[host], "w"))
        processes.append(subprocess.Popen(command, env=env, stdout=logs[host], stderr=subprocess.STDOUT))
    try:
        deadline = time.time() + RUN_TIMEOUT_SECS
        while time.time() < deadline and not os.path.exists(os.path.join(str(model_dir), "model.ckpt-4.index")):
            assert processes[survivor].poll() is None, open(log_paths[survivor]).read()[-3000:]
            time.sleep(0.2)
        processes[killed].kill()
        killed_at = time.time()
        code = processes[survivor].wait(timeout=90)
        elapsed = time.time() - killed_at
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        for log in logs:
            log.close()
    return code, elapsed, open(log_paths[survivor]).read()
