"""One process per host (`TF_CONFIG` tasks of the hosts' job, `tpu-estimator-hosts`): H hosts x S shards train,
evaluate and predict as 1 host x H*S shards; only the chief writes model_dir, its host call with every replica's
tensors; a killed host (the chief or another)
makes the other fail within 60 s naming it, and a restarted job ends where an uninterrupted one ends.

The program is `tests/cluster/host_program.py`, run unchanged on 1 host (no `TF_CONFIG`) and on N; every run is a
fresh process, so nothing of TensorFlow's process state carries over.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.cluster import host_jobs, host_program

PROGRAM = os.path.join(os.path.dirname(__file__), "host_program.py")
STEPS = 6


def _one_host(model_dir, num_shards, steps=STEPS):
    host_jobs.run_program(PROGRAM, [model_dir, num_shards, steps], 1)


def _hosts(model_dir, num_hosts, num_shards, steps=STEPS):
    host_jobs.run_program(PROGRAM, [model_dir, num_shards, steps], num_hosts)


@pytest.mark.parametrize("num_hosts,shards_per_host", [pytest.param(2, 2, marks=pytest.mark.quick), (3, 1)])
def test_hosts_in_processes_of_their_own_equal_one_host(tmp_path, num_hosts, shards_per_host):
    num_shards = num_hosts * shards_per_host
    _one_host(tmp_path / "one", num_shards)
    _hosts(tmp_path / "many", num_hosts, num_shards)

    expected, got = host_jobs.checkpoint_values(tmp_path / "one"), host_jobs.checkpoint_values(tmp_path / "many")
    assert set(got) == set(expected)
    assert got["global_step"] == STEPS
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)

    (one,) = host_jobs.host_results(tmp_path / "one", 1)
    many = host_jobs.host_results(tmp_path / "many", num_hosts)
    assert [r["is_chief"] for r in many] == [True] + [False] * (num_hosts - 1)
    joined = host_jobs.check_hosts_as_one(one, many)
    # Every host's export_saved_model returns the one SavedModel the chief wrote, which serves the predictions.
    assert len({r["exported"] for r in many}) == 1
    assert os.listdir(tmp_path / "many" / "export") == [os.path.basename(many[0]["exported"])]
    serve = tf.saved_model.load(many[0]["exported"], tags=["serve"]).signatures["serving_default"]
    rows = np.array(sorted(int(r) for r in joined))
    served = serve(x=tf.constant(host_program.X[rows]), id=tf.constant(host_program.IDS[rows]))
    np.testing.assert_allclose(
        served["logit"].numpy(), [one["predictions"][str(r)] for r in rows], rtol=1e-5, atol=1e-6
    )
    # Only the chief writes into model_dir: the other hosts' evaluation summaries go elsewhere.
    assert many[0]["eval_dir"] == str(tmp_path / "many" / "eval")
    for result in many[1:]:
        assert not result["eval_dir"].startswith(str(tmp_path))
    assert len(os.listdir(tmp_path / "many" / "eval")) == len(os.listdir(tmp_path / "one" / "eval")) == 1
    # host_call as on a pod: the chief's receives every replica's rows (gathered over the hosts), one event stream.
    one_calls, many_calls = _host_call_events(tmp_path / "one"), _host_call_events(tmp_path / "many")
    assert len(many_calls) == 1, sorted(many_calls)
    ((_, many_events),) = many_calls.items()
    ((_, one_events),) = one_calls.items()
    assert [e[:2] for e in many_events] == [e[:2] for e in one_events]
    assert {(step, value) for step, tag, value in one_events if tag == "host_call/rows"} == {
        (step, host_program.GLOBAL_BATCH) for step in range(STEPS)
    }
    np.testing.assert_allclose([e[2] for e in many_events], [e[2] for e in one_events], rtol=1e-5, atol=1e-6)


def _host_call_events(model_dir):
    """Per events file of `model_dir` with host-call summaries: its `(step, tag, value)`, sorted."""
    files = {}
    for name in os.listdir(model_dir):
        if not name.startswith("events.out"):
            continue
        events = []
        for event in tf.compat.v1.train.summary_iterator(os.path.join(model_dir, name)):
            for value in event.summary.value:
                if value.tag.startswith("host_call/"):
                    events.append((event.step, value.tag, float(tf.make_ndarray(value.tensor))))
        if events:
            files[name] = sorted(events)
    return files


@pytest.mark.parametrize("killed", [0, 1], ids=["chief_killed", "host1_killed"])
def test_a_killed_host_fails_the_others_within_60s_and_the_job_resumes(tmp_path, killed):
    model_dir, steps, num_shards = tmp_path / "job", 40, 2
    args = [model_dir, num_shards, steps, 0.2, 20000]
    code, elapsed, output = host_jobs.kill_one_host_mid_training(PROGRAM, args, model_dir, tmp_path, killed)
    assert code != 0
    assert elapsed < 60, elapsed
    assert "ClusterError" in output and "/job:worker/task:{}".format(killed) in output, output[-3000:]

    # The same job started again resumes from the last checkpoint and ends where an uninterrupted run ends.
    resumed_from = int(tf.train.load_variable(tf.train.latest_checkpoint(str(model_dir)), "global_step"))
    assert 4 <= resumed_from < steps
    _hosts(model_dir, 2, num_shards, steps)
    _one_host(tmp_path / "uninterrupted", num_shards, steps)
    got, expected = host_jobs.checkpoint_values(model_dir), host_jobs.checkpoint_values(tmp_path / "uninterrupted")
    assert got["global_step"] == steps
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("lost", [1, 0], ids=["host1_lost", "chief_lost"])
def test_a_host_lost_between_train_and_evaluate_fails_the_others_evaluate_within_seconds(tmp_path, lost):
    # A new session on a cluster waits for every task for ever: without the check, the other host's evaluate() would
    # sit in session creation until the job's grace period ends.
    program = os.path.join(os.path.dirname(__file__), "host_lost_between_calls_program.py")
    host_jobs.run_program(program, [tmp_path, 2, 4, lost], 2)
    with open(tmp_path / "lost_host_result.json") as f:
        result = json.load(f)
    assert result["error"] == "ClusterError", result
    assert result["message"].startswith(
        "evaluate() on the cluster failed: host /job:worker/task:{} (127.0.0.1:".format(lost)
    )
    assert "did not respond before the session was created" in result["message"]
    assert result["secs"] < 10, result
