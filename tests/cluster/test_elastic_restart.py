"""Elastic restart: a checkpoint of H hosts x S shards goes on with H' x S', as users change cluster sizes between
runs. The tables ('mod' sharding: a row's shard and position change with the shard count) are re-sharded on
restore; the job ends with the variables, metrics and predictions of an uninterrupted run of the same global batch.
"""

import os

import numpy as np
import pytest

from tests.cluster import host_embedding_program, host_jobs

PROGRAM = os.path.join(os.path.dirname(__file__), "host_embedding_program.py")


def _run(model_dir, num_hosts, num_shards, steps):
    host_jobs.run_program(PROGRAM, [model_dir, num_shards, steps, "mod"], num_hosts)


def test_2x1_then_1x3_then_2x1_ends_as_an_uninterrupted_run(tmp_path):
    job, uninterrupted = tmp_path / "job", tmp_path / "uninterrupted"
    _run(uninterrupted, 1, 2, 6)
    _run(job, 2, 2, 2)  # 2 hosts x 1 shard: steps 0-1
    _run(job, 1, 3, 4)  # 1 host x 3 shards: steps 2-3
    _run(job, 2, 2, 6)  # 2 hosts x 1 shard again: steps 4-5

    expected, got = host_jobs.checkpoint_values(uninterrupted), host_jobs.checkpoint_values(job)
    assert got["global_step"] == 6
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    for table in ("tw", "tq", "ts"):
        assert np.abs(got[table] - host_embedding_program.INIT[table]).max() > 1e-3, table
    (one,) = host_jobs.host_results(uninterrupted, 1)
    many = host_jobs.host_results(job, 2)
    for result in many:
        for key, value in one["metrics"].items():
            assert result["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    joined = {}
    for result in many:
        joined.update(result["predictions"])
    assert joined == pytest.approx(one["predictions"], rel=1e-5, abs=1e-6)
