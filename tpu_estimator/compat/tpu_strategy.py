"""`tf.distribute.TPUStrategy` off a TPU: a `MirroredStrategy` over the shard devices with TPUStrategy's face.

A TF2 TPU program (`TPUClusterResolver`, `tf.config.experimental_connect_to_cluster`,
`tf.tpu.experimental.initialize_tpu_system`, `tf.distribute.TPUStrategy`, `strategy.run` in a `tf.function`) runs
unmodified once `tpu_estimator.compat.install()` has put these objects behind TensorFlow's names:

* `TPUStrategy` IS a `tf.distribute.MirroredStrategy` whose replicas are the shards (`--num_shards` /
  `$TPU_ESTIMATOR_NUM_SHARDS`: GPUs when there are enough, else logical CPU devices, which it configures), so
  `scope`, `run`, `reduce`, `gather`, `experimental_local_results`, `experimental_distribute_dataset`,
  `distribute_datasets_from_function` (with `InputOptions`), `experimental_distribute_values_from_function`,
  `extended.worker_devices` and Keras' `compile`/`fit`/`evaluate`/`predict` are MirroredStrategy's, which computes
  what a TPU computes for data-parallel replicas. What only a TPU can do (model parallelism over logical devices,
  a remote TPU worker) raises a one-line error naming the call and what to do instead.
* `initialize_tpu_system` returns a `tf.tpu.experimental.Topology` of the shards (one task, one core per shard) so
  that `DeviceAssignment.build(topology, ...)` works; `shutdown_tpu_system` does nothing;
  `experimental_connect_to_cluster` with our local `TPUClusterResolver` sets up the shard devices and connects to
  nothing.

The class is not named `TPUStrategy...`: Keras 2 takes any class whose name starts so for a TPU strategy and would
then ask it for TPU internals; this one is a MirroredStrategy to Keras, and a TPUStrategy to `isinstance` checks
against `tf.distribute.TPUStrategy` (which `install()` makes this class).
"""

from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf

from tpu_estimator.compat import cluster_resolver as cluster_resolver_lib
from tpu_estimator.compat import tpu_hosts
from tpu_estimator.hosts import shard_devices as devices_lib
from tpu_estimator.specs.context import UnsupportedOffTPUError

__all__ = [
    "ExperimentalTPUStrategy",
    "MirroredTPUStrategy",
    "TPUHardwareFeature",
    "experimental_connect_to_cluster",
    "initialize_tpu_system",
    "shard_topology",
    "shutdown_tpu_system",
    "tpu_only",
]

# Python checks only: AutoGraph would convert them when a converted step calls them (and its frames would then
# stand for ours in an error's traceback).
_do_not_convert = tf.autograph.experimental.do_not_convert

# TensorFlow's own function, for resolvers that are not ours (captured before `install()` replaces the name).
_TF_CONNECT_TO_CLUSTER = tf.config.experimental_connect_to_cluster


def tpu_only(name: str, what_to_do: str) -> Callable[..., Any]:
    """A stand-in for a TPU-only TensorFlow name: calling it raises a one-line `UnsupportedOffTPUError` (a `ValueError`).

    Args:
      name: the TensorFlow name, as a program spells it.
      what_to_do: what the program should use or change instead.

    Returns:
      A function that raises.
    """

    def unavailable(*args, **kwargs):
        del args, kwargs
        raise UnsupportedOffTPUError(f"{name} needs a TPU and has no equivalent off the TPU: {what_to_do}")

    unavailable.__name__ = name.rpartition(".")[2]
    unavailable.__qualname__ = unavailable.__name__
    return unavailable


# ---------------------------------------------------------------------------------------------- the shard devices
def _resolver_or_default(resolver: Any, what: str) -> cluster_resolver_lib.TPUClusterResolver:
    """Our `TPUClusterResolver` (a local one for None).

    Raises:
      TypeError: `resolver` is another kind of cluster resolver.
      UnsupportedOffTPUError: the resolver names remote TPU workers (`grpc://` addresses taken as a cluster).
    """
    if resolver is None:
        return cluster_resolver_lib.TPUClusterResolver()
    if not isinstance(resolver, cluster_resolver_lib.TPUClusterResolver):
        raise TypeError(
            f"{what}: expected tf.distribute.cluster_resolver.TPUClusterResolver (tpu_estimator.compat's), got "
            f"{type(resolver).__name__}; create the resolver after tpu_estimator.compat.install() (the launcher "
            f"tpu-estimator-run does this)."
        )
    if resolver.cluster_spec().jobs:
        raise UnsupportedOffTPUError(
            f"{what}: a TPUStrategy driving remote workers ({resolver!r}) is not supported; run the program on "
            f"one host (unset {cluster_resolver_lib.TPU_ADDRESSES_ENV}=cluster)."
        )
    return resolver


