"""A loopback cluster of 3 plain tf.distribute.Server workers: PER_HOST_V1 on 3 hosts x 2 shards = 1 host x 6.

The batch is large enough (2 x 2400 ids for the shared table) that one host deduplicates its ids with a NumPy call
(`tf.numpy_function`); the cluster's hosts, other processes, must use TensorFlow ops for it, with the same result.
"""

import numpy as np

import tpu_estimator as te
from tests.cluster import model

BATCH = 2400


def test_three_hosts_per_host_v1_train_like_one_host(tmp_path, cluster3):
    v1 = te.InputPipelineConfig.PER_HOST_V1
    record = []
    # num_shards unset: every discovered device (3 hosts x 2 CPUs) is a shard.
    on_cluster = model.estimator(
        tmp_path / "cluster", "mod", num_shards=None, cluster=cluster3.resolver(), input_mode=v1, batch=BATCH
    )
    on_cluster.train(model.make_input_fn(global_batch=BATCH, record=record), max_steps=2)
    local = model.estimator(tmp_path / "local", "mod", num_shards=6, input_mode=v1, batch=BATCH)
    local.train(model.make_input_fn(global_batch=BATCH), max_steps=2)
    # One input_fn call per host, params['batch_size'] is the host's batch, on that host's CPU.
    assert record == [
        (3, h, ("/job:worker/task:%d/device:CPU:0" % h, h, 3, 2), "/job:worker/task:%d/device:CPU:0" % h)
        for h in range(3)
    ]
    got, expected = model.variables_of(on_cluster), model.variables_of(local)
    assert got["global_step"] == 2
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
