"""The cluster a `TPUEstimator` runs on: hosts, session target, and the shard devices of every host.

A cluster is a set of `tf.distribute.Server` tasks of one job (default `worker`); each is a host. It runs one of
two ways:

* one client (the Python process calling `train()`) outside the cluster, like a TPU client: it connects to the
  master service of task 0 (`grpc://<task 0>`) and builds one graph whose shards are placed on
  `/job:<job>/task:<i>/device:<GPU or CPU>:<j>`; the hosts run plain servers (`tpu-estimator-server`);
* one process per host (`Cluster.this_host` is set: `TF_CONFIG`'s task is a task of the hosts' job): every host runs the program, starts its own server in-process (`host_server`) and builds only its own
  replicas; dense gradients are summed across hosts by collective ops (`collectives.py`), embedding tables stay
  sharded over all hosts (docs/DISTRIBUTED.md).

The workers were booted with the cluster spec, so a session on any task reaches every other task: the session
config carries no `cluster_def` (TensorFlow refuses a session `cluster_def` naming the task that serves the session:
"The ClusterSpec names the job and task index to be the same names that were provided when the server booted").

Without a cluster nothing here is used and shards are this process's devices (`devices.py`).
"""

import contextlib
import dataclasses
import json
import os
import re
import socket
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import tensorflow as tf

from tpu_estimator import _environment, _tf_internal

# Deadline of session creation and of every Session.run on a cluster, unless the session config sets one: a dead
# or unreachable worker surfaces as an error within a minute instead of a hang.
DEFAULT_OPERATION_TIMEOUT_MS = 40_000
# How long closing a session on the cluster may take before it is left to end in the background (a healthy close
# takes milliseconds; on a lost task 0 it would wait for that task up to the session's deadline).
SESSION_CLOSE_TIMEOUT_SECS = 5.0
DEFAULT_JOB = "worker"
_GRPC = "grpc://"


class ClusterError(RuntimeError):
    """The cluster cannot be reached or does not have the devices the shards need."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The hosts of a `TPUEstimator` on a cluster.

    Attributes:
      job: the job whose tasks are the hosts (`TPUConfig.tpu_job_name`, default `worker` or the only job).
      addresses: `host:port` of every task of the job, in task order.
      target: the session target (`grpc://...`): task 0's unless the user named a master; with one process per
        host, this process's own task.
      this_host: with one process per host, the host this process is (its task index); None when this process is
        the one client of every host.
    """

    job: str
    addresses: Tuple[str, ...]
    target: str
    this_host: Optional[int] = None

    @property
    def process_per_host(self) -> bool:
        """Whether every host runs the program in a process of its own (between-graph)."""
        return self.this_host is not None

    @property
    def is_chief(self) -> bool:
        """Whether this process writes checkpoints, summaries and exports: the client, or host 0's process."""
        return self.this_host in (None, 0)

    @property
    def num_hosts(self) -> int:
        return len(self.addresses)

    def task(self, host: int) -> str:
        """`/job:<job>/task:<host>`."""
        return "/job:{}/task:{}".format(self.job, host)

    def host_device(self, host: int) -> str:
        """The CPU of a host, where its input pipeline and host work run."""
        return "{}/device:CPU:0".format(self.task(host))

    def describe(self, host: int) -> str:
        """`/job:worker/task:1 (127.0.0.1:2223)`, for error messages."""
        return "{} ({})".format(self.task(host), self.addresses[host])


def _grpc(address: str) -> str:
    return address if "://" in address else _GRPC + address


