"""Sharding context: batch sizes, input deployment and devices per mode; the public `TPUContext`."""

from typing import List, Optional, Tuple

from tpu_estimator import _estimator_lib
from tpu_estimator.hosts import shard_devices as devices_lib
from tpu_estimator.specs.batch_size import check_divisible
from tpu_estimator.tpu_config import InputPipelineConfig, as_input_pipeline_config, input_pipeline_config_name

ModeKeys = _estimator_lib.ModeKeys


class UnsupportedOffTPUError(ValueError):
    """A TPU-only feature (model parallelism, spatial partitioning, a custom TPU feed hook) was asked for."""


class ShardingContext(object):
    """What one mode of one `TPUEstimator` call runs on, and with which batch sizes.

    Args:
      config: our `RunConfig`.
      use_tpu: the estimator's `use_tpu`.
      eval_on_tpu: the estimator's `eval_on_tpu`.
      train_batch_size: global batch of TRAIN.
      eval_batch_size: global batch of EVAL.
      predict_batch_size: global batch of PREDICT.
      mode: a `ModeKeys` value.
    """

    def __init__(
        self,
        config,
        use_tpu: bool,
        eval_on_tpu: bool,
        train_batch_size: Optional[int],
        eval_batch_size: Optional[int],
        predict_batch_size: Optional[int],
        mode: str,
    ):
        self.config = config
        self.use_tpu = use_tpu
        self.eval_on_tpu = eval_on_tpu
        self.train_batch_size = train_batch_size
        self.eval_batch_size = eval_batch_size
        self.predict_batch_size = predict_batch_size
        self.mode = mode
        self.layout = config.shard_layout() if self.is_running_on_shards else None
        self.num_replicas = len(self.layout.devices) if self.layout else 1
        self.num_hosts = self.layout.num_hosts if self.layout else 1

    @property
    def on_cluster(self) -> bool:
        """Whether the shards run on the hosts of a cluster (the devices are tasks' of a `tf.distribute.Server`)."""
        return getattr(self.config, "tpu_cluster", None) is not None

    @property
    def process_per_host(self) -> bool:
        """Whether each host runs the program in a process of its own, which builds that host's replicas only."""
        return self.on_cluster and self.config.tpu_cluster.process_per_host

    @property
    def built_hosts(self) -> List[int]:
        """The hosts whose input and replicas this process builds: every host, or with one process per host its
        own."""
        return list(self.layout.built_hosts) if self.layout else [0]

    @property
    def built_replicas(self) -> List[int]:
        """The replicas this process builds, host-major (global replica ids)."""
        per_host = self.num_of_replicas_per_host
        return [h * per_host + j for h in self.built_hosts for j in range(per_host)]

    @property
    def built_replica_devices(self) -> List[str]:
        """The devices of `built_replicas`."""
        devices = self.replica_devices
        return [devices[r] for r in self.built_replicas]

    @property
    def is_running_on_shards(self) -> bool:
        """False for upstream's CPU path: use_tpu=False, or EVAL with eval_on_tpu=False."""
        if not self.use_tpu:
            return False
        if self.mode == ModeKeys.EVAL and not self.eval_on_tpu:
            return False
        return True

    @property
    def input_mode(self) -> InputPipelineConfig:
        """The `InputPipelineConfig` value that applies to this mode."""
        tpu_config = self.config.tpu_config
        mode = tpu_config.per_host_input_for_training
        if self.mode != ModeKeys.TRAIN:
            if tpu_config.eval_training_input_configuration == InputPipelineConfig.SLICED:
                return InputPipelineConfig.SLICED
            if mode == InputPipelineConfig.PER_SHARD_V1:
                return InputPipelineConfig.PER_HOST_V1
        return as_input_pipeline_config(mode)

    @property
    def global_batch_size(self) -> Optional[int]:
        return {
            ModeKeys.TRAIN: self.train_batch_size,
            ModeKeys.EVAL: self.eval_batch_size,
            ModeKeys.PREDICT: self.predict_batch_size,
        }[self.mode]

    @property
    def num_of_replicas_per_host(self) -> int:
        return self.num_replicas // self.num_hosts

    @property
    def replica_devices(self) -> List[str]:
        """The device of every replica (of every host): where table shards live too."""
        if self.layout is None:
            return devices_lib.shard_devices(self.num_replicas)
        return list(self.layout.devices)

    @property
    def host_work_device(self) -> str:
        """Where the host-side work of the step this process builds runs (host calls, eval metrics, the loop's
        counters): the CPU of the first host it builds (host 0's, or with one process per host its own)."""
        return self.host_devices[self.built_hosts[0]]

    @property
    def host_devices(self) -> List[str]:
        """The CPU of every host (one entry without a cluster: this process's CPU)."""
        if self.layout is None:
            return [devices_lib.HOST_DEVICE]
        return list(self.layout.host_devices)

    def host_of_replica(self, replica_id: int) -> int:
        return self.layout.host_of_replica(replica_id) if self.layout else 0

    def host_of_invocation(self, invocation_index: int) -> int:
        """The host of an `input_fn` invocation (see `input_fn_invocations`)."""
        mode = self.input_mode
        if mode == InputPipelineConfig.PER_SHARD_V1:
            return self.host_of_replica(invocation_index)
        if mode in (InputPipelineConfig.BROADCAST, InputPipelineConfig.SLICED):
            return 0
        return invocation_index

    @property
    def batch_size_for_input_fn(self) -> Optional[int]:
        """`params['batch_size']` given to `input_fn` (docs/SEMANTICS.md 2)."""
        global_batch = self.global_batch_size
        if global_batch is None or not self.is_running_on_shards:
            return global_batch
        mode = self.input_mode
        if mode in (InputPipelineConfig.BROADCAST, InputPipelineConfig.SLICED):
            return global_batch
        if mode == InputPipelineConfig.PER_HOST_V1:
            return global_batch // self.num_hosts
        return global_batch // self.num_replicas

    @property
    def batch_size_for_model_fn(self) -> Optional[int]:
        """`params['batch_size']` given to `model_fn` (docs/SEMANTICS.md 2)."""
        global_batch = self.global_batch_size
        if global_batch is None or not self.is_running_on_shards:
            return global_batch
        if self.input_mode == InputPipelineConfig.BROADCAST:
            return global_batch
        return global_batch // self.num_replicas

    def validate(self) -> None:
        """Upstream's batch-size checks for this mode when it runs on shards.

        Raises:
          ValueError: a batch size is missing or not divisible by the number of replicas.
        """
        if not self.is_running_on_shards:
            return
        tpu_config = self.config.tpu_config
        if tpu_config.num_cores_per_replica not in (None, 1):
            raise UnsupportedOffTPUError(
                "TPUConfig.num_cores_per_replica={} asks for model parallelism across TPU cores, which needs "
                "a TPU's XLA SPMD partitioner. Off a TPU each replica runs on one device: set "
                "num_cores_per_replica=None (and drop input_partition_dims).".format(tpu_config.num_cores_per_replica)
            )
        if tpu_config.input_partition_dims is not None:
            raise UnsupportedOffTPUError(
                "TPUConfig.input_partition_dims (spatial partitioning) needs a TPU: set it to None."
            )
        if tpu_config.experimental_feed_hook is not None:
            raise UnsupportedOffTPUError(
                "TPUConfig.experimental_feed_hook replaces the TPU infeed/outfeed hook and only "
                "applies on a TPU: set it to None."
            )
        name = {ModeKeys.TRAIN: "train", ModeKeys.EVAL: "eval", ModeKeys.PREDICT: "predict"}[self.mode]
        if self.global_batch_size is None:
            raise ValueError(
                "{}_batch_size in TPUEstimator constructor cannot be `None` if .{} is running on TPU.".format(
                    name, {"train": "train", "eval": "evaluate", "predict": "predict"}[name]
                )
            )
        if self.process_per_host and self.input_mode in (InputPipelineConfig.BROADCAST, InputPipelineConfig.SLICED):
            raise ValueError(
                "With one process per host, each host reads its own input: per_host_input_for_training (and "
                "eval_training_input_configuration) must be PER_HOST_V1, PER_HOST_V2 or PER_SHARD_V1, not {} (it "
                "reads on host 0 for every host).".format(input_pipeline_config_name(self.input_mode))
            )
        if self.input_mode != InputPipelineConfig.BROADCAST:
            check_divisible(self.global_batch_size, name + " batch size", self.num_replicas, "number of replicas")

    def input_fn_invocations(self) -> List[Tuple[str, int, int, int]]:
        """One `(device, invocation_index, total_invocations, replicas_consumed)` per `input_fn` call.

        PER_SHARD_V1: one per replica, on its host's CPU; BROADCAST/SLICED: one on host 0; PER_HOST_V1/V2: one per
        host, on its CPU.
        """
        mode = self.input_mode
        hosts = self.host_devices
        if mode == InputPipelineConfig.PER_SHARD_V1:
            return [(hosts[self.host_of_replica(i)], i, self.num_replicas, 1) for i in self.built_replicas]
        if mode in (InputPipelineConfig.BROADCAST, InputPipelineConfig.SLICED):
            return [(hosts[0], 0, 1, self.num_replicas)]
        return [(hosts[h], h, self.num_hosts, self.num_of_replicas_per_host) for h in self.built_hosts]


