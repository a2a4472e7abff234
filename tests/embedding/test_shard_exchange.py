"""Tables sharded over hosts that run processes (and graphs) of their own: each process sends its gradient pieces
to the owners of the shards (`embedding/shard_exchange.py`), each owner updates its shards once per unique id.

Two `tf.distribute.Server` tasks in this process stand for two hosts; each "process" is a graph of its own with a
session on its own task, and they train in two threads, one step at a time. The oracle is the NumPy model of TPU
embedding training on the whole batch (`tests/oracles/tables.py`, via `test_engine.reference_training`).
"""

import threading

import numpy as np
import pytest
import tensorflow as tf

from embedding import checkpointing
from embedding.engine import EmbeddingEngine
from embedding.shard_exchange import QueueShardExchange
from tests.cluster.local_cluster import free_ports
from tests.embedding.test_engine import BATCH_SIZE, BATCHES, CASES, _rows, _target, _tf_inputs, reference_training
from tests.helpers.two_table_model import feature_config

# Host 0 reads rows 0-1 of each batch, host 1 row 2 (ids repeat across the hosts: user 3 in rows 0 and 2).
HOST_ROWS = [slice(0, 2), slice(2, 3)]


def _task(device: str) -> int:
    return tf.DeviceSpec.from_string(device).task


def _host_graph(host, devices, make_opt, strategy, shards_per_host):
    """One host's graph: all shards (on every host's devices), its rows' lookups and the update of each step."""
    graph = tf.Graph()
    with graph.as_default():
        host_device = "/job:worker/task:{}/device:CPU:0".format(host)
        exchange = QueueShardExchange(host, len(HOST_ROWS), _task, host_device)
        engine = EmbeddingEngine(
            feature_config(combiner_a="sqrtn"),
            make_opt(),
            num_shards=len(devices),
            devices=devices,
            partition_strategy=strategy,
            shard_exchange=exchange,
        )
        steps = []
        for batch in BATCHES:
            rows = HOST_ROWS[host]
            with tf.device(host_device):
                features, weights = _tf_inputs(_rows(batch, rows), batch_size=len(range(BATCH_SIZE)[rows]))
                batches = engine.preprocess(features, weights)
                acts = engine.activations(batches)
                loss = tf.add_n(
                    [tf.reduce_sum(_target(f)[rows] * acts[f]) + 0.5 * tf.reduce_sum(acts[f] ** 2) for f in acts]
                )
                keys = list(acts)
                grads = dict(zip(keys, tf.gradients(loss, [acts[k] for k in keys])))
                steps.append(engine.apply_gradients(batches, grads))
        init = checkpointing.initializer_op()
        tables = {
            name: [t.read_full_table()] + [t.read_full_slot(s) for s in t.slot_names]
            for name, t in engine.tables.items()
        }
        slot_names = {name: t.slot_names for name, t in engine.tables.items()}
    return graph, steps, init, tables, slot_names


@pytest.mark.parametrize("shards_per_host,strategy", [(1, "div"), (2, "mod")])
@pytest.mark.parametrize("case", ["adagrad", "adam_dense", "ftrl"])
def test_hosts_in_processes_of_their_own_train_as_one_batch(case, shards_per_host, strategy):
    make_opt, kind, kwargs, lr, lazy = CASES[case]
    ports = free_ports(2)
    cluster = tf.train.ClusterSpec({"worker": ["127.0.0.1:{}".format(p) for p in ports]})
    config = tf.compat.v1.ConfigProto(device_count={"CPU": shards_per_host})
    servers = [tf.distribute.Server(cluster, "worker", h, config=config) for h in range(2)]
    devices = ["/job:worker/task:{}/device:CPU:{}".format(h, j) for h in range(2) for j in range(shards_per_host)]
    hosts = [_host_graph(h, devices, make_opt, strategy, shards_per_host) for h in range(2)]
    session_config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=30_000)
    sessions = [tf.compat.v1.Session(servers[h].target, graph=hosts[h][0], config=session_config) for h in range(2)]
    try:
        sessions[0].run(hosts[0][2])  # Only host 0 initialises the shards (every host's graph holds them all).
        for step in range(len(BATCHES)):
            errors = []

            def run(h):
                try:
                    sessions[h].run(hosts[h][1][step])
                except Exception as error:  # noqa: BLE001 - reported below
                    errors.append(error)

            threads = [threading.Thread(target=run, args=(h,)) for h in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not errors, errors
        got = {}
        for name, tensors in hosts[1][3].items():  # Read through host 1's graph: the same shards.
            values = sessions[1].run(tensors)
            got[name] = dict(params=values[0], **dict(zip(hosts[1][4][name], values[1:])))
    finally:
        for session in sessions:
            session.close()
    expected = reference_training(kind, kwargs, lr, "sqrtn", lazy)
    for table in expected:
        for key in expected[table]:
            np.testing.assert_allclose(got[table][key], expected[table][key], rtol=1e-5, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("owners", ["function", "mapping"])
def test_only_the_owner_updates_a_shard(owners):
    with tf.Graph().as_default():
        devices = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]
        process_of_device = _task if owners == "function" else {devices[0]: 0, devices[1]: 1}
        exchange = QueueShardExchange(1, 2, process_of_device, devices[1])
        engine = EmbeddingEngine(
            feature_config(), CASES["adagrad"][0](), num_shards=2, devices=devices, shard_exchange=exchange
        )
        features, weights = _tf_inputs(BATCHES[0])
        batches = engine.preprocess(features, weights)
        acts = engine.activations(batches)
        update = engine.apply_gradients(batches, {f: tf.ones_like(a) for f, a in acts.items()})
        written = set()
        pending = [update]
        seen = set()
        while pending:
            op = pending.pop()
            if op in seen:
                continue
            seen.add(op)
            if op.type in ("ResourceScatterUpdate", "ResourceSparseApplyAdagrad", "AssignVariableOp"):
                written.add(op.device)
            pending.extend(op.control_inputs)
            pending.extend(t.op for t in op.inputs)
        enqueues = [op for op in seen if op.type == "QueueEnqueueV2"]
    assert written and all("/task:1" in d for d in written)
    assert {tf.DeviceSpec.from_string(op.device).task for op in enqueues} == {0}


def test_process_index_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"process_index must be in \[0, 2\), got 2"):
        QueueShardExchange(2, 2, _task, "/job:worker/task:0/device:CPU:0")


def test_a_shard_device_the_mapping_does_not_name_is_refused():
    with tf.Graph().as_default():
        devices = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]
        exchange = QueueShardExchange(1, 2, {devices[1]: 1}, devices[1])
        piece = (tf.constant([0], tf.int64), tf.zeros([1, 2]))
        with pytest.raises(ValueError, match="names no process for the shard device '/job:worker/task:0/device:CPU:0'"):
            exchange.route("t", 0, devices[0], piece, 2)
