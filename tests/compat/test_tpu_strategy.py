"""`tf.distribute.TPUStrategy` and the TF2 TPU names after `compat.install()` (tpu_estimator/compat/tpu_strategy.py).

In-process: the names in every API root and their exact restoration, the strategy's face (replicas, devices,
RunOptions, Topology, DeviceAssignment), and the one-line error of every TPU-only call we do not map. The programs
run through the launcher in test_tf2_programs.py.
"""

import numpy as np
import pytest
import tensorflow as tf

import embedding
from tpu_estimator import compat
from tpu_estimator.compat import cluster_resolver as cluster_resolver_lib
from tpu_estimator.compat import patching, tf2_names
from tpu_estimator.compat import tpu_strategy as tpu_strategy_lib
from tpu_estimator.specs.context import UnsupportedOffTPUError

_MISSING = object()
PATHS = [
    "distribute.TPUStrategy",
    "distribute.experimental.TPUStrategy",
    "config.experimental_connect_to_cluster",
    "tpu.experimental.initialize_tpu_system",
    "tpu.experimental.shutdown_tpu_system",
] + ["tpu.experimental.embedding." + name for name in tf2_names.EMBEDDING_NAMES + ("TPUEmbeddingV0",)]


def _lookup(path):
    obj = tf
    for part in path.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def _snapshot():
    return {
        (root, path): _lookup((root + "." if root else "") + path) for root in patching._API_ROOTS for path in PATHS
    }


@pytest.fixture
def two_shards(monkeypatch):
    monkeypatch.setenv("TPU_ESTIMATOR_NUM_SHARDS", "2")


def test_install_puts_the_tf2_names_in_every_root_and_uninstall_restores_them():
    before = _snapshot()
    assert before[("", "distribute.TPUStrategy")] is not _MISSING
    compat.install()
    try:
        for root in ("", "compat.v2", "compat.v1.compat.v2", "compat.v2.compat.v2"):
            prefix = root + "." if root else ""
            assert _lookup(prefix + "distribute.TPUStrategy") is tpu_strategy_lib.MirroredTPUStrategy
            assert _lookup(prefix + "distribute.experimental.TPUStrategy") is tpu_strategy_lib.ExperimentalTPUStrategy
        for root in patching._API_ROOTS:
            prefix = root + "." if root else ""
            assert _lookup(prefix + "tpu.experimental.initialize_tpu_system") is tpu_strategy_lib.initialize_tpu_system
            assert (
                _lookup(prefix + "config.experimental_connect_to_cluster")
                is tpu_strategy_lib.experimental_connect_to_cluster
            )
            for name in tf2_names.EMBEDDING_NAMES:  # TPUEmbeddingV2 and RowIdInitializer too, even on TF 2.15
                assert _lookup(prefix + "tpu.experimental.embedding." + name) is getattr(embedding, name), (root, name)
        assert issubclass(tf.distribute.experimental.TPUStrategy, tf.distribute.TPUStrategy)
        assert issubclass(tf.distribute.TPUStrategy, tf.distribute.MirroredStrategy)
        # TF1's TPUStrategy (steps_per_run) is not provided: a one-line error naming it.
        with pytest.raises(UnsupportedOffTPUError, match=r"^tf.compat.v1.distribute.experimental.TPUStrategy needs"):
            tf.compat.v1.distribute.experimental.TPUStrategy()
    finally:
        compat.uninstall()
    after = _snapshot()
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert after[key] is value, key


