"""`tpu-estimator-tf-config`: the `TF_CONFIG` of one host of a job, derived from where it was started (Slurm, a
Kubernetes Indexed Job), then the program run with it.

    srun --ntasks-per-node=1 tpu-estimator-tf-config -- python program.py ...                       # Slurm
    tpu-estimator-tf-config --service=trainer --num_hosts=4 -- python program.py ...                # Kubernetes
    tpu-estimator-tf-config --hosts=10.0.0.1:2222,10.0.0.2:2222 --index=1 -- python program.py ...  # by hand
    export TF_CONFIG=$(tpu-estimator-tf-config)                                                    # print it

With one process per host (docs/DISTRIBUTED.md), every host runs the same program with a `TF_CONFIG` naming every
host as a task of job `worker` and itself as its task. This command writes it:

* **Slurm** (`SLURM_PROCID` set): the hosts are the job step's tasks, from `SLURM_STEP_NODELIST` (a Slurm host list,
  `node[01-04],gpu7`) and `SLURM_STEP_TASKS_PER_NODE` (`2(x3),1`), falling back to the job's `SLURM_JOB_NODELIST`
  and `SLURM_TASKS_PER_NODE`; task `r` is `SLURM_PROCID` `r` (block distribution: the first node's tasks, then the
  next's), at `--port` plus its rank on its node. The same layout as TensorFlow's `SlurmClusterResolver`, except
  that the nodes keep Slurm's order (that resolver sorts their names, so `n10` comes before `n2`), which is the
  order Slurm numbers the tasks in.
* **Kubernetes** (`JOB_COMPLETION_INDEX` set, an Indexed Job): this host is that index; the hosts are `--hosts`, or
  `<job>-<i>.<service>:<port>` for `i < --num_hosts`: the DNS names an Indexed Job's pods get with `subdomain:
  <service>` and a headless Service of that name (`examples/kubernetes/indexed_job.yaml`). `<job>` is `--job_name`,
  else `$JOB_NAME` (the manifest sets it from the pod's `job-name` label).
* Else `--hosts` and `--index`.

The program is then executed in place of this process (same PID, so signals reach it directly), with `TF_CONFIG`
set; without a program, the JSON is printed. Nothing here imports TensorFlow.
"""

import json
import os
import re
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from absl import app, flags

FLAGS = flags.FLAGS


class LaunchError(ValueError):
    """The environment does not describe a job: says which variable or flag is missing or wrong."""


