"""A `TPUClusterResolver` for the machines we run on: no Cloud TPU API, no GCE metadata server.

Upstream's resolver asks the Cloud TPU API (or the GCE metadata service) for the workers of the named TPU and
fails without them. Ours accepts the same arguments:
- `tpu='grpc://host:port'` or a list of such addresses names a cluster: the tasks of job `job_name` (default
  `worker`), in the order given, each a `tf.distribute.Server` (e.g. `tpu-estimator-server`). `RunConfig(cluster=
  resolver)` then trains on those hosts (`docs/DISTRIBUTED.md`), the master is the first address, and the shard
  count is read from the workers' devices, as upstream reads the TPU's cores.
  Under `tpu-estimator-run` (which sets `TPU_ESTIMATOR_TPU_ADDRESSES=ignore` unless it is set) the addresses
  are recorded and ignored: a program's `--tpu=grpc://...` named the TPU it ran on before.
- Any other `tpu=` (a TPU name, `'local'`, `None`) describes this process: the master is `''` (an in-process
  session) and the cluster spec is empty, so `RunConfig(cluster=resolver)` runs locally; the shards we run on are
  reported as the TPU cores, so programs that size their batches from `num_accelerators()` or
  `get_tpu_system_metadata()` see the shard count.
"""

import os
from typing import Any, Dict, List, Optional

import tensorflow as tf

from tpu_estimator.hosts import cluster as cluster_lib
from tpu_estimator.hosts import shard_devices as devices_lib

_GRPC = "grpc://"
# `cluster` (default): grpc:// addresses given as `tpu=` are the cluster's workers; `ignore`: run in this process.
TPU_ADDRESSES_ENV = "TPU_ESTIMATOR_TPU_ADDRESSES"


def _addresses_name_a_cluster() -> bool:
    value = os.environ.get(TPU_ADDRESSES_ENV, "cluster")
    if value not in ("cluster", "ignore"):
        raise ValueError("{}={!r}: expected 'cluster' or 'ignore'.".format(TPU_ADDRESSES_ENV, value))
    return value == "cluster"


def _grpc_addresses(tpu: Any) -> List[str]:
    """`host:port` of each `grpc://` address in `tpu` (a string or a list); [] for a TPU name.

    Raises:
      ValueError: a list mixes `grpc://` addresses with names, or an address has no `host:port`.
    """
    names = list(tpu) if isinstance(tpu, (list, tuple)) else [tpu]
    names = [n.decode("utf-8") if isinstance(n, bytes) else n for n in names]
    grpc = [n for n in names if isinstance(n, str) and n.startswith(_GRPC)]
    if not grpc:
        return []
    if len(grpc) != len(names):
        raise ValueError(
            "TPUClusterResolver(tpu={!r}): give either grpc://host:port addresses (a cluster of workers) or one TPU "
            "name, not both.".format(tpu)
        )
    addresses = [n[len(_GRPC) :] for n in grpc]
    for name, address in zip(grpc, addresses):
        if ":" not in address or not address.rsplit(":", 1)[1].isdigit():
            raise ValueError("TPUClusterResolver(tpu=...): {!r} is not a grpc://host:port address.".format(name))
    return addresses