def _job_of(cluster_spec: tf.train.ClusterSpec, job_name: Optional[str]) -> str:
    jobs = list(cluster_spec.jobs)
    if job_name:
        if job_name not in jobs:
            raise ValueError(
                "TPUConfig.tpu_job_name={!r} is not a job of the cluster (jobs: {}): set tpu_job_name to the job "
                "whose tasks are the hosts.".format(job_name, sorted(jobs))
            )
        return job_name
    if DEFAULT_JOB in jobs:
        return DEFAULT_JOB
    hosts = [j for j in jobs if j not in ("chief", "evaluator", "ps")]
    if len(hosts) == 1:
        return hosts[0]
    raise ValueError(
        "The cluster has jobs {} and none is named {!r}: set TPUConfig.tpu_job_name to the job whose tasks are the "
        "hosts.".format(sorted(jobs), DEFAULT_JOB)
    )


def _addresses(cluster_spec: tf.train.ClusterSpec, job: str) -> Tuple[str, ...]:
    tasks = cluster_spec.job_tasks(job)
    if not tasks or any(address is None for address in tasks):
        raise ValueError(
            "Job {!r} of the cluster must list the address of every task 0..n-1, got {}.".format(job, tasks)
        )
    return tuple(tasks)


def from_run_config(
    resolver,
    master: Optional[str],
    session_config: Optional[tf.compat.v1.ConfigProto],
    tf_config_cluster: Optional[tf.train.ClusterSpec],
    job_name: Optional[str],
    tf_config_task: Optional[Tuple[str, int]] = None,
) -> Optional[Cluster]:
    """The cluster named by a `RunConfig`, or None for a run in this process.

    In order: `cluster=<ClusterResolver>` (its spec; its `master()` or task 0 as target), `master='grpc://...'`
    with `session_config.cluster_def`, `TF_CONFIG`'s cluster when it has the hosts' job (the target is task 0). A cluster whose spec is empty (e.g. the local `TPUClusterResolver`) is no cluster.

    Args:
      resolver: `RunConfig(cluster=...)`, or None.
      master: `RunConfig(master=...)`, or None.
      session_config: the user's session config, or None.
      tf_config_cluster: the cluster spec of `TF_CONFIG`, or None.
      job_name: `TPUConfig.tpu_job_name`, or None.
      tf_config_task: `TF_CONFIG`'s `(task type, index)`, or None. A task of the hosts' job makes this process
        that host (one process per host). A resolver always describes the hosts of this process as their client.

    Raises:
      ValueError: no job can be chosen, the job's tasks have no addresses, or this process's task index is not one
        of the job's.
    """
    spec, target, task = None, None, None
    if resolver is not None:
        spec = resolver.cluster_spec()
        target = resolver.master() or None
    elif session_config is not None and session_config.HasField("cluster_def"):
        spec = tf.train.ClusterSpec(session_config.cluster_def)
        target = master or None
    elif tf_config_cluster is not None and (job_name or DEFAULT_JOB) in tf_config_cluster.jobs:
        # A TF_CONFIG without the hosts' job (e.g. only a chief) describes no cluster of hosts.
        spec = tf_config_cluster
        task = tf_config_task
    if spec is None or not spec.jobs:
        return None
    job = _job_of(spec, job_name)
    addresses = _addresses(spec, job)
    if task is not None and task[0] == job:
        check_host_addresses(job, addresses)
        if not 0 <= task[1] < len(addresses):
            raise ValueError(
                "This process is task {} of job {!r}, but the cluster lists {} task(s) of that job: set the task index "
                "(TF_CONFIG's task.index) to one of 0..{}.".format(task[1], job, len(addresses), len(addresses) - 1)
            )
        return Cluster(job=job, addresses=addresses, target=_grpc(addresses[task[1]]), this_host=task[1])
    if not target or not target.startswith(_GRPC):
        target = _grpc(addresses[0])
    return Cluster(job=job, addresses=addresses, target=target)


