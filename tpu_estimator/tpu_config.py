"""`TPUConfig`, `RunConfig` and `InputPipelineConfig`, with upstream's fields, defaults and checks.

Off a TPU, our `RunConfig` also arranges the session's devices: one logical CPU device per shard when no GPU is
visible, so that shards are real TensorFlow devices without the user touching `session_config`.
"""

import collections
import contextlib
import enum
import json
import os
import re
from typing import Any, Iterator, Optional

import numpy as np
import tensorflow as tf

from tpu_estimator import _estimator_lib
from tpu_estimator.hosts import cluster as cluster_lib
from tpu_estimator.hosts import shard_devices as devices_lib

_ITERATIONS_PER_LOOP_VALUE_REGEX = re.compile(r"^(?P<value>[1-9]\d*)((?P<suffix>[smh])$|$)")

IterationsPerLoopCounter = collections.namedtuple("IterationsPerLoopCounter", ["value", "unit"])


def check_positive_integer(value: Any, name: str) -> None:
    """Raises unless `value` is a positive integer (upstream's messages).

    Raises:
      TypeError: `value` is not an integer.
      ValueError: `value` is not positive.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError("{} must be int, got {}".format(name, type(value)))
    if value <= 0:
        raise ValueError("{} must be positive, got {}".format(name, value))


def parse_iterations_per_loop(iterations_per_loop: Any) -> IterationsPerLoopCounter:
    """Parses `iterations_per_loop`: a positive count, or a time `<N>s|m|h` (returned in seconds).

    Raises:
      ValueError: the value is neither form.
    """
    match = _ITERATIONS_PER_LOOP_VALUE_REGEX.match(str(iterations_per_loop))
    if match is None or isinstance(iterations_per_loop, bool):
        raise ValueError(
            "Invalid TPUConfig `iterations_per_loop` value. Value must be positive "
            "integer value or time-based value `<N><s|m|h>` where <N> is any"
            "positive integer and `s`, `m`, `h` are unit of time in seconds, "
            "minutes, hours respectively. Examples of valid values: `3600s`, `60m`,"
            " `1h`."
        )
    value = int(match.group("value"))
    suffix = match.group("suffix")
    value *= {"m": 60, "h": 3600}.get(suffix, 1)
    return IterationsPerLoopCounter(value, "seconds" if suffix else "count")


class InputPipelineConfig(enum.IntEnum):
    """How `input_fn` is deployed; see `TPUConfig.per_host_input_for_training`.

    The members are upstream's ints (`InputPipelineConfig.PER_HOST_V2 == 3`): a program may pass either.

    >>> InputPipelineConfig(3) is InputPipelineConfig.PER_HOST_V2
    True
    """

    PER_SHARD_V1 = 1
    PER_HOST_V1 = 2
    PER_HOST_V2 = 3
    BROADCAST = 4
    SLICED = 5


def as_input_pipeline_config(value: Any) -> Any:
    """`value` as an `InputPipelineConfig` member when it is one of their ints (`True`/`False` and other values are
    returned as they are)."""
    if isinstance(value, bool):
        return value
    try:
        return InputPipelineConfig(value)
    except (ValueError, TypeError):
        return value


def input_pipeline_config_name(value: Any) -> str:
    """How error messages name an input configuration, e.g. `InputPipelineConfig.PER_SHARD_V1 (1)`."""
    member = as_input_pipeline_config(value)
    if not isinstance(member, InputPipelineConfig):
        return repr(value)
    return "InputPipelineConfig.{} ({})".format(member.name, int(member))


class TPUConfig(
    collections.namedtuple(
        "TPUConfig",
        [
            "iterations_per_loop",
            "num_shards",
            "num_cores_per_replica",
            "per_host_input_for_training",
            "tpu_job_name",
            "initial_infeed_sleep_secs",
            "input_partition_dims",
            "eval_training_input_configuration",
            "experimental_host_call_every_n_steps",
            "experimental_allow_per_host_v2_parallel_get_next",
            "experimental_feed_hook",
        ],
    )
):
    """TPU related configuration required by `TPUEstimator`.

    Every upstream field is accepted. Off a TPU:

    * `iterations_per_loop`: steps per `Session.run` (an in-graph loop), or a time `'30s'`/`'2m'`/`'1h'` from
      which the loop length is sized using the measured step time.
    * `num_shards`: the number of replicas. Unlike upstream (where it is ignored) it decides the shard count;
      default: the number of visible GPUs, else 1. The environment variable `TPU_ESTIMATOR_NUM_SHARDS`
      overrides it.
    * `num_cores_per_replica` (model parallelism) and `input_partition_dims` (spatial partitioning) need a TPU's
      XLA SPMD partitioner: values other than `None`/1 are rejected when the estimator runs on shards.
    * `tpu_job_name`: on a cluster (docs/DISTRIBUTED.md), the job whose tasks are the hosts (default `worker`, or
      the cluster's only job); without a cluster, shards run in this process.
    * `initial_infeed_sleep_secs`: the infeed thread sleeps this long before its first enqueue.
    * `experimental_feed_hook`: a `SessionRunHook` class replacing our infeed hook; it is constructed with the
      same arguments as upstream's (`ctx, enqueue_ops, dequeue_ops, ...`) only on a TPU, so it is rejected here.
    """

    def __new__(
        cls,
        iterations_per_loop=2,
        num_shards=None,
        num_cores_per_replica=None,
        per_host_input_for_training=True,
        tpu_job_name=None,
        initial_infeed_sleep_secs=None,
        input_partition_dims=None,
        eval_training_input_configuration=InputPipelineConfig.PER_HOST_V1,
        experimental_host_call_every_n_steps=1,
        experimental_allow_per_host_v2_parallel_get_next=False,
        experimental_feed_hook=None,
    ):
        parse_iterations_per_loop(iterations_per_loop)
        if num_shards is not None:
            check_positive_integer(num_shards, "TPUConfig num_shards")
        if input_partition_dims is not None:
            if len(input_partition_dims) != 1 and len(input_partition_dims) != 2:
                raise ValueError("input_partition_dims must be a list/tuple with one or two elements.")
            if as_input_pipeline_config(per_host_input_for_training) is not InputPipelineConfig.PER_HOST_V2:
                raise ValueError("input_partition_dims is only supported in PER_HOST_V2 mode.")
            if num_cores_per_replica is None:
                raise ValueError("input_partition_dims requires setting num_cores_per_replica.")
        if num_cores_per_replica is not None:
            if num_cores_per_replica not in [1, 2, 4, 8, 16, 32, 64, 128]:
                raise ValueError(
                    "num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64, 128; got {}".format(
                        str(num_cores_per_replica)
                    )
                )
        if eval_training_input_configuration not in [InputPipelineConfig.PER_HOST_V1, InputPipelineConfig.SLICED]:
            raise ValueError(
                "eval_training_input_configuration must be PER_HOST_V1 or SLICED; got {}".format(
                    str(eval_training_input_configuration)
                )
            )
        if per_host_input_for_training is False:
            per_host_input_for_training = InputPipelineConfig.PER_SHARD_V1
        elif per_host_input_for_training is True:
            per_host_input_for_training = InputPipelineConfig.PER_HOST_V1
        per_host_input_for_training = as_input_pipeline_config(per_host_input_for_training)
        eval_training_input_configuration = as_input_pipeline_config(eval_training_input_configuration)
        if initial_infeed_sleep_secs:
            check_positive_integer(initial_infeed_sleep_secs, "TPUConfig initial_infeed_sleep_secs")
        check_positive_integer(experimental_host_call_every_n_steps, "TPUConfig experimental_host_call_every_n_steps")
        tpu_job_name = tpu_job_name or _tpu_job_name_from_tf_config()
        return super(TPUConfig, cls).__new__(
            cls,
            iterations_per_loop=iterations_per_loop,
            num_shards=num_shards,
            num_cores_per_replica=num_cores_per_replica,
            per_host_input_for_training=per_host_input_for_training,
            tpu_job_name=tpu_job_name,
            initial_infeed_sleep_secs=initial_infeed_sleep_secs,
            input_partition_dims=input_partition_dims,
            eval_training_input_configuration=eval_training_input_configuration,
            experimental_host_call_every_n_steps=experimental_host_call_every_n_steps,
            experimental_allow_per_host_v2_parallel_get_next=(experimental_allow_per_host_v2_parallel_get_next),
            experimental_feed_hook=experimental_feed_hook,
        )


def check_training_input_configuration(tpu_config: "TPUConfig") -> None:
    """Raises when `per_host_input_for_training` is SLICED, which only applies to evaluation and prediction.

    Upstream trains such a configuration as PER_HOST_V1 without a word; here `train()` refuses it (evaluation and
    prediction with it keep working, as SLICED).

    Raises:
      ValueError: `tpu_config.per_host_input_for_training` is `InputPipelineConfig.SLICED`.
    """
    if tpu_config.per_host_input_for_training == InputPipelineConfig.SLICED:
        raise ValueError(
            "TPUConfig per_host_input_for_training=InputPipelineConfig.SLICED ({}) cannot be used for training: "
            "SLICED is an evaluation/prediction input configuration. Train with PER_HOST_V1, PER_HOST_V2, "
            "PER_SHARD_V1 or BROADCAST, and set eval_training_input_configuration=InputPipelineConfig.SLICED to "
            "evaluate with it.".format(int(InputPipelineConfig.SLICED))
        )


def _tpu_job_name_from_tf_config() -> Optional[str]:
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    return tf_config.get("service", {}).get("tpu_worker_job_name")


def _is_host_process_tf_config(job_name: Optional[str]) -> bool:
    """Whether `TF_CONFIG` makes this process one of the hosts: its task is of the hosts' job and the cluster has no
    `chief` (the layout of TensorFlow's multi-worker training, where worker 0 is the chief)."""
    spec, task = cluster_lib.tf_config_cluster_spec(), cluster_lib.tf_config_task()
    if spec is None or task is None or "chief" in spec.jobs:
        return False
    return task[0] == (job_name or cluster_lib.DEFAULT_JOB)


@contextlib.contextmanager
def _tf_config_hidden() -> Iterator[None]:
    """`TF_CONFIG` unset within, restored after: the one process-wide patch of our `RunConfig`.

    The Estimator's `RunConfig` wants a `chief` task in a `TF_CONFIG` cluster; a cluster of hosts that each run the
    program has none (worker 0 is the chief), so the base class is built without it and the hosts' fields are set
    from the cluster afterwards.
    """
    saved = os.environ.pop("TF_CONFIG", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TF_CONFIG"] = saved


class RunConfig(_estimator_lib.BaseRunConfig):
    """`tf.estimator.RunConfig` with a `TPUConfig`; arranges one session device per shard.

    Args:
      tpu_config: the `TPUConfig`; default `TPUConfig()`.
      evaluation_master: address of the master for evaluation; defaults to `master`.
      master: address of the master for training ('' or None: in-process).
      cluster: a `tf.distribute.cluster_resolver.ClusterResolver` (e.g. `TPUClusterResolver`). A non-empty
        cluster spec makes the tasks of `TPUConfig.tpu_job_name` the hosts of the shards (docs/DISTRIBUTED.md);
        so do `master='grpc://...'` with `session_config.cluster_def`, and a `TF_CONFIG` cluster with that job.
      xla_compile_shards: compile each shard's computation (the ops `model_fn` builds on the shard) with XLA, as
        a TPU would. Off by default: on CPUs, TensorFlow's own kernels are usually as fast (see BENCHMARKS.md).
      **kwargs: every `tf.estimator.RunConfig` argument.

    Raises:
      ValueError: both `master` and `cluster` are set, or `cluster` and `session_config.cluster_def`.
    """

    def __init__(
        self, tpu_config=None, evaluation_master=None, master=None, cluster=None, xla_compile_shards=False, **kwargs
    ):
        job_name = (tpu_config or TPUConfig()).tpu_job_name
        host_process = _is_host_process_tf_config(job_name)
        if host_process:
            # The program's own `cluster=`/`master=` (e.g. `TPUClusterResolver(FLAGS.tpu)`) mean this job, or fail.
            cluster_lib.check_names_this_job(
                cluster, master, kwargs.get("session_config"), cluster_lib.tf_config_cluster_spec(), job_name
            )
        user_cluster, cluster = cluster, (None if host_process else cluster)
        master = None if host_process else master
        with _tf_config_hidden() if host_process else contextlib.nullcontext():
            super(RunConfig, self).__init__(**kwargs)
        self._xla_compile_shards = bool(xla_compile_shards)
        self._tpu_config = tpu_config or TPUConfig()
        self._cluster = user_cluster
        if master is not None:
            if cluster is not None:
                raise ValueError("Both master and cluster are set.")
            self._master = master
        elif cluster:
            self._master = cluster.master()
        if evaluation_master is not None:
            self._evaluation_master = evaluation_master
        elif not self._evaluation_master and self.task_type != _estimator_lib.TaskType.EVALUATOR:
            self._evaluation_master = self._master
        if cluster:
            self._cluster_spec = cluster.cluster_spec()
            if self._session_config is None:
                self._session_config = tf.compat.v1.ConfigProto(allow_soft_placement=True, isolate_session_state=True)
            if self._session_config.HasField("cluster_def"):
                raise ValueError("You cannot provide a ClusterResolver and session_config.cluster_def.")
            if self._cluster_spec:
                self._session_config.cluster_def.CopyFrom(self._cluster_spec.as_cluster_def())
        self._tpu_cluster = cluster_lib.from_run_config(
            cluster,
            master,
            None if host_process else kwargs.get("session_config"),
            cluster_lib.tf_config_cluster_spec() if cluster is None else None,
            self._tpu_config.tpu_job_name,
            cluster_lib.tf_config_task() if cluster is None else None,
        )
        self._shard_layouts = {}
        if self._tpu_cluster is not None:
            # The client talks to the cluster through task 0's master service, a host's process through its own
            # (see cluster.py).
            self._master = self._tpu_cluster.target
            if evaluation_master is None:
                self._evaluation_master = self._tpu_cluster.target
            if self._tpu_cluster.process_per_host:
                self._set_host_process_fields(self._tpu_cluster)

    def _set_host_process_fields(self, cluster: cluster_lib.Cluster) -> None:
        """This process is host `cluster.this_host`: its task, chief-ness (host 0), and its server, started now."""
        self._cluster_spec = tf.train.ClusterSpec({cluster.job: list(cluster.addresses)})
        self._task_type = cluster.job
        self._task_id = cluster.this_host
        self._is_chief = cluster.is_chief
        self._num_worker_replicas = cluster.num_hosts
        self._global_id_in_cluster = cluster.this_host
        configured = devices_lib.configured_num_shards(self._tpu_config.num_shards)
        cluster_lib.host_server(cluster, (configured or cluster.num_hosts) // cluster.num_hosts)

    def _maybe_overwrite_session_config_for_distributed_training(self):
        # Shards run in-graph: no device filters (as upstream).
        pass

    @property
    def evaluation_master(self):
        return self._evaluation_master

    @property
    def master(self):
        return self._master

    @property
    def tpu_config(self) -> TPUConfig:
        return self._tpu_config

    @property
    def cluster(self):
        return self._cluster

    @property
    def tpu_cluster(self) -> Optional[cluster_lib.Cluster]:
        """The hosts the shards run on (`cluster.Cluster`), or None when they run in this process."""
        return getattr(self, "_tpu_cluster", None)

    def shard_layout(self) -> cluster_lib.ShardLayout:
        """The shard devices and host devices; on a cluster, discovered from the workers (once per config).

        Raises:
          cluster.ClusterError: the cluster cannot be reached.
          ValueError: the shards do not divide over the hosts' devices.
        """
        tpu_config = self._tpu_config
        cluster = self.tpu_cluster
        if cluster is None:
            num_shards = self.num_shards
            return cluster_lib.local_layout(devices_lib.shard_devices(num_shards), devices_lib.HOST_DEVICE)
        configured = devices_lib.configured_num_shards(tpu_config.num_shards)
        if configured not in self._shard_layouts:
            devices = cluster_lib.discover_devices(cluster, self.session_config)
            num_shards = configured or sum(len(d) for d in devices.values())
            self._shard_layouts[configured] = cluster_lib.cluster_layout(cluster, num_shards, devices)
        return self._shard_layouts[configured]

    @property
    def xla_compile_shards(self) -> bool:
        """Whether shard computations are compiled with XLA."""
        return self._xla_compile_shards

    @property
    def num_shards(self) -> int:
        """The number of shards (replicas) this configuration runs on."""
        tpu_config = getattr(self, "_tpu_config", None)  # None while the base class initialises.
        if self.tpu_cluster is not None:
            return len(self.shard_layout().devices)
        return devices_lib.resolve_num_shards(tpu_config.num_shards if tpu_config else None)

    @property
    def session_config(self):
        """The user's session config (or the default) with one logical CPU device per shard."""
        base = self._session_config
        if base is None:
            base = _estimator_lib.get_default_session_config()
        if self.tpu_cluster is not None:
            return cluster_lib.session_config(base, self.tpu_cluster)
        return devices_lib.session_config_for_shards(base, self.num_shards)

    def replace(self, **kwargs):
        if "tpu_config" not in kwargs:
            return super(RunConfig, self).replace(**kwargs)
        tpu_config = kwargs.pop("tpu_config")
        new_instance = super(RunConfig, self).replace(**kwargs)
        new_instance._tpu_config = tpu_config
        new_instance._shard_layouts = {}
        return new_instance
