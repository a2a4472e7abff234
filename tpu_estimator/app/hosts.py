"""`tpu-estimator-hosts`: runs a program as a job of N hosts on this machine, one process per host, at 127.0.0.1.

    tpu-estimator-hosts --num_hosts=2 -- python my_program.py --flag=value

Each process gets `TF_CONFIG` naming the N hosts (`worker` tasks on 127.0.0.1) and its own task, as TensorFlow's
multi-worker training does; the program's `RunConfig` then makes it that host (docs/DISTRIBUTED.md). On real
machines, start the same program on each machine with its own `TF_CONFIG` instead. Every line a host prints is
prefixed with `[host i]`. The command exits with the first failing host's status (0 when all succeed); after a host
fails, the others get `--grace_secs` to end (they fail on their own when a collective misses the lost host), then
they are stopped. The last lines say what each host did (the global step its `train()` reached, its exit status)
and whether the job succeeded.

SIGINT and SIGTERM to the command go to every host (each host runs in a session of its own, so a terminal's Ctrl-C
reaches it once, through the command); the hosts get `--stop_secs` to end, then whatever is left of them is killed,
and the command exits with 128 + the signal's number. No host outlives the command.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any, Iterator, List, NamedTuple, Optional, Sequence

from absl import app, flags

from tpu_estimator.app import command_help
from tpu_estimator.hosts import host_report

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_hosts", 2, "How many hosts (processes) run the program.", lower_bound=1)
flags.DEFINE_integer("first_port", 0, "The first host's port (the others' follow it); 0: free ports.", lower_bound=0)
flags.DEFINE_float("grace_secs", 90.0, "After a host fails, how long the others may run before they are stopped.")
flags.DEFINE_float(
    "stop_secs",
    30.0,
    "After SIGINT/SIGTERM (forwarded to every host), how long the hosts may take to end.",
    lower_bound=0,
)
flags.DEFINE_string("tpu_job_name", "worker", "The job of the hosts' tasks (as TPUConfig.tpu_job_name).")

PROG = "tpu-estimator-hosts"
OWN_FLAGS = ("num_hosts", "first_port", "grace_secs", "stop_secs", "tpu_job_name")
USAGE = f"""Usage: {PROG} [flags] -- PROGRAM [ARGS...]

Runs PROGRAM as a job of --num_hosts hosts on this machine, one process per host, each with its TF_CONFIG."""
EXAMPLE = f"{PROG} --num_hosts=2 -- python tests/cluster/host_program.py /tmp/two_hosts 4 6"


class HostOutcome(NamedTuple):
    """What one host of a job did: its exit status (negative: stopped by that signal) and the global step its last
    `train()` reached (None: it reported none)."""

    host: int
    exit_status: int
    global_step: Optional[int]


def loopback_addresses(num_hosts: int, first_port: int = 0) -> List[str]:
    """`127.0.0.1:port` for each host: consecutive ports from `first_port`, or ports free right now.

    Raises:
      ValueError: the ports from `first_port` do not all lie in 1..65535.
    """
    if first_port and not 1 <= first_port <= 65536 - num_hosts:
        raise ValueError(
            "--first_port={} with --num_hosts={}: the hosts' ports {}..{} must lie in 1..65535 (or 0: free ports)."
            "".format(first_port, num_hosts, first_port, first_port + num_hosts - 1)
        )
    if first_port:
        return ["127.0.0.1:{}".format(first_port + h) for h in range(num_hosts)]
    sockets = []
    for _ in range(num_hosts):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    addresses = ["127.0.0.1:{}".format(sock.getsockname()[1]) for sock in sockets]
    for sock in sockets:
        sock.close()
    return addresses


def host_tf_config(addresses: Sequence[str], host: int, job: str = "worker") -> str:
    """The `TF_CONFIG` of host `host` of a job whose hosts are `addresses`."""
    return json.dumps({"cluster": {job: list(addresses)}, "task": {"type": job, "index": host}})


def _relay(stream: IO[bytes], prefix: str, out: IO[str]) -> None:
    for line in iter(stream.readline, b""):
        out.write(prefix + line.decode(errors="replace"))
        out.flush()


class Stopped(Exception):
    """The command was asked to stop (SIGINT/SIGTERM): every host was handed the signal and has ended.

    Attributes:
      signum: the signal.
      codes: every host's exit status, in host order.
    """

    def __init__(self, signum: int, codes: List[int]):
        super(Stopped, self).__init__("stopped by signal {}".format(signum))
        self.signum = signum
        self.codes = codes


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    """`signum` to the host's process and whatever it started (its own session: process group = its pid)."""
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def _stop_requests() -> Iterator[List[int]]:
    """While inside, SIGINT and SIGTERM are noted (the list gets their numbers) instead of ending this process; only
    in the main thread (elsewhere signals cannot be caught, and nothing is noted)."""
    requests: List[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, lambda number, frame: requests.append(number))
    try:
        yield requests
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_hosts(command: Sequence[str], num_hosts: int, **options: Any) -> List[int]:
    """Runs `command` once per host with its `TF_CONFIG`; returns every host's exit status.

    Args:
      command: the program and its arguments.
      num_hosts: how many hosts.
      **options: `run_job`'s other arguments (`addresses`, `grace_secs`, `job`, `env`, `out`, `stop_secs`).

    Returns:
      Each host's exit status, in host order (`run_job`'s `HostOutcome.exit_status`).
    """
    return [outcome.exit_status for outcome in run_job(command, num_hosts, **options)]