def check_host_addresses(job: str, addresses: Sequence[str]) -> None:
    """With one process per host, every host's address is `host:port` with a port in 1..65535.

    TensorFlow's server would listen on the port modulo 65536 (70000 -> 4464), or on any free port for 0, which no
    other host could know: the job would wait for an address nobody listens on.

    Raises:
      ValueError: naming the task and its address.
    """
    for task, address in enumerate(addresses):
        host, sep, port = str(address).rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(
                "TF_CONFIG: /job:{}/task:{} has address {!r}: give every host as host:port with a port in 1..65535 "
                "(0, any free port, cannot be known by the other hosts).".format(job, task, address)
            )


def tf_config_cluster_spec() -> Optional[tf.train.ClusterSpec]:
    """The cluster of `$TF_CONFIG`, or None."""
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster")
    return tf.train.ClusterSpec(cluster) if cluster else None


def tf_config_task() -> Optional[Tuple[str, int]]:
    """`$TF_CONFIG`'s `(task type, task index)`, or None."""
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    if not task.get("type"):
        return None
    return task["type"], int(task.get("index", 0))


def _job_addresses(spec: Optional[tf.train.ClusterSpec], job: str) -> Tuple[str, ...]:
    if spec is None or job not in spec.jobs:
        return ()
    return tuple(spec.job_tasks(job))


def check_names_this_job(
    resolver,
    master: Optional[str],
    session_config: Optional[tf.compat.v1.ConfigProto],
    tf_config_spec: tf.train.ClusterSpec,
    job_name: Optional[str],
) -> None:
    """With one process per host (`TF_CONFIG`'s task is a host), checks that a `RunConfig`'s own cluster arguments
    mean this job.

    A TPU program passes `cluster=TPUClusterResolver(FLAGS.tpu)` (and sometimes `master=<its master()>`): on a pod
    that is the TPU the job runs on. Here a resolver with an empty cluster spec (our `TPUClusterResolver` given a
    TPU name, or its `grpc://` addresses ignored under `tpu-estimator-run`) or whose hosts' job lists `TF_CONFIG`'s
    addresses (`TFConfigClusterResolver()`) means this job, as do `master=None/''/'local'` or this host's own
    address. Anything naming other hosts cannot work in this mode.

    Raises:
      ValueError: one line naming the argument and what to change.
    """
    job = job_name or DEFAULT_JOB
    hosts = _job_addresses(tf_config_spec, job)
    task = tf_config_task()
    where = "TF_CONFIG makes this process host {} of job {!r} ({})".format(
        task[1] if task else 0, job, ", ".join(hosts)
    )
    if resolver is not None:
        spec = resolver.cluster_spec()
        if spec.jobs and _job_addresses(spec, job) != hosts:
            raise ValueError(
                "RunConfig(cluster={!r}) names the cluster {}, but {}: pass no cluster= (or a resolver of TF_CONFIG's "
                "cluster), or unset TF_CONFIG to run this process as the one client of those hosts.".format(
                    resolver, spec.as_dict(), where
                )
            )
    own = {_grpc(a) for a in hosts[task[1] : task[1] + 1]} if task and 0 <= task[1] < len(hosts) else set()
    if master not in (None, "", "local") and _grpc(master) not in own:
        raise ValueError(
            "RunConfig(master={!r}) names another session target, but {}: pass no master= (each host's process "
            "runs its sessions on its own server).".format(master, where)
        )
    if session_config is not None and session_config.HasField("cluster_def"):
        spec = tf.train.ClusterSpec(session_config.cluster_def)
        if _job_addresses(spec, job) != hosts:
            raise ValueError(
                "RunConfig(session_config=...) has a cluster_def naming {}, but {}: clear session_config.cluster_def "
                "(TF_CONFIG describes the job).".format(spec.as_dict(), where)
            )


def collective_group_leader(cluster: Cluster) -> str:
    """The task that leads the collective group of one process per host: host 0's."""
    return "/job:{}/replica:0/task:0".format(cluster.job)


