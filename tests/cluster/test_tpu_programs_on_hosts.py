"""TPU programs as written (tests/programs/, never importing tpu_estimator) run unmodified as jobs of one process
per host, through `tpu-estimator-run` under `tpu-estimator-hosts`: their own `RunConfig(cluster=TPUClusterResolver(
FLAGS.tpu))` means this job.

The programs initialise their variables without a seed, so each comparison starts from one checkpoint: the
recommender (embedding tables, PER_HOST_V2 input sharded by `current_input_fn_deployment()`, a host call) trains
steps 3..6 on 2 hosts x 1 shard and on 1 host x 2 shards from one step-3 checkpoint, to the same variables; MNIST (PER_HOST_V1, an input_fn that
does not shard by host, dropout) trains on 2 hosts, then evaluates and predicts its checkpoint as a pod would: every
host reads the same per-host batch, so its metrics and predictions are those of 1 host x 1 shard at the per-host
batch.
"""

import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from tests.cluster import host_jobs

PROGRAMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "programs")


def _command(program, work_dir, *flags, tpu="my-tpu"):
    return [
        sys.executable,
        "-m",
        "tpu_estimator.compat.launcher",
        os.path.join(PROGRAMS, program),
        "--tpu=" + tpu,
        "--model_dir=" + os.path.join(str(work_dir), "model"),
        "--results=" + os.path.join(str(work_dir), "results.json"),
    ] + list(flags)


def _run(command, num_hosts):
    if num_hosts == 1:
        done = subprocess.run(
            command, env=host_jobs.program_env(), timeout=host_jobs.RUN_TIMEOUT_SECS, capture_output=True, text=True
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        return
    host_jobs.run_program_command(command, num_hosts)


def _results(work_dir):
    with open(os.path.join(str(work_dir), "results.json")) as f:
        return json.load(f)


def _concurrently(*runs):
    """Runs each callable in a thread of its own; raises the first error once all have ended."""
    errors = []

    def call(run):
        try:
            run()
        except BaseException as error:  # raised below
            errors.append(error)

    threads = [threading.Thread(target=call, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(host_jobs.RUN_TIMEOUT_SECS + 30)
    if errors:
        raise errors[0]


def test_recommender_with_tpu_embeddings_on_2_hosts_trains_as_1_host_x_2_shards(tmp_path):
    # From the step-3 checkpoint of 1 host x 2 shards, the program goes on to step 6 on 1 x 2 and on 2 hosts x 1
    # (both restart their input from its beginning, as the program does).
    base, one, many = tmp_path / "base", tmp_path / "one", tmp_path / "many"
    _run(_command("recommender_tpu.py", base, "--train_steps=3"), 1)
    for copy in (one, many):
        shutil.copytree(base / "model", copy / "model")
    _concurrently(
        lambda: _run(_command("recommender_tpu.py", one), 1), lambda: _run(_command("recommender_tpu.py", many), 2)
    )

    expected, got = host_jobs.checkpoint_values(one / "model"), host_jobs.checkpoint_values(many / "model")
    assert got["global_step"] == expected["global_step"] == 6
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    one_results, many_results = _results(one), _results(many)
    # The global batch is the same examples (each host reads its shard of them); the loss is replica 0's.
    for key in ("recall_at_5", "precision_at_1", "global_step"):
        assert many_results["metrics"][key] == pytest.approx(one_results["metrics"][key], rel=1e-5), key
    # Every host predicts the program's 10 rows (its predict input_fn does not shard them).
    assert many_results["top_items"] == one_results["top_items"]
    # Its host call (a TF1 tf.contrib.summary writer into model_dir) ran on the chief with every replica's losses.
    one_calls, many_calls = _host_call_events(one / "model"), _host_call_events(many / "model")
    assert len(many_calls) == len(one_calls) == 2  # the step-3 checkpoint's run, then this one
    assert sorted(many_calls) == sorted(one_calls)  # (steps, tags) per stream
    for key in one_calls:
        np.testing.assert_allclose(many_calls[key], one_calls[key], rtol=1e-5)


def _host_call_events(model_dir):
    """`(steps and tags) -> values` of each events file in `model_dir` with the host call's summaries."""
    import tensorflow as tf

    streams = {}
    for name in sorted(os.listdir(str(model_dir))):
        if not name.startswith("events.out"):
            continue
        events = sorted(
            (
                event.step,
                value.tag,
                float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value,
            )
            for event in tf.compat.v1.train.summary_iterator(os.path.join(str(model_dir), name))
            for value in event.summary.value
            if value.tag.startswith("host_")
        )
        if events:
            streams[tuple(e[:2] for e in events)] = [e[2] for e in events]
    return streams


def test_mnist_on_2_hosts_evaluates_and_predicts_as_a_pod(tmp_path):
    many, single = tmp_path / "many", tmp_path / "single"
    # The TPU's address, as the program was run on it: tpu-estimator-run ignores it.
    _run(_command("mnist_tpu.py", many, tpu="grpc://10.0.0.2:8470"), 2)
    trained = _results(many)
    assert trained["metrics"]["global_step"] == 6
    assert trained["estimator_class"] == "tpu_estimator.tpu_estimator.TPUEstimator"
    # The same checkpoint on 1 host x 1 shard at the per-host batch (16 / 2 hosts): training is done, it evaluates
    # and predicts what each host read.
    shutil.copytree(many / "model", single / "model")
    _run(_command("mnist_tpu.py", single, "--num_shards=1", "--batch_size=8"), 1)
    reference = _results(single)
    for key in ("accuracy", "loss", "global_step"):
        assert trained["metrics"][key] == pytest.approx(reference["metrics"][key], rel=1e-5), key
    assert trained["num_predictions"] == reference["num_predictions"] == 10
    assert trained["class_ids"] == reference["class_ids"]