def run_job(
    command: Sequence[str],
    num_hosts: int,
    addresses: Optional[Sequence[str]] = None,
    grace_secs: float = 90.0,
    job: str = "worker",
    env: Optional[dict] = None,
    out: IO[str] = sys.stdout,
    stop_secs: float = 30.0,
) -> List[HostOutcome]:
    """Runs `command` once per host with its `TF_CONFIG`; returns what every host did.

    Args:
      command: the program and its arguments.
      num_hosts: how many hosts.
      addresses: the hosts' `host:port` (default: ports of 127.0.0.1 free right now).
      grace_secs: after a host fails, how long the others may still run before they are stopped.
      job: the hosts' job.
      env: the environment of the processes (default: this one's), to which `TF_CONFIG` is added.
      out: where the hosts' prefixed output goes.
      stop_secs: after SIGINT/SIGTERM (called from the main thread), how long the hosts, each handed the signal, may
        take to end before they are killed.

    Returns:
      Each host's `HostOutcome`, in host order: its exit status (negative: stopped by that signal) and the global
      step its last `train()` reached (reported through `host_report`).

    Raises:
      ValueError: no command, or `addresses` not one per host.
      Stopped: SIGINT or SIGTERM arrived; every host has ended (its status in the exception).
    """
    if not command:
        raise ValueError("Name the program to run after '--', e.g. tpu-estimator-hosts -- python program.py")
    addresses = list(addresses) if addresses else loopback_addresses(num_hosts)
    if len(addresses) != num_hosts:
        raise ValueError("{} addresses for {} hosts: give one per host.".format(len(addresses), num_hosts))
    with tempfile.TemporaryDirectory(prefix="tpu_estimator_hosts_") as report_dir:
        reports = [os.path.join(report_dir, "host_{}.json".format(h)) for h in range(num_hosts)]
        codes = _run_processes(command, addresses, grace_secs, job, env, out, reports, stop_secs)
        return [HostOutcome(h, code, host_report.read_trained_step(reports[h])) for h, code in enumerate(codes)]


