"""`train_and_evaluate` with one process per host: every host evaluates the checkpoints the chief's saves pick, in
the pause of training, as one host's local loop does (`tpu_estimator/hosts/host_train_and_evaluate.py`).

The program is `tests/cluster/host_train_and_evaluate_program.py` (embedding tables sharded over the hosts), run on 1
host (the core's local loop: upstream's on TF 2.15, ours on 2.21) and as a job of N.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.cluster import host_jobs
from tests.cluster.local_cluster import free_ports
from tpu_estimator.app import hosts
from tpu_estimator.hosts import collectives, host_train_and_evaluate

PROGRAM = os.path.join(os.path.dirname(__file__), "host_train_and_evaluate_program.py")
STEPS = 10  # checkpoints at 0, 4, 8 and 10 (the last step)


def test_hosts_evaluate_the_checkpoints_one_host_evaluates_with_its_metrics(tmp_path):
    host_jobs.run_program(PROGRAM, [tmp_path / "one", 4, STEPS, 0], 1)
    host_jobs.run_program(PROGRAM, [tmp_path / "many", 4, STEPS, 0], 2)

    (one,) = host_jobs.host_results(tmp_path / "one", 1)
    many = host_jobs.host_results(tmp_path / "many", 2)
    # throttle_secs=0: every checkpoint but the first (step 0, before training) is evaluated; the last one is final.
    assert [(e["step"], e["checkpoint"], e["final"]) for e in one["evaluations"]] == [
        (4, "model.ckpt-4", False),
        (8, "model.ckpt-8", False),
        (10, "model.ckpt-10", True),
    ]
    for result in many:
        assert [e["step"] for e in result["evaluations"]] == [4, 8, 10]
        for got, expected in zip(result["evaluations"], one["evaluations"]):
            assert got["mse"] == pytest.approx(expected["mse"], rel=1e-5), got["step"]
        for key, value in one["metrics"].items():
            assert result["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    # Training paused for the evaluations and read on: the tables and the dense layer end as one host's.
    expected, got = host_jobs.checkpoint_values(tmp_path / "one"), host_jobs.checkpoint_values(tmp_path / "many")
    assert set(got) == set(expected) and got["global_step"] == STEPS
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # The chief wrote each evaluation's export; every host returned the last one; 2 are kept.
    assert many[0]["exports"][1] == many[1]["exports"][1]
    latest = os.path.join(tmp_path / "many", "export", "latest")
    kept = sorted(os.listdir(latest))
    assert len(kept) == 2 and os.path.basename(many[0]["exports"][1]) == kept[-1]
    assert tf.saved_model.contains_saved_model(os.path.join(latest, kept[-1]))


def test_the_chiefs_throttle_picks_for_every_host(tmp_path):
    # A throttle longer than the run: the first checkpoint after training starts, then only the last one.
    host_jobs.run_program(PROGRAM, [tmp_path / "job", 3, STEPS, 3600], 3)
    for result in host_jobs.host_results(tmp_path / "job", 3):
        assert [(e["step"], e["final"]) for e in result["evaluations"]] == [(4, False), (10, True)]
        assert result["metrics"]["global_step"] == STEPS


def test_a_time_iterations_per_loop_is_refused_with_one_process_per_host():
    # Each host would time its own loops; the hosts' runs (and the chief's evaluation picks) must end at one step.
    code = (
        "import tensorflow as tf\n"
        "import tpu_estimator as te\n"
        "config = te.RunConfig(model_dir='unused', tpu_config=te.TPUConfig(iterations_per_loop='30s', num_shards=1))\n"
        "try:\n"
        "    te.TPUEstimator(model_fn=lambda features, labels, mode, params: None, config=config, train_batch_size=8)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    (port,) = free_ports(1)
    env = dict(host_jobs.program_env(), TF_CONFIG=hosts.host_tf_config(["127.0.0.1:{}".format(port)], 0))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == (
        "With one process per host, TPUConfig.iterations_per_loop must be a number of steps, not '30s': each host "
        "would time its own loops, and the hosts' runs must end at the same steps."
    ), out.stderr[-2000:]


@pytest.mark.parametrize("killed", [0, 1], ids=["chief_killed", "host1_killed"])
def test_a_host_killed_at_an_evaluation_fails_the_other_within_60s_naming_it(tmp_path, killed):
    # Killed as the checkpoint at step 4 (picked for evaluation) appears: the other host is at the evaluation, whose
    # session would wait for the lost host for ever.
    args = [tmp_path / "job", 4, 40, 0]
    code, elapsed, output = host_jobs.kill_one_host_mid_training(PROGRAM, args, tmp_path / "job", tmp_path, killed)
    assert code != 0
    assert elapsed < 60, elapsed
    assert "ClusterError" in output and "/job:worker/task:{}".format(killed) in output, output[-3000:]


def test_every_host_evaluates_the_chiefs_checkpoint_of_the_step_whatever_its_basename(tmp_path):
    # A user's CheckpointSaverHook may name its checkpoints otherwise than model.ckpt: the picked step's path comes
    # from the checkpoint state; without one, model.ckpt-N.
    state = tf.compat.v1.train.generate_checkpoint_state_proto(
        str(tmp_path), str(tmp_path / "mine.ckpt-8"), [str(tmp_path / "mine.ckpt-4"), str(tmp_path / "mine.ckpt-8")]
    )
    tf.compat.v1.train.update_checkpoint_state(
        str(tmp_path), state.model_checkpoint_path, list(state.all_model_checkpoint_paths)
    )
    assert host_train_and_evaluate._checkpoint_of_step(str(tmp_path), 4) == str(tmp_path / "mine.ckpt-4")
    assert host_train_and_evaluate._checkpoint_of_step(str(tmp_path), 8) == str(tmp_path / "mine.ckpt-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert host_train_and_evaluate._checkpoint_of_step(str(empty), 4) == str(empty / "model.ckpt-4")


def test_the_chief_waits_for_the_others_the_operation_deadline_at_most():
    # The hosts that receive wait long for the chief; the chief's send cannot notice a lost receiver, so it waits
    # the session's operation deadline (40 s on a cluster by default) when there is one.
    config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=40_000)
    assert collectives.chief_wait_secs(config, 3600) == 40.0
    assert collectives.chief_wait_secs(tf.compat.v1.ConfigProto(), 3600) == 3600
    assert collectives.chief_wait_secs(None, 3600) == 3600