def session_config(base: tf.compat.v1.ConfigProto, cluster: Optional[Cluster] = None) -> tf.compat.v1.ConfigProto:
    """The session config on a cluster: no `cluster_def` (the workers know the cluster), deadlines set; with one
    process per host, the collective group's leader."""
    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(base)
    config.ClearField("cluster_def")
    config.allow_soft_placement = True
    if not config.operation_timeout_in_ms:
        config.operation_timeout_in_ms = DEFAULT_OPERATION_TIMEOUT_MS
    if cluster is not None and cluster.process_per_host:
        config.experimental.collective_group_leader = collective_group_leader(cluster)
    return config


_host_servers: Dict[Tuple[str, Tuple[str, ...], int], Any] = {}


def host_server(cluster: Cluster, num_cpu_devices: int) -> Any:
    """This process's `tf.distribute.Server` as host `cluster.this_host` (started on first use, one per process).

    Args:
      cluster: a cluster with one process per host.
      num_cpu_devices: the logical CPU devices the host offers as shards when it has no GPU.

    Returns:
      The running server.

    Raises:
      ClusterError: the server cannot start (e.g. its port is taken), naming the address.
    """
    key = (cluster.job, cluster.addresses, cluster.this_host)
    if key not in _host_servers:
        config = tf.compat.v1.ConfigProto(device_count={"CPU": max(1, num_cpu_devices)})
        config.experimental.collective_group_leader = collective_group_leader(cluster)
        spec = tf.train.ClusterSpec({cluster.job: list(cluster.addresses)})
        try:
            _host_servers[key] = tf.distribute.Server(
                spec, job_name=cluster.job, task_index=cluster.this_host, config=config, start=True
            )
        except (tf.errors.OpError, ValueError) as error:
            raise ClusterError(
                "Cannot start this process's server as host {} ({}: {}): is the port free, and is the address this "
                "machine's?".format(cluster.describe(cluster.this_host), type(error).__name__, error)
            ) from error
        sys.stderr.write(open_port_notice(cluster) + "\n")
        sys.stderr.flush()
        wait_for_every_host_to_listen(cluster)
    return _host_servers[key]


_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def open_port_notice(cluster: Cluster) -> str:
    """What a host's process says on stderr once its server runs: it listens on every interface, and how to keep it
    private.

    TensorFlow's gRPC server cannot be bound to one address (it listens on `0.0.0.0`/`[::]` at its address's port,
    whatever host the address names), also when every host of the job is on this machine's loopback address.
    """
    port = cluster.addresses[cluster.this_host].rpartition(":")[2]
    if all(a.rpartition(":")[0] in _LOOPBACK_HOSTS for a in cluster.addresses):
        private = (
            "every host of this job is on this machine's loopback address, but the server cannot bind loopback "
            "alone: drop the port on other interfaces (iptables -A INPUT -p tcp --dport {} ! -i lo -j DROP)".format(
                port
            )
        )
    else:
        private = (
            "run the hosts on a private network, or allow the port from the job's hosts only (a firewall rule; "
            "docs/DISTRIBUTED.md, 'Keep workers private')"
        )
    return (
        "tpu_estimator: host {}: TensorFlow's gRPC server listens on every interface of this machine at port {} and "
        "runs any graph sent to it, unauthenticated; keep the port private: {}.".format(
            cluster.describe(cluster.this_host), port, private
        )
    )


# How often `wait_for_every_host_to_listen` says which hosts it still waits for.
_LISTEN_REPORT_SECS = 30.0
# How long the hosts of a job of one process per host wait for each other at a call's start (every host's server to
# listen, every host to reach the agreement of `host_agreement.py`), unless the environment variable says otherwise.
HOSTS_WAIT_ENV = "TPU_ESTIMATOR_HOSTS_WAIT_SECS"
DEFAULT_HOSTS_WAIT_SECS = 300.0


def hosts_wait_secs() -> float:
    """How long the hosts wait for each other at a call's start: `$TPU_ESTIMATOR_HOSTS_WAIT_SECS`, default 300.

    Raises:
      ValueError: the variable is not a positive number of seconds.
    """
    return _environment.positive_secs(HOSTS_WAIT_ENV, DEFAULT_HOSTS_WAIT_SECS)


