"""`tpu-estimator-server`: one host of a cluster, a plain `tf.distribute.Server` (docs/DISTRIBUTED.md).

    tpu-estimator-server --cluster=worker=10.0.0.1:2222,10.0.0.2:2222 --task=0 --cpu_shards=2
    tpu-estimator-server --cluster='{"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}' --task=1
    TF_CONFIG='{"cluster": {...}, "task": {"type": "worker", "index": 1}}' tpu-estimator-server

It starts the server, logs the devices it offers (GPUs, else `--cpu_shards` logical CPUs), and serves until SIGTERM
or SIGINT, then exits with status 0.

TensorFlow's gRPC server listens on every interface of the host (`0.0.0.0`/`[::]`) at the port of its cluster
address, whatever host the address names (`GrpcServer::Init` has no option for one address), and runs any graph a
client sends it, without authentication. The ready line says so; docs/DISTRIBUTED.md says how to keep a worker
private. Ports outside 1..65535 are refused before the server starts (TensorFlow would take the port modulo 65536,
or any free port for 0), and the ready line is printed only once the server reports the port its address names.
"""

import json
import os
import signal
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "cluster",
    None,
    "The cluster: JSON ({'worker': ['host:port', ...]}) or 'job=host:port,host:port;job2=...'. Default: TF_CONFIG.",
)
flags.DEFINE_integer("task", None, "This server's task index in its job. Default: TF_CONFIG's task index.")
flags.DEFINE_string("job", None, "This server's job. Default: TF_CONFIG's task type, else 'worker'.")
flags.DEFINE_integer("cpu_shards", 1, "Logical CPU devices of this server (shards on a host without GPUs).")

READY_MESSAGE = "tpu-estimator-server ready"


def parse_cluster(text: str) -> Dict[str, List[str]]:
    """`{job: [address, ...]}` from JSON or `job=host:port,host:port;job2=host:port`.

    Raises:
      ValueError: neither form, or a job without addresses.
    """
    text = text.strip()
    if text.startswith("{"):
        try:
            cluster = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError("--cluster is not valid JSON ({}): {!r}".format(error, text)) from error
    else:
        cluster = {}
        for part in filter(None, (p.strip() for p in text.split(";"))):
            job, sep, addresses = part.partition("=")
            if not sep or not job.strip():
                raise ValueError(
                    "--cluster entry {!r} must be 'job=host:port,host:port' (or the whole flag JSON).".format(part)
                )
            cluster[job.strip()] = [a.strip() for a in addresses.split(",") if a.strip()]
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError("--cluster names no job: {!r}".format(text))
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise ValueError("Job {!r} of --cluster lists no address: {!r}".format(job, text))
    return cluster


def resolve_task(
    cluster_flag: Optional[str], job_flag: Optional[str], task_flag: Optional[int], tf_config: str
) -> Tuple[Dict[str, List[str]], str, int]:
    """`(cluster, job, task)` from the flags, falling back to `TF_CONFIG`.

    Raises:
      ValueError: no cluster, an unknown job, or a task index out of range.
    """
    parsed = json.loads(tf_config) if tf_config else {}
    cluster = parse_cluster(cluster_flag) if cluster_flag else parsed.get("cluster")
    if not cluster:
        raise ValueError("No cluster: pass --cluster=worker=host:port,... or set TF_CONFIG.")
    task_info = parsed.get("task", {})
    job = job_flag or task_info.get("type") or "worker"
    task = task_flag if task_flag is not None else task_info.get("index")
    if job not in cluster:
        raise ValueError("--job={!r} is not a job of the cluster {}.".format(job, sorted(cluster)))
    if task is None or not 0 <= int(task) < len(cluster[job]):
        raise ValueError(
            "--task must be in [0, {}) for job {!r} ({}), got {}.".format(len(cluster[job]), job, cluster[job], task)
        )
    return cluster, job, int(task)


