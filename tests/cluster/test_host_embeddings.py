"""Embedding tables with one process per host: H hosts x S shards train, evaluate and predict as 1 host x H*S.

The program is `tests/cluster/host_embedding_program.py` (tables with Adagrad, Adam and FTRL, one with a learning
rate of the global step; weighted, 'sqrtn' and sequence features), run unchanged on 1 host and on N. Each host's
process looks up and updates the tables beside its step (`tpu_estimator/embedding_stage/embedding_exchange.py`): its ids deduplicated
on its CPU, each shard's update made once per unique id of the global batch by the host that owns it. A killed chief
makes the other host fail within 60 s naming it, and the restarted job ends where an uninterrupted one ends.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.cluster import host_embedding_program, host_jobs

PROGRAM = os.path.join(os.path.dirname(__file__), "host_embedding_program.py")
STEPS = 6


def _run(model_dir, num_hosts, num_shards, strategy, steps=STEPS):
    host_jobs.run_program(PROGRAM, [model_dir, num_shards, steps, strategy], num_hosts)


@pytest.mark.parametrize("num_hosts,shards_per_host,strategy", [(2, 2, "div"), (3, 1, "mod"), (4, 1, "div")])
def test_tables_sharded_over_host_processes_train_evaluate_and_predict_as_one_host(
    tmp_path, num_hosts, shards_per_host, strategy
):
    num_shards = num_hosts * shards_per_host
    _run(tmp_path / "one", 1, num_shards, strategy)
    _run(tmp_path / "many", num_hosts, num_shards, strategy)

    expected, got = host_jobs.checkpoint_values(tmp_path / "one"), host_jobs.checkpoint_values(tmp_path / "many")
    assert set(got) == set(expected)
    assert got["global_step"] == STEPS
    for name in expected:
        # Each host sums its rows' gradients per id, then the owner sums the hosts' sums: another float summation
        # order than one host's single sum; a missed or doubled piece, or a second update, moves them by >= 1e-3.
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    for table in ("tw", "tq", "ts"):
        assert np.abs(got[table] - host_embedding_program.INIT[table]).max() > 1e-3, table
        for slot in [n for n in expected if n.startswith(table + "/")]:
            assert np.abs(got[slot]).max() > 0, slot

    (one,) = host_jobs.host_results(tmp_path / "one", 1)
    many = host_jobs.host_results(tmp_path / "many", num_hosts)
    host_jobs.check_hosts_as_one(one, many)


def test_a_killed_chief_fails_the_other_host_within_60s_and_the_job_resumes(tmp_path):
    model_dir, steps = tmp_path / "job", 30
    args = [model_dir, 4, steps, "div", 0.2]
    code, elapsed, output = host_jobs.kill_one_host_mid_training(PROGRAM, args, model_dir, tmp_path, killed=0)
    assert code != 0
    assert elapsed < 60, elapsed
    assert "ClusterError" in output and "/job:worker/task:0" in output, output[-3000:]

    # Started again, the job resumes from the last checkpoint and ends where an uninterrupted run ends.
    resumed_from = int(tf.train.load_variable(tf.train.latest_checkpoint(str(model_dir)), "global_step"))
    assert 4 <= resumed_from < steps
    _run(model_dir, 2, 4, "div", steps)
    _run(tmp_path / "uninterrupted", 1, 4, "div", steps)
    got, expected = host_jobs.checkpoint_values(model_dir), host_jobs.checkpoint_values(tmp_path / "uninterrupted")
    assert got["global_step"] == steps
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
