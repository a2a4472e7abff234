"""The embedding stage of TRAIN with one process per host: lookups and updates in a run of their own.

With one process per host, each host's step sums its dense gradients with the other hosts by collective ops, and
TensorFlow cannot mix those with ops on another process's devices in one `Session.run` (a run with collective ops
takes its step id from a sequence every process shares, so two processes' transfers to a third one would meet under
one id). The embedding tables are sharded over every host, so their lookups and updates do need the other hosts'
devices: they run in a thread of their own (`HostEmbeddingExchange`), one `Session.run` per step, beside the step's
loop, and the two meet through queues on this host's CPU:

1. the thread takes the next step's preprocessed ids from the embedding infeed (`embedding_infeed.py`), looks up
   its unique ids' rows on the shards' hosts, combines them, and queues the replicas' inputs with their activations;
2. the step dequeues them, runs `model_fn` on this host's replicas, and queues their activation gradients;
3. the thread turns them into table gradients, sends each shard's piece to the host that owns the shard
   (`embedding.shard_exchange.QueueShardExchange`), and updates the shards this host owns once per unique id of the
   global batch, from every host's piece; then it tells every host that its shards are updated;
4. once every owner said so, the thread lets the step end (its variable writes wait for it) and goes on with the
   next step's lookups, which so see every host's update.

The update's learning rates of the global step and its gradient multiplier use the global step that the step read
before its writes and queued with its gradients, as on one host (the thread's run cannot order its own reads of the
variable against the step's writes).

Every process builds the same queues in the same order: their shared names carry a generation drawn from the
collectives' process-wide counter, so the queues of one `train()` are not those of another.
"""

from typing import Any, List, Tuple

import tensorflow as tf

from embedding.shard_exchange import QueueShardExchange
from tpu_estimator.embedding_stage.embedding_bridge import EmbeddingBridge, TappedGradients
from tpu_estimator.embedding_stage.embedding_infeed import EmbeddingInfeed
from tpu_estimator.hosts import collectives as collectives_lib
from tpu_estimator.inputs.input_pipeline import TensorInfeedHook
from tpu_estimator.inputs.queued_structure import QueuedStructure, dequeued_list

# Steps of inputs with activations the thread may queue ahead of the step (it cannot look up further ahead: the
# next lookups wait for this step's update).
_DEPTH = 1


def new_generation() -> int:
    """A number every process draws at the same point of building the same graph (shared names of one graph)."""
    return collectives_lib.next_instance_key()


def gradient_piece_exchange(
    host: int, replica_devices: List[str], host_of_replica: List[int], host_device: str, generation: int
) -> QueueShardExchange:
    """The exchange that carries this host's table-gradient pieces to the shards' owners.

    Args:
      host: this process's host index.
      replica_devices: the device of every replica of every host (table shard k lives on device k).
      host_of_replica: the host of each replica.
      host_device: this host's CPU.
      generation: `new_generation()` of the graph.
    """
    owner = {device: h for device, h in zip(replica_devices, host_of_replica)}
    num_hosts = max(host_of_replica) + 1
    return QueueShardExchange(
        host,
        num_hosts,
        owner,
        host_device,
        queue_prefix="tpu_embedding_gradient_pieces/{}".format(generation),
    )