class TPUContext(object):
    """The context given to `input_fn` and `model_fn` as `params['context']`.

    Args:
      internal_ctx: the `ShardingContext` of the current call.
      input_device: the host device `input_fn` runs on (input_fn only).
      invocation_index: index of this `input_fn` invocation (input_fn only).
      call_from_input_fn: whether this context is given to `input_fn`.
      host_id: the host index (input_fn only).
    """

    def __init__(
        self,
        internal_ctx: ShardingContext,
        input_device: Optional[str] = None,
        invocation_index: Optional[int] = None,
        call_from_input_fn: bool = True,
        host_id: Optional[int] = None,
        replicas_consumed: Optional[int] = None,
        total_invocations: Optional[int] = None,
    ):
        self._internal_ctx = internal_ctx
        self._input_device = input_device
        self._invocation_index = invocation_index
        self._call_from_input_fn = call_from_input_fn
        self._host_id = host_id
        self._replicas_consumed = replicas_consumed
        self._total_invocations = total_invocations

    def current_input_fn_deployment(self) -> Tuple[str, int, int, int]:
        """`(host device, invocation index, total invocations, replicas consumed)` of this `input_fn` call.

        Raises:
          RuntimeError: called from `model_fn`.
        """
        if not self._call_from_input_fn:
            raise RuntimeError("This TPUContext instance must not be called from model_fn.")
        return (self._input_device, self._invocation_index, self._total_invocations, self._replicas_consumed)

    @property
    def mode(self) -> str:
        return self._internal_ctx.mode

    @property
    def num_replicas(self) -> int:
        """The total number of replicas (shards)."""
        return self._internal_ctx.num_replicas

    @property
    def num_hosts(self) -> int:
        """The number of hosts: the tasks of the cluster's job (1 without a cluster)."""
        return self._internal_ctx.num_hosts

    @property
    def current_host(self) -> int:
        """The host index of this `input_fn` call.

        Raises:
          RuntimeError: called from `model_fn`.
        """
        if not self._call_from_input_fn:
            raise RuntimeError("This TPUContext instance must not be called from model_fn.")
        return self._host_id

    @property
    def num_of_replicas_per_host(self) -> int:
        return self._internal_ctx.num_of_replicas_per_host

    @property
    def num_of_cores_per_host(self) -> int:
        return self._internal_ctx.num_of_replicas_per_host

    @property
    def device_assignment(self):
        """None: shards are whole devices, there is no TPU device assignment.

        Raises:
          RuntimeError: called from `input_fn`.
        """
        if self._call_from_input_fn:
            raise RuntimeError("This TPUContext instance must not be called from input_fn.")
        return None

    def device_for_replica(self, replica_id: int) -> Tuple[str, int]:
        """`(host device, device ordinal)` of a replica, as upstream returns it.

        Raises:
          ValueError: `replica_id` is out of range.
        """
        if not 0 <= replica_id < self.num_replicas:
            raise ValueError("replica_id must be in [0, {}), got {}".format(self.num_replicas, replica_id))
        ctx = self._internal_ctx
        host = ctx.host_of_replica(replica_id)
        return ctx.host_devices[host], replica_id - host * ctx.num_of_replicas_per_host

    def tpu_host_placement_function(self, host_id: int = 0, replica_id: Optional[int] = None) -> str:
        """The CPU of a host (of the replica's host when `replica_id` is given); this process's CPU off a cluster."""
        ctx = self._internal_ctx
        if not ctx.on_cluster:
            return ctx.host_work_device
        if replica_id is not None:
            host_id = ctx.host_of_replica(replica_id)
        if not 0 <= host_id < ctx.num_hosts:
            raise ValueError("host_id must be in [0, {}), got {}".format(ctx.num_hosts, host_id))
        return ctx.host_devices[host_id]
