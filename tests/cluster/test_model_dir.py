"""model_dir must be one place for the client and every task: checked before training, with a clear error."""

import os

import pytest

from tests.cluster import model
from tests.cluster.local_cluster import LocalCluster
from tpu_estimator.hosts import cluster as cluster_lib


def test_a_model_dir_the_hosts_cannot_write_is_refused(tmp_path, cluster2):
    # (train() itself first fails in the client, which cannot write there either: check the hosts directly.)
    config = model.estimator(tmp_path, cluster=cluster2.resolver()).config
    with pytest.raises(cluster_lib.ClusterError) as error:
        cluster_lib.check_model_dir(config.tpu_cluster, "/proc/tpu_estimator_model_dir", config.session_config)
    message = str(error.value)
    assert (
        "Host /job:worker/task:0 ({}) cannot write model_dir '/proc/tpu_estimator_model_dir'".format(
            cluster2.addresses[0]
        )
        in message
    )
    assert "use a path every task and the client can write" in message


def test_a_model_dir_the_client_does_not_share_with_the_hosts_is_refused(tmp_path, monkeypatch):
    # The workers run elsewhere: a relative model_dir is a different directory for them than for the client.
    (tmp_path / "client").mkdir()
    (tmp_path / "workers").mkdir()
    cluster = LocalCluster(2, str(tmp_path), cwd=str(tmp_path / "workers"))
    try:
        cluster.start()
        monkeypatch.chdir(tmp_path / "client")
        est = model.estimator("relative_model_dir", cluster=cluster.resolver())
        with pytest.raises(cluster_lib.ClusterError) as error:
            est.train(model.make_input_fn(), max_steps=2)
        message = str(error.value)
        assert (
            "model_dir 'relative_model_dir' is not the same place for the client and host /job:worker/task:0" in message
        )
        assert "/job:worker/task:1 ({})".format(cluster.addresses[1]) in message
        # The hosts wrote their probe into their own directory; nothing was trained.
        assert os.path.exists(tmp_path / "workers" / "relative_model_dir" / ".tpu_estimator_hosts" / "task_1")
        assert not [f for f in os.listdir(tmp_path / "client" / "relative_model_dir") if f.startswith("model.ckpt")]
    finally:
        cluster.stop()
