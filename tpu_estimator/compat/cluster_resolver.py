"""A `TPUClusterResolver` for the machine we run on: no Cloud TPU API, no GCE metadata server.

Upstream's resolver asks the Cloud TPU API (or the GCE metadata service) for the workers of the named TPU and
fails without them. Ours accepts any `tpu=` name (a TPU name, a `grpc://` address, `'local'`, `None`) and
describes this process: the master is `''` (an in-process session) and the cluster spec is empty, so
`RunConfig(cluster=resolver)` runs locally. The shards we run on are reported as the TPU cores, so programs that
size their batches from `num_accelerators()` or `get_tpu_system_metadata()` see the shard count.
"""

from typing import Any, Dict, Optional

import tensorflow as tf

from tpu_estimator import devices as devices_lib


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
        """The session target: always `''`, an in-process session."""
        del task_type, task_id, rpc_layer
        return ""

    def get_master(self) -> str:
        """Same as `master()`."""
        return self.master()

    def get_job_name(self) -> str:
        return self.task_type

    def get_coordination_service_leader(self) -> str:
        return "/job:" + self.get_job_name() + "/task:0"

    def cluster_spec(self) -> tf.train.ClusterSpec:
        """An empty `ClusterSpec`: everything runs in this process."""
        return tf.train.ClusterSpec({})

    def num_accelerators(
        self, task_type: Optional[str] = None, task_id: Optional[int] = None, config_proto=None
    ) -> Dict[str, int]:
        """`{'TPU': number of shards}`: the shards stand in for the TPU cores of one worker.

        The shard count is `$TPU_ESTIMATOR_NUM_SHARDS`, else the number of visible GPUs, else 1 (a program's
        `TPUConfig(num_shards=...)` still decides for its estimator).
        """
        del task_type, task_id, config_proto
        return {"TPU": devices_lib.resolve_num_shards(None)}

    def get_tpu_system_metadata(self):
        """A `tf.tpu.experimental.TPUSystemMetadata` describing the shards as the cores of one host."""
        num_cores = self.num_accelerators()["TPU"]
        return tf.tpu.experimental.TPUSystemMetadata(
            num_cores=num_cores, num_hosts=1, num_of_cores_per_host=num_cores, topology=None, devices=[]
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
        return "TPUClusterResolver(tpu={!r}, local)".format(self._tpu)

    def __deepcopy__(self, memo):
        return self