class TPUClusterResolver(tf.distribute.cluster_resolver.ClusterResolver):
    """Local stand-in for `tf.distribute.cluster_resolver.TPUClusterResolver`.

    Args:
      tpu: the TPU name or address the program passes; recorded, never contacted.
      zone: ignored (recorded).
      project: ignored (recorded).
      job_name: the job name reported by `get_job_name()` and `task_type`.
      coordinator_name: ignored (no coordinator server is started).
      coordinator_address: ignored.
      credentials: ignored.
      service: ignored.
      discovery_url: ignored.
    """

    def __init__(
        self,
        tpu=None,
        zone: Optional[str] = None,
        project: Optional[str] = None,
        job_name: str = "worker",
        coordinator_name: Optional[str] = None,
        coordinator_address: Optional[str] = None,
        credentials: Any = "default",
        service: Any = None,
        discovery_url: Optional[str] = None,
    ):
        del credentials, service, discovery_url
        self._workers = _grpc_addresses(tpu) if _addresses_name_a_cluster() else []
        if isinstance(tpu, (list, tuple)):
            tpu = tpu[0] if tpu else None
        if isinstance(tpu, bytes):
            tpu = tpu.decode("utf-8")
        self._tpu = tpu or "local"
        self._zone = zone
        self._project = project
        self._coordinator_name = coordinator_name
        self._coordinator_address = coordinator_address
        self._tpu_topology = None
        self.task_type = job_name
        self.task_id = 0
        self.rpc_layer = None

    @staticmethod
    def connect(tpu=None, zone: Optional[str] = None, project: Optional[str] = None) -> "TPUClusterResolver":
        """Returns a resolver; there is no remote TPU system to connect to or initialise."""
        return TPUClusterResolver(tpu, zone, project)

    def __enter__(self):
        return self

    def __exit__(self, *unused_exc_info):
        return False

    @property
    def tpu(self) -> str:
        """The `tpu` argument the resolver was created with (`'local'` when none)."""
        return self._tpu

    def master(
        self, task_type: Optional[str] = None, task_id: Optional[int] = None, rpc_layer: Optional[str] = None
    ) -> str:
        """The session target: the first worker's `grpc://` address on a cluster, else `''` (in-process).

        Args:
          task_type: a job of the cluster (only `job_name`), or None.
          task_id: the task whose address to return (default 0).
          rpc_layer: the scheme (default `grpc`).

        Raises:
          ValueError: `task_type` or `task_id` names no task of the cluster.
        """
        if not self._workers:
            return ""
        if task_type not in (None, self.task_type):
            raise ValueError(
                "TPUClusterResolver: no job {!r}; the cluster's job is {!r}.".format(task_type, self.task_type)
            )
        task = task_id or 0
        if not 0 <= task < len(self._workers):
            raise ValueError(
                "TPUClusterResolver: no task {} of job {!r} ({} workers).".format(
                    task, self.task_type, len(self._workers)
                )
            )
        return "{}://{}".format(rpc_layer or "grpc", self._workers[task])

    def get_master(self) -> str:
        """Same as `master()`."""
        return self.master()

    def get_job_name(self) -> str:
        return self.task_type

    def get_coordination_service_leader(self) -> str:
        return "/job:" + self.get_job_name() + "/task:0"

    def cluster_spec(self) -> tf.train.ClusterSpec:
        """`{job_name: [worker addresses]}` for `grpc://` addresses, else an empty `ClusterSpec` (this process)."""
        if self._workers:
            return tf.train.ClusterSpec({self.task_type: list(self._workers)})
        return tf.train.ClusterSpec({})

    def _cluster_devices(self) -> Dict[int, List[str]]:
        cluster = cluster_lib.Cluster(self.task_type, tuple(self._workers), self.master())
        return cluster_lib.discover_devices(cluster, cluster_lib.session_config(tf.compat.v1.ConfigProto()))

    def num_accelerators(
        self, task_type: Optional[str] = None, task_id: Optional[int] = None, config_proto=None
    ) -> Dict[str, int]:
        """`{'TPU': number of shards}`: the shards stand in for the TPU cores of one worker.

        On a cluster: the shard devices of task 0 (its GPUs, else its CPUs), read from the running workers. Else
        `$TPU_ESTIMATOR_NUM_SHARDS`, the number of visible GPUs, or 1 (a program's `TPUConfig(num_shards=...)`
        still decides for its estimator).

        Raises:
          tpu_estimator.hosts.cluster.ClusterError: the cluster cannot be reached.
        """
        del task_type, task_id, config_proto
        if self._workers:
            return {"TPU": len(self._cluster_devices()[0])}
        return {"TPU": devices_lib.resolve_num_shards(None)}

    def get_tpu_system_metadata(self):
        """A `tf.tpu.experimental.TPUSystemMetadata`: the shard devices as TPU cores, of every worker on a cluster
        (read from the running workers), else of this host."""
        num_hosts = max(1, len(self._workers))
        per_host = self.num_accelerators()["TPU"]
        return tf.tpu.experimental.TPUSystemMetadata(
            num_cores=per_host * num_hosts,
            num_hosts=num_hosts,
            num_of_cores_per_host=per_host,
            topology=None,
            devices=[],
        )

    def set_tpu_topology(self, serialized_tpu_topology: bytes) -> None:
        """Records a serialized `TopologyProto` (kept for API compatibility)."""
        self._tpu_topology = serialized_tpu_topology

    @property
    def tpu_hardware_feature(self):
        """None: there is no TPU topology."""
        return None

    @property
    def environment(self) -> str:
        return ""

    def __repr__(self) -> str:
        if self._workers:
            return "TPUClusterResolver(job={!r}, workers={!r})".format(self.task_type, self._workers)
        return "TPUClusterResolver(tpu={!r}, local)".format(self._tpu)

    def __deepcopy__(self, memo):
        return self
