"""Embedding ids deduplicated per host on a loopback cluster (2 hosts x 2 logical CPUs).

Each host deduplicates its own replicas' ids on its CPU, looks its unique ids up on the table shards (wherever they
live) and combines the rows for its replicas; each shard sums the hosts' gradients per unique id and applies its
optimizer once per id. Weighted 'mean', 'sqrtn' and sequence features, pipelined updates and the id-range check
must give what 1 host x 4 shards gives.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

import tpu_estimator as te
from tests.cluster import host_embedding_program, model
from tpu_estimator import experimental as tex
from tpu_estimator.specs.embedding_spec import SEQUENCE_LENGTH_SUFFIX

RNG = np.random.RandomState(11)
N, BATCH = 128, 16
FEATURES = {
    "w": RNG.randint(0, 9, size=(N, 3)).astype(np.int64),  # 0 = no id: rows of 0 to 3 ids
    "w_weight": RNG.uniform(0.5, 2.0, size=(N, 3)).astype(np.float32),
    "q": RNG.randint(0, 7, size=(N, 4)).astype(np.int64),
    "s": RNG.randint(0, 11, size=(N, 3)).astype(np.int64),  # dense sequences of length 3
}
Y = RNG.randn(N).astype(np.float32)
INIT = {
    "tw": np.random.RandomState(1).uniform(-0.5, 0.5, size=(9, 3)),
    "tq": np.random.RandomState(2).uniform(-0.5, 0.5, size=(7, 2)),
    "ts": np.random.RandomState(3).uniform(-0.5, 0.5, size=(11, 2)),
}
STEPS = 4
HOST_CPUS = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]


def _sparse(ids, weights=None):
    ids = tf.sparse.from_dense(ids)
    if weights is None:
        return ids
    return ids, tf.SparseTensor(ids.indices, tf.gather_nd(weights, ids.indices), ids.dense_shape)


def make_input_fn(features=None):
    features = FEATURES if features is None else features

    def input_fn(params):
        context = params["context"]
        dataset = tf.data.Dataset.from_tensor_slices((features, Y)).repeat()
        dataset = model.host_rows(dataset, BATCH, context.num_hosts, context.current_host, params["batch_size"])

        def to_inputs(f, y):
            w, w_weight = _sparse(f["w"], f["w_weight"])
            return {"w": w, "w_weight": w_weight, "q": _sparse(f["q"]), "s": f["s"]}, y

        return dataset.map(to_inputs)

    return input_fn


def model_fn(features, labels, mode, params):
    lengths = tf.cast(features["s" + SEQUENCE_LENGTH_SUFFIX], tf.float32)[:, None]
    net = tf.concat([features["w"], features["q"], tf.reshape(features["s"], [-1, 6]), lengths], axis=1)
    logits = tf.squeeze(tf.compat.v1.layers.dense(net, 1, kernel_initializer=tf.compat.v1.constant_initializer(0.3)), 1)
    loss = tf.reduce_mean(tf.square(logits - labels))
    opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))


def estimator(model_dir, strategy, pipelined, cluster=None):
    init = lambda v: tf.compat.v1.constant_initializer(v)
    spec = tex.EmbeddingConfigSpec(
        table_to_config_dict={
            "tw": tex.TableConfig(9, 3, initializer=init(INIT["tw"]), combiner="mean"),
            "tq": tex.TableConfig(7, 2, initializer=init(INIT["tq"]), combiner="sqrtn"),
            "ts": tex.TableConfig(11, 2, initializer=init(INIT["ts"])),
        },
        feature_to_config_dict=host_embedding_program.feature_configs(),
        optimization_parameters=tex.AdagradParameters(0.5, initial_accumulator=0.1),
        partition_strategy=strategy,
        pipeline_execution_with_tensor_core=pipelined,
    )
    config = te.RunConfig(
        model_dir=str(model_dir),
        cluster=cluster,
        tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=4),
    )
    return te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=BATCH, embedding_config_spec=spec)


_trained = {}


def _train_pair(tmp_path_factory, cluster2, strategy, pipelined):
    key = (strategy, pipelined)
    if key not in _trained:
        base = tmp_path_factory.mktemp("dedup_{}_{}".format(strategy, int(pipelined)))
        on_cluster = estimator(base / "cluster", strategy, pipelined, cluster=cluster2.resolver())
        on_cluster.train(make_input_fn(), max_steps=STEPS)
        local = estimator(base / "local", strategy, pipelined)
        local.train(make_input_fn(), max_steps=STEPS)
        _trained[key] = (on_cluster, local)
    return _trained[key]


@pytest.mark.parametrize("strategy,pipelined", [("div", False), ("mod", True)])
def test_weighted_mean_sqrtn_and_sequence_features_train_like_one_host(tmp_path_factory, cluster2, strategy, pipelined):
    on_cluster, local = _train_pair(tmp_path_factory, cluster2, strategy, pipelined)
    got, expected = model.variables_of(on_cluster), model.variables_of(local)
    assert set(got) == set(expected)
    assert got["global_step"] == STEPS
    for name in expected:
        # A table row's gradient is summed per host, then the hosts' sums on its shard: another float summation
        # order than one host's single sum. rtol 1e-5 is a few float32 ulps of these O(1) values; anything but the
        # order (a missed or doubled occurrence, a second optimizer application) moves them by >= 1e-3.
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    for table in ("tw", "tq", "ts"):
        assert np.abs(got[table] - INIT[table]).max() > 1e-3, table


def _graph(model_dir):
    graph = tf.compat.v1.GraphDef()
    with open(os.path.join(model_dir, "graph.pbtxt")) as f:
        text_format.Parse(f.read(), graph)
    return graph


def _task(device):
    return tf.DeviceSpec.from_string(device).task if device else None


def test_each_host_deduplicates_its_own_ids(tmp_path_factory, cluster2):
    on_cluster, _ = _train_pair(tmp_path_factory, cluster2, "div", False)
    graph = _graph(on_cluster.model_dir)
    nodes = {node.name: node for node in graph.node}
    # One dedup (Unique) per table on each host's CPU, in the host stage.
    dedups = sorted(n.device for n in graph.node if n.op == "Unique" and "embedding_preprocess" in n.name)
    assert dedups == [HOST_CPUS[0]] * 3 + [HOST_CPUS[1]] * 3
    # What host 0 reads from host 1: rows of host 1's table shards (lookups), host 1's deduplicated ids and
    # gradient rows for host 0's shards (updates), the dense model's replicas and reduction, the checkpoint. Never
    # host 1's input, its ids before deduplication or its activation gradients (the old hub design sent all three).
    crossing = []
    for node in graph.node:
        if _task(node.device) != 0:
            continue
        for name in node.input:
            producer = nodes[name.lstrip("^").split(":")[0]]
            if not name.startswith("^") and _task(producer.device) == 1:
                crossing.append((producer, node))
    allowed = lambda p: p.name.startswith(("replica_", "save/")) or ("_lookup/" in p.name or "_apply/" in p.name)
    assert [(p.name, c.name) for p, c in crossing if not allowed(p)] == []
    host_stage = ("tpu_embedding_inputs", "tpu_embedding_gradients")
    assert [(p.name, c.name) for p, c in crossing if any(s in c.name for s in host_stage)] == []
    # The check sees edges: rows of host 1's shards go to host 0, host 1's gradient rows to host 0's shards.
    assert any(p.op == "ResourceGather" and "_lookup/" in p.name for p, _ in crossing)
    assert any(p.op == "SplitV" and "_apply/" in p.name for p, _ in crossing)


def test_bad_id_on_host_1_is_named_and_leaves_the_tables_unchanged(tmp_path, cluster2):
    est = estimator(tmp_path, "div", False, cluster=cluster2.resolver())
    est.train(make_input_fn(), max_steps=2)
    before = model.variables_of(est)
    bad = dict(FEATURES)
    bad["q"] = FEATURES["q"].copy()
    bad["q"][BATCH // 2 + 1, 0] = 99  # a row of host 1's half of the next global batch
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"q.*tq.*ids must be in \[0, 7\)"):
        est.train(make_input_fn(bad), max_steps=4)
    after = model.variables_of(est)
    assert after["global_step"] == 2
    for name in ("tw", "tq", "ts"):
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
