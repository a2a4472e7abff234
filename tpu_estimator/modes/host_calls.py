"""Host calls (`host_call`, `eval_metrics`) on the TPU path: their tensors gathered over replicas, the training loop's
outfeed, and the hook that runs them after each loop (the call itself and the CPU path: `host_call_spec.py`)."""

import tensorflow as tf

from tpu_estimator import _tf_internal
from tpu_estimator.specs.host_call_spec import SummaryWritersHook, call


def flatten_tensors(host_call):
    """The call's tensors as a flat list (dict values in sorted key order)."""
    tensors = host_call[1]
    if isinstance(tensors, dict):
        return [tensors[key] for key in sorted(tensors)]
    return list(tensors)


def pack_tensors(host_call, flat):
    """Inverse of `flatten_tensors` for the structure of `host_call`."""
    tensors = host_call[1]
    if isinstance(tensors, dict):
        return dict(zip(sorted(tensors), flat))
    return list(flat)


def concat_over_replicas(name: str, host_calls_per_replica, device: str):
    """Concatenates each tensor of a host call over replicas on axis 0, on `device`.

    Raises:
      ValueError: a tensor is a scalar (it must keep a batch dimension to be concatenated).
    """
    flats = [flatten_tensors(call_) for call_ in host_calls_per_replica]
    result = []
    with tf.device(device):
        for index, tensor in enumerate(flats[0]):
            tensor = tf.convert_to_tensor(tensor)
            if tensor.shape.rank == 0:
                raise ValueError(
                    "All tensors outfed from TPU should preserve batch size dimension, but got scalar {} in {}. Reshape "
                    "it to rank 1 (e.g. tf.reshape(t, [1])).".format(tensor, name)
                )
            pieces = [tf.convert_to_tensor(flat[index]) for flat in flats]
            result.append(pieces[0] if len(pieces) == 1 else tf.concat(pieces, axis=0))
    return result


def _gathered_shape(shape: tf.TensorShape, collectives) -> tf.TensorShape:
    """The shape of a tensor gathered over the hosts (its first axis times the hosts)."""
    if collectives is None or shape.rank is None or shape[0] is None:
        return shape
    return tf.TensorShape([shape[0] * collectives.num_hosts]).concatenate(shape[1:])


class OutfeedHostCallHook(SummaryWritersHook):
    """After each loop, runs `host_fn` once per entry the loop queued."""

    def __init__(self, host_ops, queue_size: tf.Tensor):
        self._host_ops = host_ops
        self._queue_size = queue_size

    def _drain(self, session) -> None:
        for _ in range(int(session.run(self._queue_size))):
            session.run(self._host_ops)

    def after_run(self, run_context, run_values):
        self._drain(run_context.session)

    def end(self, session):
        self._drain(session)
        super(OutfeedHostCallHook, self).end(session)


class HostCallOutfeed(object):
    """The training loop's `host_call`: tensors of every replica queued on the host each n-th step, `host_fn` run
    after the loop once per queued entry (upstream's outfeed).

    Args:
      host_device: where the queue lives and `host_fn` runs.
      every_n_steps: `TPUConfig.experimental_host_call_every_n_steps`.
    """

    def __init__(self, host_device: str, every_n_steps: int):
        self._host_device = host_device
        self._every_n_steps = every_n_steps
        self._queue = None

    def enqueue(self, per_replica_calls, step: tf.Tensor, collectives=None):
        """In the loop body: queues this step's tensors (on every n-th step).

        With one process per host (`collectives` given), each tensor of this host's replicas is gathered with every
        other host's (a collective, in host order: the replicas' order on one host) and only the chief queues the
        result, as a pod's one host call receives every replica's tensors.

        Args:
          per_replica_calls: each replica's `host_call` (this process's replicas).
          step: the loop's step counter.
          collectives: this host's `HostCollectives` with one process per host, else None.

        Returns:
          `(enqueue_op, tensors)`: the op to run with the step and this process's replicas' tensors.
        """
        flat = concat_over_replicas("host_call", per_replica_calls, self._host_device)
        chief = collectives is None or collectives.is_chief
        with tf.device(self._host_device):
            if self._queue is None and chief:
                with _tf_internal.outside_control_flow():
                    self._queue = tf.queue.FIFOQueue(
                        capacity=-1,
                        dtypes=[t.dtype for t in flat],
                        shapes=[_gathered_shape(t.shape, collectives) for t in flat],
                        name="host_call_queue",
                    )

            def enqueue():
                tensors = flat if collectives is None else [collectives.all_gather(t) for t in flat]
                return self._queue.enqueue(tensors) if chief else tf.group(*tensors)

            if self._every_n_steps == 1:
                return enqueue(), flat
            every_n = tf.compat.v1.cond(tf.equal(tf.math.floormod(step, self._every_n_steps), 0), enqueue, tf.no_op)
            return every_n, flat

    def call_on_dequeued(self, host_call):
        """After the loop: `host_call`'s function called on one dequeued entry; each run of its ops takes one."""
        with tf.device(self._host_device):
            flat = self._queue.dequeue()
            flat = list(flat) if isinstance(flat, (list, tuple)) else [flat]
            return call(host_call, pack_tensors(host_call, flat))

    def size(self) -> tf.Tensor:
        """The number of queued entries."""
        return self._queue.size()

    def hook(self, host_call) -> OutfeedHostCallHook:
        """After the loop: the hook that dequeues each entry and runs `host_call`'s function on it."""
        return OutfeedHostCallHook(self.call_on_dequeued(host_call), self.size())