def test_strategy_replicas_are_the_shards_with_tpu_strategy_face(installed, two_shards):
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-tpu")
    tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    assert isinstance(topology, tf.tpu.experimental.Topology)
    assert (topology.num_tasks, topology.num_tpus_per_task) == (1, 2)
    assert topology.mesh_shape.tolist() == [1, 1, 1, 2]  # one chip of 2 cores, as a TPU v3 chip
    assignment = tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=2)
    strategy = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)
    assert isinstance(strategy, tf.distribute.TPUStrategy) and strategy.cluster_resolver is resolver
    assert strategy.num_replicas_in_sync == 2
    assert [d.rsplit("/", 1)[1] for d in strategy.extended.worker_devices] == ["device:CPU:0", "device:CPU:1"]
    assert strategy.extended.tpu_hardware_feature.embedding_feature == (
        tf.tpu.experimental.HardwareFeature.EmbeddingFeature.V1
    )
    values = strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant(float(context.replica_id_in_sync_group + 1))
    )

    @tf.function
    def step(values):
        def replica_fn(value):
            value = strategy.experimental_assign_to_logical_device(value, 0)
            value = strategy.experimental_split_to_logical_devices(tf.reshape(value, [1, 1]), [1, 1])
            value = strategy.experimental_replicate_to_logical_devices(value)
            host = tf.compat.v1.tpu.outside_compilation(lambda v: v * 10.0, value)
            return tf.distribute.get_replica_context().all_reduce("SUM", host)

        options = tf.distribute.RunOptions(experimental_enable_dynamic_batch_size=False)
        return strategy.run(replica_fn, args=(values,), options=options)

    results = strategy.experimental_local_results(step(values))
    np.testing.assert_allclose([r.numpy() for r in results], [[[30.0]], [[30.0]]])
    np.testing.assert_allclose(strategy.reduce("SUM", step(values), axis=None).numpy(), [[60.0]])
    with pytest.raises(TypeError, match=r"TPUStrategy.run\(options=...\) expects a tf.distribute.RunOptions"):
        strategy.run(lambda: 1.0, options={"experimental_enable_dynamic_batch_size": False})
    tf.tpu.experimental.shutdown_tpu_system(resolver)


def _first_line(excinfo):
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


def test_model_parallelism_and_other_tpu_only_calls_are_one_line_errors(installed, two_shards):
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    model_parallel = tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=[1, 1, 1, 2], num_replicas=1
    )
    with pytest.raises(UnsupportedOffTPUError) as excinfo:
        tf.distribute.TPUStrategy(resolver, experimental_device_assignment=model_parallel)
    assert _first_line(excinfo).startswith(
        "TPUStrategy(experimental_device_assignment=...) with 2 cores per replica is model parallelism, which needs "
        "a TPU: build the DeviceAssignment with computation_shape=[1, 1, 1, 1]"
    )
    with pytest.raises(UnsupportedOffTPUError) as excinfo:
        tf.distribute.experimental.TPUStrategy(resolver, device_assignment=model_parallel)
    assert "2 cores per replica is model parallelism" in _first_line(excinfo)
    one_replica = tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=1)
    with pytest.raises(ValueError, match=r"has 1 replicas but the program runs on 2 shards: build it with num_rep"):
        tf.distribute.TPUStrategy(resolver, experimental_device_assignment=one_replica)

    strategy = tf.distribute.TPUStrategy(resolver)
    with pytest.raises(UnsupportedOffTPUError) as excinfo:
        strategy.experimental_assign_to_logical_device(tf.constant(1.0), 1)
    assert _first_line(excinfo).startswith(
        "TPUStrategy.experimental_assign_to_logical_device(tensor, 1) places ops on logical device 1"
    )
    with pytest.raises(UnsupportedOffTPUError) as excinfo:
        strategy.experimental_split_to_logical_devices(tf.ones([2, 2]), [1, 2])
    assert _first_line(excinfo).startswith(
        "TPUStrategy.experimental_split_to_logical_devices(tensor, [1, 2]) splits a tensor over the logical devices"
    )
    with pytest.raises(UnsupportedOffTPUError) as excinfo:
        tf.tpu.experimental.embedding.TPUEmbeddingV0({}, None)
    assert _first_line(excinfo).startswith("tf.tpu.experimental.embedding.TPUEmbeddingV0 needs a TPU")


def test_resolvers_we_cannot_run_are_named(installed, monkeypatch):
    other = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    with pytest.raises(TypeError, match=r"expected tf.distribute.cluster_resolver.TPUClusterResolver .* got Simple"):
        tf.distribute.TPUStrategy(other)
    monkeypatch.setenv(cluster_resolver_lib.TPU_ADDRESSES_ENV, "cluster")
    remote = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="grpc://127.0.0.1:1")
    for call in (tf.distribute.TPUStrategy, tf.tpu.experimental.initialize_tpu_system):
        with pytest.raises(UnsupportedOffTPUError, match=r"a TPUStrategy driving remote workers .* is not supported"):
            call(remote)
    with pytest.raises(UnsupportedOffTPUError, match=r"a TPUStrategy driving remote workers"):
        tf.config.experimental_connect_to_cluster(remote)