def _run_processes(command, addresses, grace_secs, job, env, out, reports, stop_secs) -> List[int]:
    processes, relays = [], []
    with _stop_requests() as stop_requests:
        try:
            for host in range(len(addresses)):
                host_env = dict(os.environ if env is None else env)
                host_env["TF_CONFIG"] = host_tf_config(addresses, host, job)
                host_env[host_report.REPORT_ENV] = reports[host]
                # A session of its own: a terminal's Ctrl-C reaches the host once, forwarded by this process.
                process = subprocess.Popen(
                    list(command),
                    env=host_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                processes.append(process)
                relay = threading.Thread(
                    target=_relay, args=(process.stdout, "[host {}] ".format(host), out), daemon=True
                )
                relay.start()
                relays.append(relay)
            failed_at, stopping_at = None, None
            while any(p.poll() is None for p in processes):
                if stop_requests and stopping_at is None:
                    stopping_at = time.time()
                    for p in processes:
                        if p.poll() is None:
                            _signal_group(p, stop_requests[0])
                if failed_at is None and any(p.poll() not in (None, 0) for p in processes):
                    failed_at = time.time()
                overdue = stopping_at is not None and time.time() - stopping_at > stop_secs
                if overdue or (failed_at is not None and time.time() - failed_at > grace_secs):
                    for p in processes:
                        if p.poll() is None:
                            _signal_group(p, signal.SIGKILL)
                time.sleep(0.1)
        finally:
            # Whatever ends this function (an error starting a host, KeyboardInterrupt), no host outlives it.
            for p in processes:
                if p.poll() is None:
                    _signal_group(p, signal.SIGKILL)
                    p.wait()
        for relay in relays:
            relay.join(5)
        codes = [p.returncode for p in processes]
        if stop_requests:
            raise Stopped(stop_requests[0], codes)
    return codes


def outcome_line(outcome: HostOutcome) -> str:
    """`tpu-estimator-hosts: host 1: trained to global step 6, exit status 0`."""
    if outcome.global_step is not None:
        did = "trained to global step {}".format(outcome.global_step)
    else:
        did = "reported no training step"
    if outcome.exit_status < 0:
        try:
            name = signal.Signals(-outcome.exit_status).name
        except ValueError:
            name = "signal {}".format(-outcome.exit_status)
        status = "stopped by {} (exit status {})".format(name, outcome.exit_status)
    else:
        status = "exit status {}".format(outcome.exit_status)
    return "{}: host {}: {}, {}".format(PROG, outcome.host, did, status)


def summary_line(outcomes: Sequence[HostOutcome]) -> str:
    """The job's last line: all hosts succeeded (and the step they reached), or which hosts failed."""
    failed = [o for o in outcomes if o.exit_status != 0]
    if not failed:
        steps = sorted({o.global_step for o in outcomes if o.global_step is not None})
        reached = " (global step {})".format(", ".join(str(s) for s in steps)) if steps else ""
        return "{}: all {} hosts succeeded{}".format(PROG, len(outcomes), reached)
    return "{}: host(s) {} failed (exit status {}) of {}".format(
        PROG,
        ", ".join(str(o.host) for o in failed),
        ", ".join(str(o.exit_status) for o in failed),
        len(outcomes),
    )


def main(argv: Sequence[str]) -> None:
    try:
        addresses = loopback_addresses(FLAGS.num_hosts, FLAGS.first_port)
    except ValueError as error:
        raise app.UsageError(str(error))
    try:
        outcomes = run_job(
            argv[1:],
            FLAGS.num_hosts,
            addresses,
            FLAGS.grace_secs,
            FLAGS.tpu_job_name,
            stop_secs=FLAGS.stop_secs,
        )
    except Stopped as stopped:
        sys.stderr.write(
            "tpu-estimator-hosts: stopped by {}: every host was handed it and has ended (exit status {}).\n".format(
                signal.Signals(stopped.signum).name, ", ".join(str(c) for c in stopped.codes)
            )
        )
        sys.exit(128 + stopped.signum)
    for outcome in outcomes:
        print(outcome_line(outcome))
    print(summary_line(outcomes), flush=True)
    failed = [o for o in outcomes if o.exit_status != 0]
    if failed:
        sys.exit(failed[0].exit_status if failed[0].exit_status > 0 else 1)


def help_text() -> str:
    """`tpu-estimator-hosts --help`: usage, the command's own flags, an example, then the module's description."""
    paragraphs = __doc__.split("\n\n")[1:]
    description = "\n\n".join(p for p in paragraphs if not p.startswith("    "))  # not the docstring's example
    return command_help.help_text(USAGE, FLAGS, OWN_FLAGS, [EXAMPLE], description)


def run() -> None:
    """The console script's entry point."""
    command_help.run_command(help_text, FLAGS, main)


if __name__ == "__main__":
    run()
