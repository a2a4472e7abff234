"""Collective ops between the hosts of a cluster that runs one process per host.

Each host's process builds only its own replicas; what the hosts share per step goes through TensorFlow's collective
ops (`CollectiveReduceV2`, `CollectiveGatherV2`, `CollectiveBcastSendV2`/`RecvV2`: ring all-reduce on CPUs, NCCL
across GPUs when TensorFlow picks it), as `MultiWorkerMirroredStrategy` does. The members of one collective meet by
their keys: every process builds the same graphs in the same order, so a process-wide counter gives each collective
op the same instance key in every process.

A collective waits for every host; a lost host makes the others fail at `timeout_seconds` (the session's operation
deadline), not hang.
"""

import itertools
import threading
from typing import Optional

import tensorflow as tf

# One group: every host of the job.
_GROUP_KEY = 1
_instance_keys = itertools.count(1)
_instance_keys_lock = threading.Lock()


def next_instance_key() -> int:
    """The next number of the process-wide sequence every process draws from in the same order."""
    with _instance_keys_lock:
        return next(_instance_keys)


class HostCollectives(object):
    """The collective ops of one host's process with the other hosts' processes.

    Args:
      num_hosts: how many hosts (processes) take part.
      host: this process's host index (host 0 is the chief).
      device: where this host's collective ops run (its CPU, or its first GPU).
      timeout_seconds: how long a collective waits for the other hosts before it fails.

    Raises:
      ValueError: `host` is not in `[0, num_hosts)`.
    """

    def __init__(self, num_hosts: int, host: int, device: str, timeout_seconds: float):
        if not 0 <= host < num_hosts:
            raise ValueError("host must be in [0, {}), got {}.".format(num_hosts, host))
        self.num_hosts = num_hosts
        self.host = host
        self.device = device
        self.timeout_seconds = float(timeout_seconds)

    @property
    def is_chief(self) -> bool:
        return self.host == 0

    def _members(self, timeout_seconds: Optional[float] = None) -> dict:
        """The arguments that make one collective op of every host meet: the group, a new instance, the timeout."""
        timeout = self.timeout_seconds if timeout_seconds is None else float(timeout_seconds)
        return dict(
            group_size=self.num_hosts,
            group_key=_GROUP_KEY,
            instance_key=next_instance_key(),
            timeout_seconds=timeout,
        )

    def all_sum(self, tensor: tf.Tensor) -> tf.Tensor:
        """The sum of `tensor` over the hosts (every host gets the same values)."""
        with tf.device(tensor.device or self.device):
            return tf.raw_ops.CollectiveReduceV2(
                input=tensor, ordering_token=[], merge_op="Add", final_op="Id", **self._members()
            )

    def all_gather(self, tensor: tf.Tensor) -> tf.Tensor:
        """Every host's `tensor` concatenated on the first axis, in host order (same shape on every host)."""
        with tf.device(self.device):
            return tf.raw_ops.CollectiveGatherV2(input=tensor, ordering_token=[], **self._members())

    def from_chief(self, tensor: tf.Tensor, timeout_seconds: Optional[float] = None) -> tf.Tensor:
        """The chief's `tensor` on every host (each host passes a tensor of the same dtype and shape).

        Args:
          tensor: this host's tensor (the chief's is sent; the others' give the shape and dtype received).
          timeout_seconds: how long to wait for the other hosts; default `self.timeout_seconds`.
        """
        members = self._members(timeout_seconds)
        with tf.device(tensor.device or self.device):
            if self.is_chief:
                return tf.raw_ops.CollectiveBcastSendV2(input=tensor, **members)
            return tf.raw_ops.CollectiveBcastRecvV2(shape=tf.shape(tensor), T=tensor.dtype, **members)


def wait_for_every_host(num_hosts: int, host: int, device: str, target: str, config: tf.compat.v1.ConfigProto) -> None:
    """Returns once every host's process has called this (a collective sum of one scalar, in a graph of its own).

    Args:
      num_hosts: how many hosts.
      host: this process's host.
      device: this host's CPU.
      target: this process's session target.
      config: the session config (its operation deadline bounds the wait).
    """
    timeout_secs = (config.operation_timeout_in_ms or 0) / 1000.0
    with tf.Graph().as_default():
        done = HostCollectives(num_hosts, host, device, timeout_secs).all_sum(tf.constant(1.0))
        with tf.compat.v1.Session(target, config=config) as session:
            session.run(done)


def int_from_chief(
    value: int,
    num_hosts: int,
    host: int,
    device: str,
    target: str,
    config: tf.compat.v1.ConfigProto,
    timeout_secs: float,
) -> int:
    """The chief's `value` on every host (a collective broadcast of one int64, in a graph of its own); returns once
    the chief has sent it.

    Args:
      value: the chief's number (ignored on other hosts).
      num_hosts: how many hosts.
      host: this process's host.
      device: this host's CPU.
      target: this process's session target.
      config: the session config.
      timeout_secs: how long the other hosts wait for the chief (in place of the session's operation deadline).
        The chief itself waits the operation deadline at most (`chief_wait_secs`).
    """
    timeout_secs = chief_wait_secs(config, timeout_secs) if host == 0 else timeout_secs
    with tf.Graph().as_default():
        shared = HostCollectives(num_hosts, host, device, timeout_secs).from_chief(tf.constant(value, tf.int64))
        options = tf.compat.v1.RunOptions(timeout_in_ms=int(timeout_secs * 1000))
        with tf.compat.v1.Session(target, config=config) as session:
            return int(session.run(shared, options=options))


def chief_wait_secs(config: Optional[tf.compat.v1.ConfigProto], receivers_wait_secs: float) -> float:
    """How long the chief's side of a broadcast waits: the session's operation deadline when it has one.

    The hosts that receive may wait long for the chief (it saves a checkpoint, it exports); the chief only hands
    its value over. A receiver that died meanwhile does not fail the chief's send (a send opens no connection), so
    the chief bounds its wait by the deadline of any other step.
    """
    deadline_ms = config.operation_timeout_in_ms if config is not None else 0
    return deadline_ms / 1000.0 if deadline_ms else receivers_wait_secs
