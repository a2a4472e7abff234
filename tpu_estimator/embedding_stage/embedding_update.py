"""How a training step updates the embedding tables from its tapped gradients: one strategy per way.

* `ImmediateUpdate`: the step's gradients, joined per host, applied once per unique id in the step;
* `PipelinedUpdate` (`pipeline_execution_with_tensor_core`): the previous step's update runs after this step's
  lookups (activations one update stale), this step's is carried to the next step in the loop's state, and the last
  one is applied when the loop ends;
* `ExchangedUpdate` (one process per host): the step hands its activation gradients to the host's exchange thread
  (`embedding_exchange.py`) and waits for every shard's update.

`TrainLoop` picks one with `for_training` and calls it the same way whichever it is.
"""

import abc
from typing import Any, List, Optional, Tuple

import tensorflow as tf

from tpu_estimator.embedding_stage.embedding_bridge import EmbeddingBridge, TappedGradients
from tpu_estimator.embedding_stage.embedding_exchange import HostEmbeddingExchange


class EmbeddingUpdate(abc.ABC):
    """One training step's embedding update, and what it carries from step to step in the loop (`pending`)."""

    def initial_pending(self) -> List[tf.Tensor]:
        """The loop state the update starts with (none unless it carries an update to the next step)."""
        return []

    def pending_shape_invariants(self) -> List[tf.TensorShape]:
        """The shape invariants of `initial_pending`'s tensors in the loop."""
        return []

    @abc.abstractmethod
    def step(
        self, per_replica: List[Any], batches: List[Any], tapped: TappedGradients, pending: List[tf.Tensor]
    ) -> Tuple[tf.Operation, List[tf.Tensor]]:
        """In the step: the update.

        Args:
          per_replica: the step's `(features, labels)` per replica, activations attached (`FedStep.per_replica`).
          batches: the step's preprocessed batches per host (`FedStep.batches`).
          tapped: the step's tapped gradients (`Replicas.tapped_gradients`).
          pending: the loop state the previous step returned.

        Returns:
          `(the update op the step waits for, the loop state for the next step)`.
        """

    def after_loop(self, loss: tf.Tensor, pending: List[tf.Tensor]) -> tf.Tensor:
        """After the loop: `loss`, once whatever the last step left pending is applied."""
        del pending
        return loss


class ImmediateUpdate(EmbeddingUpdate):
    """The step's gradients applied in the step (`EmbeddingBridge.apply_gradients`)."""

    def __init__(self, bridge: EmbeddingBridge):
        self._bridge = bridge

    def step(self, per_replica, batches, tapped, pending):
        return self._bridge.apply_gradients(batches, tapped), []


class PipelinedUpdate(EmbeddingUpdate):
    """The previous step's update after this step's lookups; this step's carried to the next (see the module)."""

    def __init__(self, bridge: EmbeddingBridge):
        self._bridge = bridge

    def initial_pending(self) -> List[tf.Tensor]:
        return self._bridge.empty_pending()

    def pending_shape_invariants(self) -> List[tf.TensorShape]:
        return self._bridge.pending_shape_invariants()

    def step(self, per_replica, batches, tapped, pending):
        # The previous step's update runs after this step's lookups: activations are one update stale.
        looked_up = [t for t in tf.nest.flatten(per_replica, expand_composites=True) if t is not None]
        with tf.control_dependencies(looked_up):
            update = self._bridge.apply_pending(pending)
        return update, self._bridge.step_pending(batches, tapped)

    def after_loop(self, loss: tf.Tensor, pending: List[tf.Tensor]) -> tf.Tensor:
        # The last step's update is applied when the loop ends, so every step's update lands in this Session.run.
        with tf.control_dependencies([loss]):
            final_update = self._bridge.apply_pending(pending)
        with tf.control_dependencies([final_update]):
            return tf.identity(loss)


class ExchangedUpdate(EmbeddingUpdate):
    """The step's activation gradients handed to the host's exchange thread, which updates every host's shards."""

    def __init__(self, exchange: HostEmbeddingExchange):
        self._exchange = exchange

    def step(self, per_replica, batches, tapped, pending):
        return self._exchange.update(tapped), []


def for_training(
    bridge: Optional[EmbeddingBridge], exchange: Optional[HostEmbeddingExchange]
) -> Optional[EmbeddingUpdate]:
    """The update strategy of a training loop: None without embeddings, exchanged with one process per host (the
    feed's exchange), pipelined with `pipeline_execution_with_tensor_core`, else immediate."""
    if bridge is None:
        return None
    if exchange is not None:
        return ExchangedUpdate(exchange)
    if bridge.pipelined:
        return PipelinedUpdate(bridge)
    return ImmediateUpdate(bridge)
