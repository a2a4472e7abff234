"""A TF2 TPU program on several hosts: one client, as on a TPU pod.

On a TPU pod, one program (the client) drives every host's TPU cores: the hosts run TPU servers, not the program.
Here, when `$TF_CONFIG` names several tasks of this process's job (`tpu-estimator-hosts --num_hosts=N -- ...`, or
one process per machine with its own `TF_CONFIG`), the first call of the program into the TF2 TPU surface
(`experimental_connect_to_cluster`, `initialize_tpu_system` or `TPUStrategy`) decides each process's role:

* task 0 is the client: it waits for the other hosts' servers, connects to the cluster
  (`tf.config.experimental_connect_to_cluster`, TensorFlow's remote eager execution) and goes on with the program;
  its `TPUStrategy` replicas are the shard devices of every host, host-major (replica `r` is device `r % n` of host
  `r // n`), so embedding tables are sharded over every host and dense gradients are all-reduced by TensorFlow's
  collectives across hosts. The input pipeline is the client's, as `MirroredStrategy` has one, so the global batch
  of each step is the one of a single host.
* every other task becomes a host: it starts its server with its `n` shard devices and serves until the client's
  server goes away, then the process ends with status 0 (the program's code after that call does not run there,
  as a TPU host runs no program).
"""

import os
import sys
import time
from typing import List, Optional

import tensorflow as tf

from tpu_estimator.hosts import cluster as cluster_lib
from tpu_estimator.hosts import shard_devices as devices_lib

# How long a host waits for the client's server to appear, and the client for the hosts' servers.
START_WAIT_SECS = 300.0
_POLL_SECS = 0.2

_joined: Optional[List[str]] = None  # The client's shard devices of every host, once joined.


def host_job() -> Optional[cluster_lib.Cluster]:
    """The hosts named by `$TF_CONFIG` when there are several of this process's job, else None.

    Raises:
      ValueError: `TF_CONFIG` names a task that its cluster does not have.
    """
    spec = cluster_lib.tf_config_cluster_spec()
    task = cluster_lib.tf_config_task()
    if spec is None or task is None:
        return None
    job, index = task
    if job not in spec.jobs:
        raise ValueError(f"TF_CONFIG: task type {job!r} is not a job of its cluster ({spec.jobs}).")
    addresses = tuple(spec.job_tasks(job))
    if len(addresses) < 2:
        return None
    if not 0 <= index < len(addresses):
        raise ValueError(f"TF_CONFIG: task {index} of job {job!r}, which has {len(addresses)} tasks.")
    return cluster_lib.Cluster(job, addresses, "grpc://" + addresses[index], this_host=index)


def _wait_for(cluster: cluster_lib.Cluster, hosts: List[int], what: str) -> None:
    deadline = time.monotonic() + START_WAIT_SECS
    while True:
        missing = [h for h in cluster_lib.unreachable_hosts(cluster, timeout_secs=_POLL_SECS) if h in hosts]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise cluster_lib.ClusterError(
                "TPUStrategy on {} hosts: {} {} did not start within {:.0f} s ({}).".format(
                    cluster.num_hosts,
                    ", ".join(cluster.describe(h) for h in missing),
                    what,
                    START_WAIT_SECS,
                    "is its process running?",
                )
            )
        time.sleep(_POLL_SECS)


def _serve(cluster: cluster_lib.Cluster, num_shards: int) -> None:
    """Runs this process as a host until the client's server goes away; then ends the process (status 0)."""
    config = tf.compat.v1.ConfigProto(device_count={"CPU": max(1, num_shards)})
    spec = tf.train.ClusterSpec({cluster.job: list(cluster.addresses)})
    server = tf.distribute.Server(spec, job_name=cluster.job, task_index=cluster.this_host, config=config, start=True)
    print(
        "tpu-estimator-run: host {} serves its {} shard{} to the program on host 0 (one client, as on a TPU pod)".format(
            cluster.this_host, num_shards, "s" if num_shards != 1 else ""
        ),
        flush=True,
    )
    _wait_for(cluster, [0], "the client (host 0's program)")
    while 0 not in cluster_lib.unreachable_hosts(cluster, timeout_secs=2.0):
        time.sleep(0.5)
    del server
    sys.stdout.flush()
    sys.stderr.flush()
    # The program ended on the client: this host has nothing left to run. Without Python's clean-up, which would
    # wait on the server's threads.
    os._exit(0)


def shard_devices(num_shards: int, connect) -> Optional[List[str]]:
    """The shard devices of every host for the client, after joining the hosts; None without several hosts.

    On a host other than task 0 this does not return (see the module docstring).

    Args:
      num_shards: the shards of each host.
      connect: TensorFlow's `experimental_connect_to_cluster`.

    Returns:
      `/job:<job>/replica:0/task:<h>/device:<CPU or GPU>:<i>` for every host `h` and shard `i`, host-major.

    Raises:
      ClusterError: a host did not start in time.
    """
    global _joined
    if _joined is not None:
        return _joined
    cluster = host_job()
    if cluster is None:
        return None
    if cluster.this_host != 0:
        _serve(cluster, num_shards)
    _wait_for(cluster, list(range(1, cluster.num_hosts)), "host")
    connect(
        tf.train.ClusterSpec({cluster.job: list(cluster.addresses)}),
        job_name=cluster.job,
        task_index=0,
    )
    local = devices_lib.shard_devices(num_shards)
    _joined = [
        "/job:{}/replica:0/task:{}{}".format(cluster.job, host, device)
        for host in range(cluster.num_hosts)
        for device in local
    ]
    return _joined