def _split_outside_brackets(text: str) -> List[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return parts + [current]


def expand_hostlist(hostlist: str) -> List[str]:
    """Slurm's compressed host list in order: `'n[01-02],m5,o[3,7-8]'` -> `['n01', 'n02', 'm5', 'o3', 'o7', 'o8']`.

    Raises:
      LaunchError: not a host list (one bracketed range per name at most).
    """
    hosts = []
    for part in _split_outside_brackets(hostlist.strip()):
        match = re.fullmatch(r"([^\[\],]+)(?:\[([^\[\]]+)\]([^\[\],]*))?", part)
        if match is None:
            raise LaunchError("Not a Slurm host list: {!r} (its part {!r}).".format(hostlist, part))
        prefix, ranges, suffix = match.groups()
        if ranges is None:
            hosts.append(prefix)
            continue
        for item in ranges.split(","):
            bounds = item.split("-")
            if len(bounds) not in (1, 2) or not all(b.isdigit() for b in bounds) or int(bounds[0]) > int(bounds[-1]):
                raise LaunchError("Not a Slurm host list: {!r} (its range {!r}).".format(hostlist, item))
            width = len(bounds[0])
            for number in range(int(bounds[0]), int(bounds[-1]) + 1):
                hosts.append("{}{}{}".format(prefix, str(number).zfill(width), suffix))
    return hosts


def expand_tasks_per_node(tasks_per_node: str) -> List[int]:
    """Slurm's tasks per node in node order: `'2(x3),1'` -> `[2, 2, 2, 1]`.

    Raises:
      LaunchError: not that format.
    """
    counts = []
    for part in tasks_per_node.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise LaunchError("Not Slurm's tasks per node: {!r} (its part {!r}).".format(tasks_per_node, part))
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def _variable(env: Mapping[str, str], *names: str) -> str:
    for name in names:
        if env.get(name):
            return env[name]
    raise LaunchError(
        "{} is not set: run this inside a Slurm job step (srun), or pass --hosts and --index.".format(
            " or ".join(names)
        )
    )


def slurm_hosts(env: Mapping[str, str], port: int) -> Tuple[List[str], int]:
    """`(every task's host:port in rank order, this task's rank)` from the `SLURM_*` variables.

    Raises:
      LaunchError: a variable is missing or malformed, or the tasks do not add up.
    """
    rank = int(_variable(env, "SLURM_PROCID"))
    nodes = expand_hostlist(_variable(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"))
    per_node = expand_tasks_per_node(_variable(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"))
    if len(per_node) != len(nodes):
        raise LaunchError(
            "Slurm lists {} node(s) ({}) but tasks for {} ({}).".format(
                len(nodes), ",".join(nodes), len(per_node), per_node
            )
        )
    addresses = ["{}:{}".format(node, port + local) for node, count in zip(nodes, per_node) for local in range(count)]
    num_tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
    if num_tasks and int(num_tasks) != len(addresses):
        raise LaunchError(
            "Slurm says {} task(s) but its nodes and tasks per node make {}: {}.".format(
                num_tasks, len(addresses), ", ".join(addresses)
            )
        )
    if not 0 <= rank < len(addresses):
        raise LaunchError("SLURM_PROCID={} is not one of the {} task(s).".format(rank, len(addresses)))
    return addresses, rank


def kubernetes_hosts(
    env: Mapping[str, str],
    hosts: Optional[str],
    service: Optional[str],
    num_hosts: Optional[int],
    job_name: Optional[str],
    port: int,
) -> Tuple[List[str], int]:
    """`(every host's host:port, this pod's index)` of an Indexed Job's pod.

    Raises:
      LaunchError: no index, neither `hosts` nor `service` with `num_hosts`, or the index is out of range.
    """
    index = int(_variable(env, "JOB_COMPLETION_INDEX"))
    if hosts:
        addresses = split_hosts(hosts)
    else:
        job = job_name or env.get("JOB_NAME")
        if not (service and num_hosts and job):
            raise LaunchError(
                "Kubernetes: pass --hosts=host:port,..., or --service (the headless Service of the pods' subdomain), "
                "--num_hosts (the Job's completions) and --job_name (or set JOB_NAME)."
            )
        addresses = ["{}-{}.{}:{}".format(job, i, service, port) for i in range(num_hosts)]
    if not 0 <= index < len(addresses):
        raise LaunchError("JOB_COMPLETION_INDEX={} is not one of the {} host(s).".format(index, len(addresses)))
    return addresses, index


def split_hosts(hosts: str) -> List[str]:
    """`'a:1,b:2'` -> `['a:1', 'b:2']`.

    Raises:
      LaunchError: an entry is not host:port.
    """
    addresses = [a.strip() for a in hosts.split(",") if a.strip()]
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise LaunchError("--hosts: {!r} is not host:port.".format(address))
    return addresses


def tf_config(addresses: Sequence[str], index: int, job: str = "worker") -> Dict:
    """The `TF_CONFIG` of host `index` of a job whose hosts are `addresses`."""
    return {"cluster": {job: list(addresses)}, "task": {"type": job, "index": index}}


def resolve(
    env: Mapping[str, str],
    source: str = "auto",
    port: int = 2222,
    hosts: Optional[str] = None,
    index: Optional[int] = None,
    service: Optional[str] = None,
    num_hosts: Optional[int] = None,
    job_name: Optional[str] = None,
    tpu_job_name: str = "worker",
) -> Dict:
    """This process's `TF_CONFIG` (a dict) from `env` and the flags' values.

    Args:
      env: the environment (`os.environ`).
      source: 'slurm', 'kubernetes', 'hosts', or 'auto' (`SLURM_PROCID` -> slurm, `JOB_COMPLETION_INDEX` ->
        kubernetes, else hosts).
      port: the servers' port (Slurm: the first on each node; Kubernetes with `service`).
      hosts: the hosts' `host:port`, comma-separated.
      index: this host's index with `hosts` (source 'hosts').
      service: Kubernetes: the headless Service.
      num_hosts: Kubernetes with `service`: how many hosts.
      job_name: Kubernetes with `service`: the Job's name.
      tpu_job_name: the hosts' job in `TF_CONFIG`.

    Raises:
      LaunchError: what is missing or wrong, naming the variable or flag.
    """
    if source == "auto":
        source = "slurm" if env.get("SLURM_PROCID") else "kubernetes" if env.get("JOB_COMPLETION_INDEX") else "hosts"
    if not 1 <= port <= 65535:
        raise LaunchError("--port={} is not a port (1..65535).".format(port))
    if source == "slurm":
        addresses, task = slurm_hosts(env, port)
    elif source == "kubernetes":
        addresses, task = kubernetes_hosts(env, hosts, service, num_hosts, job_name, port)
    else:
        if not hosts or index is None:
            raise LaunchError(
                "No Slurm job step (SLURM_PROCID) or Indexed Job (JOB_COMPLETION_INDEX) here: pass --hosts=host:port,... "
                "and --index=<this host>."
            )
        addresses, task = split_hosts(hosts), index
        if not 0 <= task < len(addresses):
            raise LaunchError("--index={} is not one of the {} host(s).".format(task, len(addresses)))
    return tf_config(addresses, task, tpu_job_name)


def main(argv: Sequence[str]) -> None:
    try:
        config = resolve(
            os.environ,
            FLAGS.source,
            FLAGS.port,
            FLAGS.hosts,
            FLAGS.index,
            FLAGS.service,
            FLAGS.num_hosts,
            FLAGS.job_name,
            FLAGS.tpu_job_name,
        )
    except (LaunchError, ValueError) as error:
        sys.stderr.write("tpu-estimator-tf-config: {}\n".format(error))
        sys.exit(2)
    text = json.dumps(config)
    command = list(argv[1:])
    if not command:
        print(text)
        return
    env = dict(os.environ, TF_CONFIG=text)
    sys.stdout.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as error:
        sys.stderr.write("tpu-estimator-tf-config: cannot run {!r}: {}\n".format(command[0], error))
        sys.exit(127)


def _define_flags() -> None:
    """The command's flags (defined when it runs: `tpu_estimator.app.hosts` defines a `--num_hosts` of its own)."""
    flags.DEFINE_enum("source", "auto", ["auto", "slurm", "kubernetes", "hosts"], "Where the hosts come from.")
    flags.DEFINE_integer(
        "port", 2222, "Slurm and --service: the port of each host's server (Slurm: plus its rank on its node)."
    )
    flags.DEFINE_string("hosts", None, "The hosts' host:port, comma-separated, in task order.")
    flags.DEFINE_integer("index", None, "With --hosts outside Kubernetes: this host's index.")
    flags.DEFINE_string("service", None, "Kubernetes: the headless Service that is the pods' subdomain.")
    flags.DEFINE_integer("num_hosts", None, "Kubernetes with --service: how many hosts (the Job's completions).")
    flags.DEFINE_string("job_name", None, "Kubernetes with --service: the Job's name (default $JOB_NAME).")
    flags.DEFINE_string("tpu_job_name", "worker", "The job of the hosts' tasks (as TPUConfig.tpu_job_name).")


def run() -> None:
    """The console script's entry point."""
    _define_flags()
    app.run(main)


if __name__ == "__main__":
    run()
