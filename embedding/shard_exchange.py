"""How each host's gradient pieces of a table shard reach the process that updates the shard.

When one graph holds every host (one client builds the whole cluster), every host's piece of shard `k` is a tensor
of that graph and the shard's update joins them directly (`ShardedTable.apply_summed_gradient_ops` without an
exchange). When each host runs its own process with its own graph, a host cannot name another host's tensors. Then a
`ShardExchange` carries them: each process sends its piece of shard `k` to the process that owns the shard (the one
on whose host the shard lives), and only the owner builds the shard's update, from every process's piece.

`QueueShardExchange` does this with TensorFlow's runtime: one FIFO queue per table shard, on the shard's device,
with a shared name, so that the queue built in every process's graph is the same queue. Each process enqueues its
piece, tagged with its index; the owner dequeues one piece per process, orders them by process index (so the sum per
id has the same float order in every run), and updates the shard once per unique id.
"""

import abc
from typing import Callable, List, Mapping, Optional, Tuple, Union

import tensorflow as tf

# A piece of one shard's update: `(shard-local ids [U], gradients [U, dim])`.
Piece = Tuple[tf.Tensor, tf.Tensor]


class ShardExchange(abc.ABC):
    """Carries gradient pieces of table shards between the processes of a job.

    Attributes:
      host_device: this process's host device, where its pieces are split by shard.
    """

    host_device: str

    @abc.abstractmethod
    def route(self, table_name: str, shard: int, shard_device: str, piece: Piece, dim: int) -> Optional[List[Piece]]:
        """Sends this process's piece of a shard to the shard's owner.

        Args:
          table_name: the table.
          shard: the shard's index in the table.
          shard_device: the device the shard lives on.
          piece: this process's `(local ids, gradients)` of the shard.
          dim: the table's width.

        Returns:
          In the owner's graph: the pieces of every process (its own included) joined in process order, as a list
          of pieces to join. Elsewhere None: the piece was sent, and `sent_ops` holds what sends it.
        """

    @abc.abstractmethod
    def sent_ops(self) -> List[tf.Operation]:
        """The ops that send this process's pieces routed since the last call (they must run with the update)."""


class QueueShardExchange(ShardExchange):
    """A `ShardExchange` through shared FIFO queues on the shards' devices.

    Args:
      process_index: this process's index among the job's processes.
      num_processes: how many processes take part (every one sends a piece of every shard each update).
      process_of_device: the index of the process that owns each shard device: a mapping `{device: process}`, or a
        function of the device (e.g. the task of `/job:worker/task:k/...`).
      host_device: this process's host device.
      queue_prefix: shared names of the queues start with it; processes of one job must use the same.

    Raises:
      ValueError: `process_index` is not in `[0, num_processes)`; (from `route`) a mapping `process_of_device` names
        no process for a shard's device.
    """

    def __init__(
        self,
        process_index: int,
        num_processes: int,
        process_of_device: Union[Mapping[str, int], Callable[[str], int]],
        host_device: str,
        queue_prefix: str = "tpu_embedding_gradient_pieces",
    ):
        if not 0 <= process_index < num_processes:
            raise ValueError("process_index must be in [0, {}), got {}.".format(num_processes, process_index))
        self.process_index = process_index
        self.num_processes = num_processes
        self.host_device = host_device
        self._process_of_device = process_of_device
        self._prefix = queue_prefix
        self._queues = {}
        self._sent: List[tf.Operation] = []

    def _owner(self, shard_device: str) -> int:
        if not isinstance(self._process_of_device, Mapping):
            return self._process_of_device(shard_device)
        if shard_device not in self._process_of_device:
            raise ValueError(
                "process_of_device names no process for the shard device {!r} (it names {}).".format(
                    shard_device, sorted(self._process_of_device)
                )
            )
        return self._process_of_device[shard_device]

    def _queue(self, table_name: str, shard: int, shard_device: str, dim: int) -> tf.queue.FIFOQueue:
        key = (table_name, shard)
        if key not in self._queues:
            name = "{}/{}/shard_{}".format(self._prefix, table_name, shard)
            # Out of any loop and control dependencies (control_dependencies(None) leaves the control-flow context
            # too): the queue outlives the step.
            with tf.control_dependencies(None), tf.device(shard_device):
                self._queues[key] = tf.queue.FIFOQueue(
                    # One piece per process per update; a process may be one update ahead of the owner.
                    capacity=2 * self.num_processes,
                    dtypes=[tf.int32, tf.int64, tf.float32],
                    shared_name=name,
                    name=name.replace("/", "_"),
                )
        return self._queues[key]

    def route(self, table_name: str, shard: int, shard_device: str, piece: Piece, dim: int) -> Optional[List[Piece]]:
        queue = self._queue(table_name, shard, shard_device, dim)
        ids, grads = piece
        owner = self._owner(shard_device)
        if owner != self.process_index:
            with tf.device(shard_device):
                self._sent.append(queue.enqueue([tf.constant(self.process_index, tf.int32), ids, grads]))
            return None
        with tf.device(shard_device):
            received = []
            for _ in range(self.num_processes - 1):
                sender, piece_ids, piece_grads = queue.dequeue()
                sender.set_shape([])
                piece_ids.set_shape([None])
                piece_grads.set_shape([None, dim])
                received.append((sender, piece_ids, piece_grads))
            senders = [tf.constant(self.process_index, tf.int32)] + [sender for sender, _, _ in received]
            all_ids = [ids] + [i for _, i, _ in received]
            all_grads = [grads] + [g for _, _, g in received]
            # Process order whatever the order of arrival: each row keyed by its sender, then a stable sort.
            keys = tf.concat([tf.fill(tf.shape(i), s) for s, i in zip(senders, all_ids)], axis=0)
            order = tf.argsort(keys, stable=True)
            return [(tf.gather(tf.concat(all_ids, axis=0), order), tf.gather(tf.concat(all_grads, axis=0), order))]

    def sent_ops(self) -> List[tf.Operation]:
        sent, self._sent = self._sent, []
        return sent