class HostEmbeddingExchange(object):
    """This host's embedding stage of TRAIN, run by a thread beside the step's loop (see the module docstring).

    Build it outside the loop; in each step call `read()` once, then `update(tapped)`.

    Args:
      bridge: the TRAIN bridge, built with this host only and the `gradient_piece_exchange`.
      infeed: the embedding infeed of this host's preprocessed ids (one host part per step).
      host: this process's host index.
      host_devices: the CPU of every host.

    Attributes:
      hook: runs the thread; add it to the training hooks after the infeed's.
    """

    def __init__(
        self,
        bridge: EmbeddingBridge,
        infeed: EmbeddingInfeed,
        host: int,
        host_devices: List[str],
    ):
        self._bridge = bridge
        self._host = host
        self._device = host_devices[host]
        num_hosts = len(host_devices)
        generation = new_generation()
        with tf.name_scope("tpu_embedding_exchange"):
            ((per_replica, batches),) = infeed.dequeue()
            with tf.device(self._device):
                looked_up = bridge.attach_activations(per_replica, [batches])
            self._queued_inputs = QueuedStructure(looked_up)
            self._keys, templates = self._gradient_templates(looked_up)
            self._gradient_shapes = [t.shape for t in templates]
            with tf.device(self._device):
                self._inputs = tf.queue.FIFOQueue(_DEPTH, self._queued_inputs.dtypes, name="inputs_with_activations")
                # The step's gradients and the global step it read before its writes.
                self._gradients = tf.queue.FIFOQueue(
                    1, [tf.float32] * len(self._keys) + [tf.int64], name="activation_gradients"
                )
                self._applied = tf.queue.FIFOQueue(1, [tf.int32], name="update_applied")
                send_inputs = self._inputs.enqueue(self._queued_inputs.tensors)
                with tf.control_dependencies([send_inputs]):
                    *grads, global_step = dequeued_list(self._gradients.dequeue())
                global_step.set_shape([])
                for grad, template in zip(grads, templates):
                    grad.set_shape(template.shape)
                update = bridge.apply_host_gradients(batches, dict(zip(self._keys, grads)), global_step)
            announced = self._announce_update(update, host_devices, generation)
            with tf.device(self._device), tf.control_dependencies([announced]):
                everyone = self._update_queue(host, host_devices[host], generation, num_hosts).dequeue_many(num_hosts)
                with tf.control_dependencies([everyone]):
                    step_op = self._applied.enqueue([tf.constant(0, tf.int32)])
        with tf.name_scope("tpu_embedding_exchange"), tf.device(self._device):
            # On the thread's failure: the queues the step dequeues from. The gradients' queue never blocks the
            # step (it is empty whenever the step enqueues) and only the thread waits on it, at the end.
            close = tf.group(*[q.close(cancel_pending_enqueues=True) for q in (self._inputs, self._applied)])
            with tf.control_dependencies([close]):
                end_close = self._gradients.close(cancel_pending_enqueues=True)
        self.hook = TensorInfeedHook(step_op, close, end_close_op=end_close)

    @staticmethod
    def _update_queue(owner_host: int, device: str, generation: int, num_hosts: int) -> tf.queue.FIFOQueue:
        """The queue on a host's CPU where every owner tells that host it has applied the step's update."""
        name = "tpu_embedding_updates_applied/{}/host_{}".format(generation, owner_host)
        with tf.control_dependencies(None), tf.device(device):
            return tf.queue.FIFOQueue(
                2 * num_hosts, [tf.int32], shapes=[[]], shared_name=name, name=name.replace("/", "_")
            )

    def _announce_update(self, update: tf.Operation, host_devices: List[str], generation: int) -> tf.Operation:
        """After `update` (this host's shards updated, its pieces sent): one token to every host's update queue."""
        sent = []
        with tf.control_dependencies([update]):
            for h, device in enumerate(host_devices):
                queue = self._update_queue(h, device, generation, len(host_devices))
                with tf.device(device):
                    sent.append(queue.enqueue([tf.constant(self._host, tf.int32)]))
        return tf.group(*sent)

    def _gradient_templates(self, looked_up: List[Tuple[Any, Any]]) -> Tuple[List[str], List[tf.Tensor]]:
        """The feature keys in order and, per key, this host's joined activations (the shape of their gradient)."""
        keys = [feature.key for feature in self._bridge.features]
        with tf.device(self._device):
            templates = [tf.concat([features[key] for features, _ in looked_up], axis=0) for key in keys]
        return keys, templates

    def read(self) -> List[Tuple[Any, Any]]:
        """In the step: this host's replicas' `(features, labels)`, with the activations under the feature keys."""
        with tf.device(self._device):
            return self._queued_inputs.unpack(self._inputs.dequeue())

    def update(self, tapped: TappedGradients) -> tf.Operation:
        """In the step: queues the replicas' activation gradients and waits until every host's update is applied.

        Args:
          tapped: the step's tapped gradients (`Replicas.tapped_gradients`).

        Returns:
          An op that ends once every shard has applied the step's update.
        """
        with tf.device(self._device), tf.name_scope("tpu_embedding_gradients"):
            joined = self._bridge.joined_activation_gradients(tapped)
            values = [
                joined[key] if joined[key] is not None else tf.zeros(shape, tf.float32)
                for key, shape in zip(self._keys, self._gradient_shapes)
            ]
            # Read in the step, before its writes (which wait for the update): the value the update's learning
            # rates and gradient multiplier must see, as on one host.
            global_step = tf.cast(tf.compat.v1.train.get_global_step().read_value(), tf.int64)
            send = self._gradients.enqueue(values + [global_step])
            with tf.control_dependencies([send]):
                return tf.group(dequeued_list(self._applied.dequeue()), name="embedding_update_applied")