def wait_for_every_host_to_listen(cluster: Cluster, poll_secs: float = 0.2, wait_secs: Optional[float] = None) -> None:
    """Returns once every host's server accepts TCP connections; says every 30 s on stderr which hosts it still waits
    for, and gives up after `wait_secs` (default `hosts_wait_secs()`).

    Nothing may speak gRPC to a host before its server listens: a refused connection puts this process's channel to
    that host into gRPC's reconnect backoff, and a step that then needs it (another host's session reading a tensor
    from it through this process) fails at once with `UnavailableError` ("failed to connect to all addresses"),
    although every host is up by then. So the first session of a job waits here for every host to start.

    Raises:
      ClusterError: a host's server did not listen within `wait_secs` (naming it).
    """
    wait_secs = hosts_wait_secs() if wait_secs is None else wait_secs
    start = time.monotonic()
    next_report = _LISTEN_REPORT_SECS
    while True:
        missing = unreachable_hosts(cluster, timeout_secs=poll_secs)
        if not missing:
            return
        waited = time.monotonic() - start
        if waited >= wait_secs:
            raise ClusterError(
                "Host {}: host {} did not start within {:.0f} s (its server does not accept connections): its "
                "process failed or was never started. Start every host's process with the same TF_CONFIG (its own "
                "output says why it failed), or raise the wait with the environment variable {}.".format(
                    cluster.this_host,
                    ", ".join(cluster.describe(h) for h in missing),
                    wait_secs,
                    HOSTS_WAIT_ENV,
                )
            )
        if waited >= next_report:
            # On stderr: programs set TensorFlow's logger to ERROR, and a user must see why the job does not start.
            sys.stderr.write(
                "tpu_estimator: host {}: waiting for host(s) {} to start their servers ({:d} s so far, at most {:.0f} "
                "s).\n".format(
                    cluster.this_host, ", ".join(cluster.describe(h) for h in missing), int(waited), wait_secs
                )
            )
            sys.stderr.flush()
            next_report += _LISTEN_REPORT_SECS
        time.sleep(poll_secs)


def _unreachable(cluster: Cluster, error: Exception) -> ClusterError:
    return ClusterError(
        "Cannot reach the cluster at {} (job {!r}, hosts {}): {}: {}. Start every worker (`tpu-estimator-server "
        "--cluster=... --task=N`, or a tf.distribute.Server of that job and task) and check the addresses.".format(
            cluster.target,
            cluster.job,
            ", ".join(cluster.describe(h) for h in range(cluster.num_hosts)),
            type(error).__name__,
            str(error).strip().splitlines()[0] if str(error).strip() else "",
        )
    )