def check_addresses(cluster: Dict[str, List[str]]) -> None:
    """Every address of `cluster` is `host:port` with a port in 1..65535.

    Raises:
      ValueError: naming the job, task and address.
    """
    for job, addresses in cluster.items():
        for task, address in enumerate(addresses):
            host, sep, port = str(address).rpartition(":")
            if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(
                    "--cluster: /job:{}/task:{} has address {!r}: give host:port with a port in 1..65535.".format(
                        job, task, address
                    )
                )


def ready_line(job: str, task: int, address: str) -> str:
    """The line printed once the server listens (its first on stdout): where it is, and that it is open."""
    port = address.rpartition(":")[2]
    return (
        "{}: /job:{}/task:{} at {}; TensorFlow's gRPC server listens on every interface of this host at port {} "
        "(it cannot bind one address) and runs any graph sent to it: keep the port private (a private network or "
        "a firewall rule, docs/DISTRIBUTED.md)".format(READY_MESSAGE, job, task, address, port)
    )


def serve(cluster: Dict[str, List[str]], job: str, task: int, cpu_shards: int, stop: threading.Event) -> None:
    """Starts the server, logs its devices, and returns once `stop` is set.

    Raises:
      RuntimeError: the server reports another port than its address names.
    """
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(device_count={"CPU": cpu_shards})
    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster), job_name=job, task_index=task, config=config, start=True
    )
    requested = cluster[job][task].rpartition(":")[2]
    bound = server.target.rpartition(":")[2]
    if bound != requested:
        raise RuntimeError(
            "/job:{}/task:{}: the server bound port {}, not the port of its address {}.".format(
                job, task, bound, cluster[job][task]
            )
        )
    devices = [d.name for d in tf.config.list_logical_devices()]
    gpus = [d for d in devices if "GPU" in d]
    logging.info(
        "/job:%s/task:%d serves %s on %s; shard devices: %s",
        job,
        task,
        server.target,
        cluster[job][task],
        ", ".join(gpus) if gpus else "%d logical CPU(s)" % cpu_shards,
    )
    print(ready_line(job, task, cluster[job][task]), flush=True)
    while not stop.wait(0.5):
        pass
    logging.info("/job:%s/task:%d stopping", job, task)


def main(argv: Sequence[str]) -> None:
    del argv
    if FLAGS.cpu_shards < 1:
        raise app.UsageError("--cpu_shards must be >= 1, got {}".format(FLAGS.cpu_shards))
    try:
        cluster, job, task = resolve_task(FLAGS.cluster, FLAGS.job, FLAGS.task, os.environ.get("TF_CONFIG", ""))
        check_addresses(cluster)
    except ValueError as error:
        raise app.UsageError(str(error))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        serve(cluster, job, task, FLAGS.cpu_shards, stop)
    except RuntimeError as error:
        print("tpu-estimator-server: error: {}".format(error), file=sys.stderr, flush=True)
        os._exit(1)  # The started server cannot be stopped in-process (below).
    # A tf.distribute.Server cannot be stopped in-process (its Stop is unimplemented): exit without joining it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


OWN_FLAGS = ("cluster", "task", "job", "cpu_shards")


def help_text() -> str:
    """`tpu-estimator-server --help`: usage, the server's own flags, an example, then the module's description."""
    from tpu_estimator.app import command_help

    paragraphs = __doc__.split("\n\n")
    summary = paragraphs[0].split(": ", 1)[1]
    usage = "Usage: tpu-estimator-server [--cluster=CLUSTER] [--task=N] [--job=JOB] [--cpu_shards=N]\n\n" + (
        summary[0].upper() + summary[1:]
    )
    example = paragraphs[1].strip().splitlines()[0].strip()
    return command_help.help_text(usage, FLAGS, OWN_FLAGS, [example], "\n\n".join(paragraphs[2:]))


def run() -> None:
    """Console script entry point."""
    from tpu_estimator.app import command_help

    command_help.run_command(help_text, FLAGS, main)


if __name__ == "__main__":
    run()
