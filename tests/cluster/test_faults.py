"""A worker killed mid-training, task 0 (the sessions' master) or another: train() raises naming it within 60 s;
restarted, train() resumes to the same end, and no thread of the failed run stays blocked."""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.cluster import model
from tests.cluster.local_cluster import LocalCluster
from tpu_estimator.hosts import cluster as cluster_lib

STEPS = 8


class _KillWorkerAt(tf.compat.v1.train.SessionRunHook):
    """Kills a task of the cluster once training has passed `step`."""

    def __init__(self, cluster: LocalCluster, task: int, step: int):
        self._cluster, self._task, self._step = cluster, task, step
        self.killed_at = None

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(tf.compat.v1.train.get_global_step())

    def after_run(self, run_context, run_values):
        if self.killed_at is None and run_values.results >= self._step:
            self._cluster.kill(self._task)
            self.killed_at = time.time()


@pytest.mark.parametrize("task", [0, 1])
def test_killed_worker_fails_train_then_restarted_training_resumes(tmp_path, task):
    cluster = LocalCluster(2, str(tmp_path))
    try:
        cluster.start()
        # Every step reads the same global batch, so a resumed run sees what an uninterrupted one sees.
        input_fn = model.make_input_fn(rows=model.BATCH)
        est = model.estimator(tmp_path / "cluster", cluster=cluster.resolver(), save_checkpoints_steps=2)
        kill = _KillWorkerAt(cluster, task=task, step=4)
        before = set(threading.enumerate())
        with pytest.raises(cluster_lib.ClusterError) as error:
            est.train(input_fn, max_steps=STEPS, hooks=[kill])
        assert kill.killed_at is not None
        assert time.time() - kill.killed_at < 60
        message = str(error.value)
        assert "train() on the cluster failed" in message
        assert "host /job:worker/task:{} ({}) did not respond".format(task, cluster.addresses[task]) in message
        assert "Restart the worker(s)" in message
        stopped_at = est.get_variable_value("global_step")
        assert 2 <= stopped_at < STEPS
        # TensorFlow's summary writer thread is cached per model_dir for the process (as after any run): not ours.
        left = [t for t in threading.enumerate() if t not in before and t.name != "EventLoggerThread"]
        assert left or task == 1  # task 0: the infeed's run and the session's close wait for it

        cluster.start([task])
        est.train(input_fn, max_steps=STEPS)
        assert est.get_variable_value("global_step") == STEPS
        # The failed run's threads (an infeed run, a session close waiting for task 0) end once it is back.
        for thread in left:
            thread.join(timeout=60)
        assert not [t.name for t in left if t.is_alive()]

        uninterrupted = model.estimator(tmp_path / "local")
        uninterrupted.train(input_fn, max_steps=STEPS)
        got, expected = model.variables_of(est), model.variables_of(uninterrupted)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    finally:
        cluster.stop()


def test_a_deadline_is_retried_once_only_while_every_host_accepts_connections(monkeypatch):
    calls = []

    def run():
        calls.append(len(calls))
        if len(calls) == 1:
            raise tf.errors.DeadlineExceededError(None, None, "Deadline Exceeded")
        return "devices"

    cluster = cluster_lib.Cluster.__new__(cluster_lib.Cluster)
    monkeypatch.setattr(cluster_lib, "unreachable_hosts", lambda c: [])
    assert cluster_lib._again_if_hosts_up(cluster, run) == "devices" and calls == [0, 1]
    calls.clear()
    monkeypatch.setattr(cluster_lib, "unreachable_hosts", lambda c: [1])
    with pytest.raises(tf.errors.DeadlineExceededError):
        cluster_lib._again_if_hosts_up(cluster, run)
    assert calls == [0]