def discover_devices(cluster: Cluster, config: tf.compat.v1.ConfigProto) -> Dict[int, List[str]]:
    """Per host, the devices shards may use: its GPUs when it has any, else its CPUs (in device order).

    Raises:
      ClusterError: the cluster cannot be reached within the session deadline, or a host has no device.
    """

    def list_devices():
        with tf.Graph().as_default(), tf.compat.v1.Session(cluster.target, config=config) as session:
            return [d.name for d in session.list_devices()]

    try:
        names = _again_if_hosts_up(cluster, list_devices)
    except tf.errors.OpError as error:
        raise _unreachable(cluster, error) from error
    by_host: Dict[int, Dict[str, List[Tuple[int, str]]]] = {h: {"GPU": [], "CPU": []} for h in range(cluster.num_hosts)}
    for name in names:
        spec = tf.DeviceSpec.from_string(name)
        if spec.job != cluster.job or spec.task is None or spec.task >= cluster.num_hosts:
            continue
        if spec.device_type in ("GPU", "CPU"):
            device = "{}/device:{}:{}".format(cluster.task(spec.task), spec.device_type, spec.device_index)
            by_host[spec.task][spec.device_type].append((spec.device_index, device))
    devices = {}
    for host, kinds in by_host.items():
        chosen = kinds["GPU"] or kinds["CPU"]
        if not chosen:
            raise ClusterError(
                "Host {} of the cluster lists no CPU or GPU device (devices seen: {}). Is the worker of that task "
                "running?".format(cluster.describe(host), names)
            )
        devices[host] = [device for _, device in sorted(chosen)]
    return devices


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    """Where the shards and the host work live.

    Attributes:
      devices: the device of every shard (replica), host-major: replica r lives on host `r // per_host`.
      host_devices: the CPU of every host (input pipelines, host work of its shards).
      built_hosts: the hosts whose replicas this process builds: every host, or with one process per host its own.
    """

    devices: Tuple[str, ...]
    host_devices: Tuple[str, ...]
    built_hosts: Optional[Tuple[int, ...]] = None

    def __post_init__(self):
        if self.built_hosts is None:
            object.__setattr__(self, "built_hosts", tuple(range(len(self.host_devices))))

    @property
    def num_hosts(self) -> int:
        return len(self.host_devices)

    @property
    def per_host(self) -> int:
        return len(self.devices) // len(self.host_devices)

    def host_of_replica(self, replica: int) -> int:
        return replica // self.per_host

    def replicas_of_host(self, host: int) -> List[int]:
        return list(range(host * self.per_host, (host + 1) * self.per_host))


def local_layout(devices: Sequence[str], host_device: str) -> ShardLayout:
    """All shards in this process, one host."""
    return ShardLayout(tuple(devices), (host_device,))


def cluster_layout(cluster: Cluster, num_shards: int, devices_by_host: Dict[int, List[str]]) -> ShardLayout:
    """`num_shards` shards spread evenly over the hosts, each host's on its first devices.

    Raises:
      ValueError: `num_shards` does not divide over the hosts, or a host has fewer devices than its shards.
    """
    listing = "; ".join(
        "{}: {}".format(cluster.describe(h), ", ".join(devices_by_host[h])) for h in range(cluster.num_hosts)
    )
    if num_shards % cluster.num_hosts != 0:
        raise ValueError(
            "num_shards={} must divide evenly over the {} hosts of job {!r} (hosts and their devices: {}). Set "
            "TPUConfig.num_shards to a multiple of {}, or leave it unset to use every device.".format(
                num_shards, cluster.num_hosts, cluster.job, listing, cluster.num_hosts
            )
        )
    per_host = num_shards // cluster.num_hosts
    short = [h for h in range(cluster.num_hosts) if len(devices_by_host[h]) < per_host]
    if short:
        raise ValueError(
            "num_shards={} needs {} devices on each of the {} hosts, but {} {} fewer (hosts and their devices: {}). "
            "Start the workers with more devices (`--cpu_shards`, or ConfigProto(device_count={{'CPU': k}})) or "
            "lower TPUConfig.num_shards.".format(
                num_shards,
                per_host,
                cluster.num_hosts,
                ", ".join(cluster.describe(h) for h in short),
                "has" if len(short) == 1 else "have",
                listing,
            )
        )
    devices = tuple(devices_by_host[h][j] for h in range(cluster.num_hosts) for j in range(per_host))
    hosts = tuple(cluster.host_device(h) for h in range(cluster.num_hosts))
    built = (cluster.this_host,) if cluster.process_per_host else None
    return ShardLayout(devices, hosts, built)


def unreachable_hosts(cluster: Cluster, timeout_secs: float = 2.0) -> List[int]:
    """Hosts whose server port does not accept a TCP connection (a diagnosis only: no data is exchanged)."""
    dead = []
    for host, address in enumerate(cluster.addresses):
        name, _, port = address.rpartition(":")
        try:
            with socket.create_connection((name.strip("[]"), int(port)), timeout=timeout_secs):
                pass
        except (OSError, ValueError):
            dead.append(host)
    return dead


