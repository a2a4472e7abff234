"""Distributed `train_and_evaluate` on loopback clusters: one process per `TF_CONFIG` task (`cluster_program.py`).

Every process is bounded by a deadline and killed at the end; the `ps` task never ends by itself (as upstream's),
so the test stops it.
"""

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

from tests.cluster.local_cluster import free_ports
from tests.estimator_core import cluster_program, helpers

REPO = Path(__file__).resolve().parents[2]
DEADLINE_SECS = 300
MAX_STEPS = 20


class Run(object):
    """The outcome of one cluster run: its model_dir, the files the tasks wrote, the ps' fate, the logs."""

    def __init__(self, model_dir, files, ps_was_running, ps_returncode, logs):
        self.model_dir = model_dir
        self.files = files
        self.ps_was_running = ps_was_running
        self.ps_returncode = ps_returncode
        self.logs = logs

    def steps(self, task):
        return int((self.files / (task + ".steps")).read_text())


def _env(tf_config, core):
    env = dict(os.environ)
    env.update(
        TF_CONFIG=json.dumps(tf_config),
        TPU_ESTIMATOR_CORE=core,
        TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p]),
    )
    return env


def run_cluster(tmp_path, jobs, core="ours", evaluator=True, throttle_secs=1, save_checkpoints_steps=5) -> Run:
    """Runs `cluster_program` once per task of `jobs` (`{job: task count}`, plus an evaluator) to completion.

    Raises:
      AssertionError: a task failed or did not end within `DEADLINE_SECS` (with its log).
    """
    model_dir, files = tmp_path / "model", tmp_path / "files"
    files.mkdir(parents=True)
    ports = iter(free_ports(sum(jobs.values())))
    cluster = {job: ["127.0.0.1:{}".format(next(ports)) for _ in range(n)] for job, n in jobs.items()}
    tasks = [(job, i) for job, n in jobs.items() for i in range(n)] + ([("evaluator", 0)] if evaluator else [])
    args = json.dumps(
        dict(
            model_dir=str(model_dir),
            max_steps=MAX_STEPS,
            save_checkpoints_steps=save_checkpoints_steps,
            throttle_secs=throttle_secs,
            files=str(files),
        )
    )
    processes, logs = {}, {}
    try:
        for job, index in tasks:
            name = "{}{}".format(job, index)
            logs[name] = tmp_path / (name + ".log")
            with open(logs[name], "w") as log:
                processes[name] = subprocess.Popen(
                    [sys.executable, "-m", "tests.estimator_core.cluster_program", args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=_env({"cluster": cluster, "task": {"type": job, "index": index}}, core),
                    cwd=str(REPO),
                    start_new_session=True,
                )
        deadline = time.time() + DEADLINE_SECS
        for name, process in processes.items():
            if name.startswith("ps"):
                continue
            try:
                process.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                raise AssertionError("{} did not end in {} s:\n{}".format(name, DEADLINE_SECS, logs[name].read_text()))
            assert process.returncode == 0, "{} failed:\n{}".format(name, logs[name].read_text())
        ps = processes.get("ps0")
        ps_was_running = ps is not None and ps.poll() is None
        if ps is not None:
            ps.terminate()
            ps.wait(timeout=30)
        return Run(model_dir, files, ps_was_running, ps.returncode if ps else None, logs)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


def variable_devices(graph_def):
    return {
        node.name: node.device
        for node in graph_def.node
        if node.op in ("VariableV2", "VarHandleOp") and node.name in ("w", "b", "global_step")
    }


def graph_pbtxt_devices(model_dir):
    graph_def = tf.compat.v1.GraphDef()
    text_format.Parse((model_dir / "graph.pbtxt").read_text(), graph_def)
    return variable_devices(graph_def)


def checkpoint_meta_devices(checkpoint):
    meta_graph = tf.compat.v1.MetaGraphDef()
    with open(checkpoint + ".meta", "rb") as f:
        meta_graph.ParseFromString(f.read())
    return variable_devices(meta_graph.graph_def)


def expected_metrics(checkpoint):
    """loss (MSE) and mae of the linear model of `checkpoint` over the evaluation data, in NumPy."""
    w, b = tf.train.load_variable(checkpoint, "w"), tf.train.load_variable(checkpoint, "b")
    error = helpers.FEATURES @ w + b - helpers.LABELS
    return {"loss": float(np.mean(error**2)), "mae": float(np.mean(np.abs(error)))}


def final_eval_values(model_dir):
    """`{tag: value}` of the evaluation summaries at step MAX_STEPS in model_dir/eval (None when not there)."""
    return {tag: dict(helpers.event_values(str(model_dir / "eval"), tag)).get(MAX_STEPS) for tag in ("loss", "mae")}


def test_ps_chief_worker_and_evaluator_train_and_evaluate_together(tmp_path):
    run = run_cluster(tmp_path, {"ps": 1, "chief": 1, "worker": 1})
    checkpoint = tf.train.latest_checkpoint(str(run.model_dir))
    assert tf.train.load_variable(checkpoint, "global_step") == MAX_STEPS
    # The worker trained on its own input (all of it), the chief the rest: the global step counts both.
    assert run.steps("worker") == cluster_program.WORKER_BATCHES
    assert run.steps("chief") == MAX_STEPS - cluster_program.WORKER_BATCHES
    # The variables live on the ps, in the graph the chief wrote and in the checkpoint's meta graph.
    on_ps = {"w": "/job:ps/task:0", "b": "/job:ps/task:0", "global_step": "/job:ps/task:0"}
    assert graph_pbtxt_devices(run.model_dir) == on_ps
    assert checkpoint_meta_devices(checkpoint) == on_ps
    # Only the chief writes summaries and checkpoints into model_dir (one event file: the chief's).
    assert len(glob.glob(str(run.model_dir / "events.out.tfevents.*"))) == 1
    assert helpers.event_values(str(run.model_dir), "loss")[-1][0] <= MAX_STEPS
    # The evaluator evaluated the final checkpoint (values of its variables) and made the final export.
    expected = expected_metrics(checkpoint)
    got = final_eval_values(run.model_dir)
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
    np.testing.assert_allclose(got["mae"], expected["mae"], rtol=1e-5)
    assert len(os.listdir(run.model_dir / "export" / "final")) == 1
    assert 1 <= len(os.listdir(run.model_dir / "export" / "best")) <= 2
    # The ps served until the end, and stopped only when the test stopped it.
    assert run.ps_was_running and run.ps_returncode != 0


@pytest.mark.upstream
@pytest.mark.parametrize("chief", ["chief", "master"])
def test_a_deterministic_cluster_trains_and_evaluates_as_upstream(tmp_path, chief):
    # One training task and a ps: the same variables, checkpoints and evaluations with either core. A `chief` is
    # evaluated by the evaluator task (its last evaluation is the final checkpoint's); a `master` evaluates after each
    # of its checkpoints itself.
    with_evaluator = chief == "chief"
    runs = {
        core: run_cluster(tmp_path / core, {"ps": 1, chief: 1}, core=core, evaluator=with_evaluator, throttle_secs=0)
        for core in ("ours", "upstream")
    }
    for core, run in runs.items():
        assert run.steps(chief) == MAX_STEPS, core
        assert graph_pbtxt_devices(run.model_dir)["w"] == "/job:ps/task:0", core
        assert run.ps_was_running, core
    ours, theirs = (runs[core].model_dir for core in ("ours", "upstream"))
    for name in ("w", "b", "global_step"):
        np.testing.assert_allclose(
            tf.train.load_variable(str(ours), name), tf.train.load_variable(str(theirs), name), rtol=1e-6, err_msg=name
        )
    assert helpers.model_dir_files(str(ours)) == helpers.model_dir_files(str(theirs))
    for tag in ("loss", "mae"):
        got, expected = (helpers.event_values(str(d / "eval"), tag) for d in (ours, theirs))
        if not with_evaluator:  # after the checkpoints at 5, 10, 15 and the final one
            assert [step for step, _ in got] == [step for step, _ in expected] == [5, 10, 15, 20]
        got, expected = dict(got), dict(expected)
        np.testing.assert_allclose(got[MAX_STEPS], expected[MAX_STEPS], rtol=1e-6, err_msg=tag)
        if not with_evaluator:
            np.testing.assert_allclose(list(got.values()), list(expected.values()), rtol=1e-6, err_msg=tag)
    assert len(os.listdir(ours / "export" / "final")) == len(os.listdir(theirs / "export" / "final")) == 1
    best = [len(os.listdir(d / "export" / "best")) for d in (ours, theirs)]
    if with_evaluator:
        # The evaluator task evaluates the checkpoints it finds when it polls: how many (and so how many improve
        # on the best) depends on the machine's load, for either core.
        assert min(best) >= 1, best
    else:
        assert best[0] == best[1], best