def _num_shards(resolver: cluster_resolver_lib.TPUClusterResolver) -> int:
    return int(resolver.num_accelerators()["TPU"])


def ensure_shard_devices(num_shards: int) -> list:
    """The shard devices of this process, configuring `num_shards` logical CPU devices when the shards are CPUs.

    Returns:
      The device names (`devices.shard_devices`).

    Raises:
      RuntimeError: TensorFlow's devices were initialized before with fewer CPU devices than shards.
    """
    devices = devices_lib.shard_devices(num_shards)
    if not devices[0].startswith("/device:CPU") or num_shards == 1:
        return devices
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu) or []
    if len(configured) >= num_shards:
        return devices
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * num_shards)
    except RuntimeError:
        found = len(tf.config.list_logical_devices("CPU"))
        if found < num_shards:
            raise RuntimeError(
                f"TPUStrategy needs {num_shards} logical CPU devices (one per shard) but TensorFlow's devices were "
                f"initialized already with {found}: create the TPUStrategy (or call "
                f"tf.tpu.experimental.initialize_tpu_system) before the program runs its first TensorFlow op."
            ) from None
    return devices


def shard_topology(num_shards: int, num_hosts: int = 1) -> tf.tpu.experimental.Topology:
    """A `Topology` of `num_hosts` tasks whose cores are the shards: chips of 2 cores (as TPU v2/v3 chips) for an
    even shard count per host, else one core per chip; chips along the mesh's first axis, host after host.

    So `DeviceAssignment.build(topology, num_replicas=num_hosts * num_shards)` is one core per replica, and a
    program's `computation_shape=[1, 1, 1, 2]` (two cores of a chip per replica) builds and is then refused by the
    strategy as model parallelism.
    """
    cores = 2 if num_shards % 2 == 0 else 1
    chips = num_shards // cores
    coordinates = np.array(
        [
            [[host * chips + chip, 0, 0, core] for chip in range(chips) for core in range(cores)]
            for host in range(num_hosts)
        ],
        dtype=np.int32,
    )
    return tf.tpu.experimental.Topology(mesh_shape=[chips * num_hosts, 1, 1, cores], device_coordinates=coordinates)


def _all_shard_devices(resolver: cluster_resolver_lib.TPUClusterResolver) -> tuple:
    """`(shard devices of every host, number of hosts)`; with several hosts (`tpu_hosts`) the first call joins them
    (and never returns on a host other than the client)."""
    num_shards = _num_shards(resolver)
    local = ensure_shard_devices(num_shards)
    joined = tpu_hosts.shard_devices(num_shards, _TF_CONNECT_TO_CLUSTER)
    if joined is None:
        return local, 1
    return joined, len(joined) // num_shards