def _again_if_hosts_up(cluster: Cluster, run: Callable[[], Any]) -> Any:
    """`run()`; after a deadline while every host accepts a TCP connection, `run()` once more.

    A worker restarted after a fault is up before the other tasks' gRPC channels to it have left their reconnect
    backoff: the first session on the cluster can then miss its deadline although nothing is down.
    """
    try:
        return run()
    except tf.errors.DeadlineExceededError:
        if unreachable_hosts(cluster):
            raise
    return run()


def _hosts_named_in(cluster: Cluster, message: str) -> List[int]:
    named = set()
    for host, address in enumerate(cluster.addresses):
        if re.search(r"/job:{}/(replica:\d+/)?task:{}\b".format(re.escape(cluster.job), host), message):
            named.add(host)
        if address in message:
            named.add(host)
    return sorted(named)


def fault_error(cluster: Cluster, what: str, error: Exception) -> ClusterError:
    """A `ClusterError` for a failed `train()`/`evaluate()`/`predict()`: which hosts failed and what to do."""
    message = str(error)
    dead = unreachable_hosts(cluster)
    named = _hosts_named_in(cluster, message)
    if dead:
        culprit = "host {} did not respond".format(", ".join(cluster.describe(h) for h in dead))
    elif named:
        culprit = "the error names host {}, which accepts connections (restarted, or overloaded?)".format(
            ", ".join(cluster.describe(h) for h in named)
        )
    else:
        culprit = (
            "every host accepts connections, so a Session.run outlived its deadline (session_config."
            "operation_timeout_in_ms, default {} ms): raise it or lower TPUConfig.iterations_per_loop".format(
                DEFAULT_OPERATION_TIMEOUT_MS
            )
        )
    first_line = next((line for line in message.splitlines() if line.strip() and "=====" not in line), "")
    return ClusterError(
        "{} on the cluster failed ({}: {}): {}. Restart the worker(s) with the same cluster spec and call {} "
        "again: training resumes from the last checkpoint in model_dir.".format(
            what, type(error).__name__, first_line.strip(), culprit, what
        )
    )


# Errors by which TensorFlow's runtime reports a lost or slow task.
FAULT_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError)
# A collective's lost peer can also come as an InternalError or a CancelledError: TensorFlow replaces the
# UnavailableError of a non-communication op after an aborted collective ("... originally returned UnavailableError,
# and was replaced by InternalError ..."), and every op of an aborted collective executor reports the abort's cause
# ("Collective ops is aborted by: failed to connect to all addresses", "... by: RPC Request was cancelled").
_LOST_TASK_IN_MESSAGE = ("originally returned UnavailableError", "Collective ops is aborted by")


def is_fault(error: Exception) -> bool:
    """Whether `error` is how TensorFlow's runtime reports a lost or slow task."""
    if isinstance(error, FAULT_ERRORS):
        return True
    return isinstance(error, (tf.errors.InternalError, tf.errors.CancelledError)) and any(
        s in str(error) for s in _LOST_TASK_IN_MESSAGE
    )


@contextlib.contextmanager
def reporting_faults(cluster: Optional[Cluster], what: str) -> Iterator[None]:
    """Turns the runtime's errors of a lost task into a `ClusterError` naming it (nothing off a cluster).

    `MonitoredSession`'s own recovery is off meanwhile: it would retry session creation while a worker is down. And
    closing a session waits at most `SESSION_CLOSE_TIMEOUT_SECS`: on a lost task 0 (the sessions' master) the close
    would otherwise wait for it to come back, up to the session's deadline, before the error could name it.
    """
    if cluster is None:
        yield
        return
    try:
        with (
            _tf_internal.without_session_recovery(),
            _tf_internal.bounded_remote_session_close(SESSION_CLOSE_TIMEOUT_SECS),
        ):
            yield
    except tf.errors.OpError as error:
        if not is_fault(error):
            raise
        raise fault_error(cluster, what, error) from error


