"""Pod semantics on a loopback cluster of plain tf.distribute.Server workers (2 hosts x 2 logical CPUs).

2 hosts x 2 shards must train, evaluate and predict as 1 host x 4 shards; each host reads its own input on its CPU
and holds its share of the table shards; the cluster's checkpoint serves without a cluster.
"""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

import tpu_estimator as te
from tests.cluster import model
from tests.cluster.local_cluster import worker_env
from tests.estimator import models as dense_models
from tests.helpers.serving import raw_serving_input_fn

STEPS = 4
_trained = {}


def _train_pair(tmp_path_factory, cluster2, strategy):
    """(cluster estimator, its input_fn record, local 1 x 4 estimator), trained once per partition strategy."""
    if strategy not in _trained:
        base = tmp_path_factory.mktemp("train_" + strategy)
        record = []
        on_cluster = model.estimator(base / "cluster", strategy, cluster=cluster2.resolver())
        on_cluster.train(model.make_input_fn(record=record), max_steps=STEPS)
        local = model.estimator(base / "local", strategy)
        local.train(model.make_input_fn(), max_steps=STEPS)
        _trained[strategy] = (on_cluster, record, local)
    return _trained[strategy]


def _variable_devices(model_dir):
    graph = tf.compat.v1.GraphDef()
    with open(os.path.join(model_dir, "graph.pbtxt")) as f:
        text_format.Parse(f.read(), graph)
    return {node.name: node.device for node in graph.node if node.op == "VarHandleOp"}


@pytest.mark.parametrize("strategy", ["div", "mod"])
def test_two_hosts_train_like_one_host(tmp_path_factory, cluster2, strategy):
    on_cluster, record, local = _train_pair(tmp_path_factory, cluster2, strategy)
    got, expected = model.variables_of(on_cluster), model.variables_of(local)
    assert set(got) == set(expected)
    assert got["global_step"] == STEPS
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # The tables were trained: not their initial values.
    assert np.abs(got["a_b_shared_embedding"] - model.INIT_AB).max() > 1e-3
    # PER_HOST_V2: input_fn once per host, with the cluster's context, its ops on that host's CPU.
    assert record == [
        (2, 0, ("/job:worker/task:0/device:CPU:0", 0, 2, 2), "/job:worker/task:0/device:CPU:0"),
        (2, 1, ("/job:worker/task:1/device:CPU:0", 1, 2, 2), "/job:worker/task:1/device:CPU:0"),
    ]


def test_every_worker_holds_table_shards(tmp_path_factory, cluster2):
    on_cluster, _, _ = _train_pair(tmp_path_factory, cluster2, "div")
    devices = _variable_devices(on_cluster.model_dir)
    for table in ("tbl_a_b_shared_embedding", "tbl_c"):
        for prefix in (table, table + "/accumulators"):
            assert [devices["{}/shard_{}".format(prefix, k)] for k in range(4)] == [
                "/job:worker/task:0/device:CPU:0",
                "/job:worker/task:0/device:CPU:1",
                "/job:worker/task:1/device:CPU:0",
                "/job:worker/task:1/device:CPU:1",
            ]
    # Each task saved its own checkpoint shard (sharded Saver: one data file per task).
    data_files = [f for f in os.listdir(on_cluster.model_dir) if f.startswith("model.ckpt-%d.data" % STEPS)]
    assert sorted(data_files) == ["model.ckpt-4.data-00000-of-00002", "model.ckpt-4.data-00001-of-00002"]


def test_cluster_checkpoint_restores_on_one_host(tmp_path_factory, cluster2):
    on_cluster, _, local = _train_pair(tmp_path_factory, cluster2, "mod")
    # The logical layout: the cluster's checkpoint evaluated by 1 host x 2 shards, as the local one.
    one_host = model.estimator(on_cluster.model_dir, "mod", num_shards=2)
    metrics = one_host.evaluate(model.make_input_fn(), steps=2)
    expected = local.evaluate(model.make_input_fn(), steps=2)
    # (Not `loss`: it is replica 0's, whose rows depend on the shard count, as upstream reports it.)
    for key in ("auc", "mean_logit"):
        np.testing.assert_allclose(metrics[key], expected[key], rtol=1e-5, err_msg=key)


def test_eval_and_predict_on_cluster_equal_single_host(tmp_path_factory, cluster2):
    on_cluster, _, local = _train_pair(tmp_path_factory, cluster2, "div")
    got = on_cluster.evaluate(model.make_input_fn(), steps=3)
    expected = local.evaluate(model.make_input_fn(), steps=3)
    assert got["global_step"] == expected["global_step"] == STEPS
    for key in ("auc", "mean_logit", "loss"):
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, err_msg=key)
    # PREDICT with PER_HOST_V1: each host reads its half of every batch of 8 rows.
    predict_fn = model.make_input_fn(global_batch=8, labels=False, rows=40)
    v1 = te.InputPipelineConfig.PER_HOST_V1
    got = [
        p["logit"]
        for p in model.estimator(on_cluster.model_dir, cluster=cluster2.resolver(), input_mode=v1).predict(predict_fn)
    ]
    expected = [p["logit"] for p in model.estimator(local.model_dir, input_mode=v1).predict(predict_fn)]
    assert len(got) == 40
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_closing_predict_early_on_a_cluster_ends_the_lookahead_and_predict_runs_again(tmp_path_factory, cluster2):
    """The generator closed after one row: the infeed thread, blocked enqueueing into a full host queue on a worker,
    ends when the remote session closes; the next `predict()` reads from its own queue (no batch left over)."""
    on_cluster, _, local = _train_pair(tmp_path_factory, cluster2, "div")
    estimator = model.estimator(on_cluster.model_dir, cluster=cluster2.resolver())
    before = {t for t in threading.enumerate() if t.name == "tensor_infeed"}
    # 256 rows in batches of 8: far more batches than the host queues hold, so the thread waits on a full queue.
    generator = estimator.predict(model.make_input_fn(global_batch=8, labels=False))
    first = next(generator)
    started = {t for t in threading.enumerate() if t.name == "tensor_infeed"} - before
    assert len(started) == 1
    thread = started.pop()
    time.sleep(1.0)  # the thread fills the queues and blocks
    assert thread.is_alive()
    generator.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
    expected = [
        p["logit"] for p in model.estimator(local.model_dir).predict(model.make_input_fn(8, labels=False, rows=40))
    ]
    np.testing.assert_allclose(first["logit"], expected[0], rtol=1e-5)
    got = [p["logit"] for p in estimator.predict(model.make_input_fn(global_batch=8, labels=False, rows=40))]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


_SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
rows = {k: np.array(v) for k, v in json.loads(sys.argv[2]).items()}
rows["x"] = rows["x"].astype(np.float32)
fn = tf.saved_model.load(sys.argv[1], tags=["serve"]).signatures["serving_default"]
print(json.dumps(fn(**{k: tf.constant(v) for k, v in rows.items()})["logit"].numpy().tolist()))
"""


def test_export_from_cluster_checkpoint_serves_without_cluster(tmp_path_factory, cluster2, tmp_path):
    on_cluster, _, _ = _train_pair(tmp_path_factory, cluster2, "div")

    export_dir = on_cluster.export_saved_model(str(tmp_path), raw_serving_input_fn(model.FEATURES)).decode()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        assert b"/job:worker" not in f.read()
    rows = {k: v[:8].tolist() for k, v in model.FEATURES.items()}
    served = subprocess.run(
        [sys.executable, "-c", _SERVE, export_dir, json.dumps(rows)],
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert served.returncode == 0, served.stderr[-3000:]
    predict_fn = model.make_input_fn(global_batch=8, labels=False, rows=8)
    v1 = te.InputPipelineConfig.PER_HOST_V1
    expected = [p["logit"] for p in model.estimator(on_cluster.model_dir, input_mode=v1).predict(predict_fn)]
    np.testing.assert_allclose(json.loads(served.stdout.strip().splitlines()[-1]), expected, rtol=1e-5)


def test_per_shard_input_fn_calls_and_contexts(tmp_path, cluster2):
    record, placements = [], []

    def input_fn(params):
        context = params["context"]
        record.append(
            (context.num_hosts, context.current_host, context.current_input_fn_deployment(), tf.constant(0).device)
        )
        placements.append((context.device_for_replica(3), context.tpu_host_placement_function(host_id=1)))
        return dense_models.dataset_input_fn(params)

    config = te.RunConfig(
        model_dir=str(tmp_path),
        cluster=cluster2.resolver(),
        tpu_config=te.TPUConfig(
            iterations_per_loop=2, num_shards=4, per_host_input_for_training=te.InputPipelineConfig.PER_SHARD_V1
        ),
    )
    est = te.TPUEstimator(model_fn=dense_models.make_model_fn(), config=config, train_batch_size=16)
    est.train(input_fn, max_steps=2)
    assert record == [
        (2, 0, ("/job:worker/task:0/device:CPU:0", 0, 4, 1), "/job:worker/task:0/device:CPU:0"),
        (2, 0, ("/job:worker/task:0/device:CPU:0", 1, 4, 1), "/job:worker/task:0/device:CPU:0"),
        (2, 1, ("/job:worker/task:1/device:CPU:0", 2, 4, 1), "/job:worker/task:1/device:CPU:0"),
        (2, 1, ("/job:worker/task:1/device:CPU:0", 3, 4, 1), "/job:worker/task:1/device:CPU:0"),
    ]
    # Replica 3 is the second device of host 1.
    assert placements[0] == (("/job:worker/task:1/device:CPU:0", 1), "/job:worker/task:1/device:CPU:0")
    # Each shard reads the same rows on 2 hosts as on one: the same variables as 1 host x 4 shards.
    local = te.TPUEstimator(
        model_fn=dense_models.make_model_fn(),
        config=te.RunConfig(model_dir=str(tmp_path / "local"), tpu_config=config.tpu_config),
        train_batch_size=16,
    )
    local.train(dense_models.dataset_input_fn, max_steps=2)
    expected = dense_models.variables_of(local)
    got = dense_models.variables_of(est)
    assert got["global_step"] == 2
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_tpu_cluster_resolver_given_grpc_addresses_trains_on_the_cluster(tmp_path, tmp_path_factory, cluster2):
    # Programs written for a TPU pod pass TPUClusterResolver(tpu=...): grpc:// worker addresses name this cluster.
    resolver = te.compat.TPUClusterResolver(tpu=["grpc://" + a for a in cluster2.addresses])
    assert resolver.num_accelerators() == {"TPU": 2}  # read from the workers: 2 logical CPUs each
    metadata = resolver.get_tpu_system_metadata()
    assert (metadata.num_hosts, metadata.num_of_cores_per_host, metadata.num_cores) == (2, 2, 4)
    on_cluster, _, _ = _train_pair(tmp_path_factory, cluster2, "div")
    estimator = model.estimator(tmp_path, "div", cluster=resolver)
    estimator.train(model.make_input_fn(), max_steps=STEPS)
    got, expected = model.variables_of(estimator), model.variables_of(on_cluster)
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-7, err_msg=name)
    # The same placement as with the cluster spec given directly: table shards on both workers.
    assert _variable_devices(str(tmp_path)) == _variable_devices(on_cluster.model_dir)