def initialize_tpu_system(cluster_resolver: Any = None) -> tf.tpu.experimental.Topology:
    """`tf.tpu.experimental.initialize_tpu_system` off a TPU: sets up the shard devices and returns their topology.

    Args:
      cluster_resolver: our `TPUClusterResolver`, or None.

    Returns:
      A `tf.tpu.experimental.Topology` with one task and one core per shard (`shard_topology`).

    Raises:
      TypeError / UnsupportedOffTPUError: see `MirroredTPUStrategy`.
    """
    resolver = _resolver_or_default(cluster_resolver, "initialize_tpu_system")
    devices, num_hosts = _all_shard_devices(resolver)
    return shard_topology(len(devices) // num_hosts, num_hosts)


def shutdown_tpu_system(cluster_resolver: Any = None) -> None:
    """`tf.tpu.experimental.shutdown_tpu_system` off a TPU: there is no TPU system; nothing to do."""
    _resolver_or_default(cluster_resolver, "shutdown_tpu_system")


def experimental_connect_to_cluster(
    cluster_spec_or_resolver: Any,
    job_name: str = "localhost",
    task_index: int = 0,
    protocol: Optional[str] = None,
    make_master_device_default: bool = True,
    cluster_device_filters: Any = None,
) -> None:
    """`tf.config.experimental_connect_to_cluster`: with our local `TPUClusterResolver`, sets up the shard devices
    (there is no remote TPU worker to connect to); any other cluster goes to TensorFlow's function.

    Raises:
      UnsupportedOffTPUError: our resolver names remote workers.
    """
    if not isinstance(cluster_spec_or_resolver, cluster_resolver_lib.TPUClusterResolver):
        return _TF_CONNECT_TO_CLUSTER(
            cluster_spec_or_resolver,
            job_name=job_name,
            task_index=task_index,
            protocol=protocol,
            make_master_device_default=make_master_device_default,
            cluster_device_filters=cluster_device_filters,
        )
    _all_shard_devices(_resolver_or_default(cluster_spec_or_resolver, "experimental_connect_to_cluster"))
    return None


# ------------------------------------------------------------------------------------------------- the strategy
class TPUHardwareFeature:
    """What `strategy.extended.tpu_hardware_feature` tells programs: the shards run `TPUEmbedding` (the V1 API)."""

    def __init__(self):
        self.embedding_feature = tf.tpu.experimental.HardwareFeature.EmbeddingFeature.V1
        self.num_embedding_devices_per_chip = 1


def _num_hosts_named() -> int:
    cluster = tpu_hosts.host_job()
    return 1 if cluster is None else cluster.num_hosts


def _check_device_assignment(device_assignment: Any, num_shards: int) -> None:
    """Accepts a data-parallel assignment of one core per replica over the shards; raises otherwise."""
    if device_assignment is None:
        return
    cores = getattr(device_assignment, "num_cores_per_replica", None)
    replicas = getattr(device_assignment, "num_replicas", None)
    if cores is None or replicas is None:
        raise TypeError(
            f"TPUStrategy(experimental_device_assignment=...) expects a tf.tpu.experimental.DeviceAssignment, got "
            f"{type(device_assignment).__name__}."
        )
    if cores != 1:
        raise UnsupportedOffTPUError(
            f"TPUStrategy(experimental_device_assignment=...) with {cores} cores per replica is model parallelism, "
            f"which needs a TPU: build the DeviceAssignment with computation_shape=[1, 1, 1, 1] (one core per "
            f"replica) or pass none."
        )
    if replicas != num_shards:
        raise ValueError(
            f"TPUStrategy(experimental_device_assignment=...) has {replicas} replicas but the program runs on "
            f"{num_shards} shards: build it with num_replicas={num_shards} (or run with --num_shards={replicas})."
        )


class MirroredTPUStrategy(tf.distribute.MirroredStrategy):
    """`tf.distribute.TPUStrategy` off a TPU: data-parallel replicas on the shard devices of this host.

    Args:
      tpu_cluster_resolver: our `TPUClusterResolver` (`tf.distribute.cluster_resolver.TPUClusterResolver` once
        installed), or None for a local one. It decides the number of replicas: the shards.
      experimental_device_assignment: None, or a `tf.tpu.experimental.DeviceAssignment` of one core per replica
        and one replica per shard (any order: data-parallel replicas compute the same step on any device).
      experimental_spmd_xla_partitioning: XLA's SPMD partitioner for model parallelism; with one core per replica
        there is nothing to partition, so either value runs the same program.

    Raises:
      TypeError: a cluster resolver of another kind.
      UnsupportedOffTPUError: model parallelism, or a resolver naming remote workers.
      ValueError: a device assignment whose replica count is not the shard count.
    """

    def __init__(
        self,
        tpu_cluster_resolver: Any = None,
        experimental_device_assignment: Any = None,
        experimental_spmd_xla_partitioning: bool = False,
    ):
        resolver = _resolver_or_default(tpu_cluster_resolver, "TPUStrategy(tpu_cluster_resolver=...)")
        _check_device_assignment(experimental_device_assignment, _num_shards(resolver) * _num_hosts_named())
        devices, num_hosts = _all_shard_devices(resolver)
        if num_hosts == 1:
            super().__init__(devices=devices)
        else:
            # One client driving every host's devices (tpu_hosts.py). MirroredStrategy refuses devices of several
            # tasks only while it is built eagerly; built outside eager mode it sets up the same (one input
            # pipeline on the client, replicas on every device), and its steps run as functions.
            with tf.Graph().as_default():
                super().__init__(devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        self._tpu_cluster_resolver = resolver
        self._device_assignment = experimental_device_assignment
        self._spmd_xla_partitioning = bool(experimental_spmd_xla_partitioning)
        # What TPU programs and layers (TensorFlow Recommenders' TPUEmbedding) read off `extended`.
        self.extended.tpu_hardware_feature = TPUHardwareFeature()
        self.extended.num_hosts = num_hosts
        self.extended.num_replicas_per_host = len(devices) // num_hosts

    @property
    def cluster_resolver(self) -> cluster_resolver_lib.TPUClusterResolver:
        """The `TPUClusterResolver` given to the constructor (or the local one made for None)."""
        return self._tpu_cluster_resolver

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Runs `fn` on every replica, as `TPUStrategy.run`.

        Args:
          fn: the step function.
          args: positional arguments (per-replica values are split over the replicas).
          kwargs: keyword arguments.
          options: None or a `tf.distribute.RunOptions`. Its TPU compilation options (dynamic batch size, shape
            bucketizing, XLA options) have nothing to change here: shapes are dynamic off a TPU and no step is
            XLA-compiled.

        Returns:
          `fn`'s outputs, per-replica values with several replicas.

        Raises:
          TypeError: `options` is not a `tf.distribute.RunOptions`.
        """
        if options is not None and not isinstance(options, tf.distribute.RunOptions):
            raise TypeError(f"TPUStrategy.run(options=...) expects a tf.distribute.RunOptions, got {options!r}.")
        return super().run(fn, args=args, kwargs=kwargs, options=options)

    # TPU-only model parallelism: identities where TensorFlow's own TPUStrategy accepts the call with one logical
    # device per replica (what every replica is here), a one-line error otherwise.
    @_do_not_convert
    def experimental_assign_to_logical_device(self, tensor: Any, logical_device_id: int) -> Any:
        """`tensor` itself for logical device 0 (each replica is one device); other devices raise.

        Raises:
          UnsupportedOffTPUError: `logical_device_id` is not 0 (model parallelism).
        """
        if logical_device_id != 0:
            raise UnsupportedOffTPUError(
                f"TPUStrategy.experimental_assign_to_logical_device(tensor, {logical_device_id}) places ops on "
                f"logical device {logical_device_id} of a replica (model parallelism), which needs a TPU: each "
                f"replica is one device here; remove the call."
            )
        return tensor

    @_do_not_convert
    def experimental_split_to_logical_devices(self, tensor: Any, partition_dimensions: Any) -> Any:
        """`tensor` itself when every partition dimension is 1; splitting raises.

        Raises:
          UnsupportedOffTPUError: a partition dimension is not 1 (model parallelism).
        """
        dims = list(partition_dimensions)
        if any(int(d) != 1 for d in dims):
            raise UnsupportedOffTPUError(
                f"TPUStrategy.experimental_split_to_logical_devices(tensor, {dims}) splits a tensor over the "
                f"logical devices of a replica (model parallelism), which needs a TPU: each replica is one device "
                f"here; remove the call."
            )
        return tensor

    @_do_not_convert
    def experimental_replicate_to_logical_devices(self, tensor: Any) -> Any:
        """`tensor` itself: each replica has one logical device."""
        return tensor


class ExperimentalTPUStrategy(MirroredTPUStrategy):
    """`tf.distribute.experimental.TPUStrategy` (deprecated spelling): `device_assignment` for the assignment.

    Args:
      tpu_cluster_resolver: see `MirroredTPUStrategy`.
      device_assignment: see `MirroredTPUStrategy`'s `experimental_device_assignment`.
    """

    def __init__(self, tpu_cluster_resolver: Any = None, device_assignment: Any = None):
        super().__init__(tpu_cluster_resolver, experimental_device_assignment=device_assignment)