# The clusters (by their addresses) whose every host this process has had a session with.
_ANSWERED: Set[Tuple[str, ...]] = set()


class EveryHostAnswers(tf.compat.v1.train.SessionRunHook):
    """Before a session on the cluster is created: every host still accepts connections.

    Creating a session on a cluster waits for every task to answer, for ever: a host lost since this process's last
    session (between `train()` and `evaluate()`, before an evaluation of `train_and_evaluate`) would hold the others
    there instead of failing them. Before the first session a host may still be starting, so that one waits.

    Args:
      cluster: the job's hosts.
      what: the call, for the error (e.g. "evaluate()").

    Raises:
      ClusterError (from `begin`): a host does not accept connections.
    """

    def __init__(self, cluster: Cluster, what: str):
        self._cluster = cluster
        self._what = what

    def begin(self) -> None:
        if self._cluster.addresses not in _ANSWERED:
            return
        lost = unreachable_hosts(self._cluster)
        if lost:
            raise ClusterError(
                "{} on the cluster failed: host {} did not respond before the session was created. Restart every "
                "host's process with the same TF_CONFIG: the job resumes from the last checkpoint.".format(
                    self._what, ", ".join(self._cluster.describe(h) for h in lost)
                )
            )

    def after_create_session(self, session, coord) -> None:
        _ANSWERED.add(self._cluster.addresses)


_PROBE_DIR = ".tpu_estimator_hosts"


def check_model_dir(cluster: Cluster, model_dir: str, config: tf.compat.v1.ConfigProto) -> None:
    """Checks that every host can write `model_dir` and that the client sees what they wrote.

    Each host writes a small file under `model_dir` from its own CPU (the checkpoint shards are written the same
    way); the client then looks for the files and removes them.

    Raises:
      ClusterError: a host cannot write `model_dir`, or the client cannot see what a host wrote there.
    """
    probe_dir = os.path.join(model_dir, _PROBE_DIR)
    paths = [os.path.join(probe_dir, "task_{}".format(h)) for h in range(cluster.num_hosts)]
    with tf.Graph().as_default():
        writes = []
        for host, path in enumerate(paths):
            with tf.device(cluster.host_device(host)):
                writes.append(tf.io.write_file(path, cluster.describe(host)))

        def write_probes():
            with tf.compat.v1.Session(cluster.target, config=config) as session:
                for host, write in enumerate(writes):
                    try:
                        session.run(write)
                    except FAULT_ERRORS:
                        raise
                    except tf.errors.OpError as error:
                        raise ClusterError(
                            "Host {} cannot write model_dir {!r} ({}: {}). Every task writes its checkpoint shard "
                            "there: use a path every task and the client can write (a shared file system mounted at "
                            "the same path, or a gs:// or hdfs:// URL).".format(
                                cluster.describe(host), model_dir, type(error).__name__, error.message.splitlines()[0]
                            )
                        ) from error

        try:
            _again_if_hosts_up(cluster, write_probes)
        except FAULT_ERRORS as error:
            raise _unreachable(cluster, error) from error
    missing = [h for h, path in enumerate(paths) if not tf.io.gfile.exists(path)]
    try:
        tf.io.gfile.rmtree(probe_dir)
    except tf.errors.OpError:
        pass
    if missing:
        raise ClusterError(
            "model_dir {!r} is not the same place for the client and host {}: the host wrote {} there, the client "
            "does not see it. Every task writes its checkpoint shard into model_dir: use a path every task and the "
            "client share (a shared file system mounted at the same path, or a gs:// or hdfs:// URL).".format(
                model_dir, ", ".join(cluster.describe(h) for h in missing), paths[missing[0]]
            )
        )
