"""The embedding infeed: the host stage of the embedding lookup, run ahead of the step by a thread.

An enqueue loop (its own `Session.run`, in a `TensorInfeedHook` thread) runs a host stage for the next steps into
host queues; each step dequeues one step's worth. What the host stage does depends on the mode:

* TRAIN (`train_loop.py`): reads the input and preprocesses the embedding ids of several steps
  (`EmbeddingBridge.preprocess`); the step looks up the activations itself (`EmbeddingBridge.attach_activations`),
  after the previous step's update.
* PREDICT (`predict_step.py`): the tables are read-only, so the stage reads the next batch, preprocesses its ids
  and looks up its activations (`EmbeddingBridge.prepare`) while the current batch's `model_fn` runs; the step
  dequeues inputs with their activations and the padding masks.

On a cluster every host has its own queue on its CPU, holding its replicas' part of the step: nothing of it
crosses the network.
"""

import abc
from typing import Any, List, Optional, Tuple

import tensorflow as tf

from tpu_estimator import _tf_internal
from tpu_estimator.embedding_stage.embedding_bridge import EmbeddingBridge
from tpu_estimator.inputs.input_pipeline import InputPipeline, TensorInfeedHook, drain
from tpu_estimator.inputs.queued_structure import QueuedStructure

# A step's structures per host: `[(host CPU device, structure of tensors and None leaves)]`.
HostParts = List[Tuple[str, Any]]

# How many prepared steps the embedding infeed thread may queue ahead of the step.
_DEPTH = 4
# How many steps the embedding infeed thread prepares per Session.run: enough steps that the run's fixed cost
# (~0.1 ms) is amortised over about this many ids, at least _MIN_STEPS_PER_RUN and at most _MAX_STEPS_PER_RUN.
_IDS_PER_RUN = 65536
_MIN_STEPS_PER_RUN = 8
_MAX_STEPS_PER_RUN = 64


def steps_per_run(global_batch_size: Optional[int], num_features: int) -> int:
    """Steps the infeed thread prepares per `Session.run`, from the ids a step carries (one per row and feature).

    Small steps (D: batch 32, 2 features) are bound by the run's fixed cost, so they get more steps per run; large
    ones (batch 1024, 26 features) keep the minimum, which already amortises it.
    """
    ids_per_step = max(1, (global_batch_size or 1) * max(1, num_features))
    return int(min(_MAX_STEPS_PER_RUN, max(_MIN_STEPS_PER_RUN, -(-_IDS_PER_RUN // ids_per_step))))


class HostStage(abc.ABC):
    """What the infeed thread builds for one step, per mode: reads the input and runs the embedding's host part.

    One subclass per mode (`PreprocessIds`: TRAIN, `LookUp`: EVAL, `LookUpPadded`: PREDICT), built by the mode's
    constructor here; `EmbeddingInfeed` calls it once, in its enqueue loop's body.

    Args:
      pipeline: the mode's input pipeline, its `input_fn` called.
      bridge: the mode's `EmbeddingBridge`.
    """

    def __init__(self, pipeline: InputPipeline, bridge: EmbeddingBridge):
        self._pipeline = pipeline
        self._bridge = bridge

    @staticmethod
    def for_training(pipeline: InputPipeline, bridge: EmbeddingBridge) -> "HostStage":
        """TRAIN: reads a step and preprocesses its ids; the step looks up the activations after the last update."""
        return PreprocessIds(pipeline, bridge)

    @staticmethod
    def for_evaluation(pipeline: InputPipeline, bridge: EmbeddingBridge) -> "HostStage":
        """EVAL: reads a step and looks up its activations (the tables do not change)."""
        return LookUp(pipeline, bridge)

    @staticmethod
    def for_prediction(pipeline: InputPipeline, bridge: EmbeddingBridge) -> "HostStage":
        """PREDICT: reads a padded batch and looks up its activations; each replica's part carries its padding mask."""
        return LookUpPadded(pipeline, bridge)

    @abc.abstractmethod
    def __call__(self) -> HostParts:
        """Builds one step's host part (in the enqueue loop's body): per host, what its queue holds."""


class PreprocessIds(HostStage):
    """TRAIN: one step's ids preprocessed per host (`EmbeddingBridge.preprocess`), with the step's inputs."""

    def __call__(self) -> HostParts:
        step = self._pipeline.next_step()
        return self._bridge.host_parts(*self._bridge.preprocess(step.per_replica))


class LookUp(HostStage):
    """EVAL: one step's inputs with their activations looked up (`EmbeddingBridge.prepare`), per host."""

    def __call__(self) -> HostParts:
        per_replica, _ = self._bridge.prepare(self._pipeline.next_step().per_replica)
        return self._bridge.per_host(per_replica)


class LookUpPadded(HostStage):
    """PREDICT: as `LookUp`, each replica's part with its padding mask."""

    def __call__(self) -> HostParts:
        step = self._pipeline.next_step()
        per_replica, _ = self._bridge.prepare(step.per_replica)
        return self._bridge.per_host(list(zip(per_replica, step.padding_masks)))


class EmbeddingInfeed(object):
    """Builds the enqueue loop now (outside the step) and the per-step dequeue later (inside it).

    Args:
      host_stage: the mode's `HostStage`.
      host_device: where the loop's counter lives.
      steps: how many steps each `Session.run` of the thread prepares (`steps_per_run`).
      errors_in_order: a failure of the host stage is raised after the steps queued before it
        (`TensorInfeedHook`); needs one step per run.
      drained_at_end: the step is the queues' one consumer, so the session's end may take what they hold for the
        thread's last run to complete (`TensorInfeedHook`'s `drain_op`); False when another thread dequeues them.

    Raises:
      ValueError: `errors_in_order` with more than one step per run.

    `TPUConfig.initial_infeed_sleep_secs` is slept once, by the input pipeline's hook before the iterators start:
    the thread starts after it and does not sleep again.
    """

    def __init__(
        self,
        host_stage: HostStage,
        host_device: str,
        steps: int,
        errors_in_order: bool = False,
        drained_at_end: bool = True,
    ):
        if errors_in_order and steps != 1:
            raise ValueError("errors_in_order needs one step per run of the infeed thread, got {}.".format(steps))
        self._host_stage = host_stage
        self._host_device = host_device
        self._queues = None
        self._devices = None
        self._queued = None
        # Closed (never filled) when the session ends: the loop then stops after its current step.
        with tf.device(host_device):
            stop_signal = tf.queue.FIFOQueue(1, [tf.bool], shapes=[[]], name="embedding_infeed_stop")
        # Each Session.run of the infeed thread prepares several steps (a per-step run would bound small models).
        with _tf_internal.v1_control_flow():
            enqueue_op = tf.compat.v1.while_loop(
                lambda index: tf.logical_and(index < steps, tf.logical_not(stop_signal.is_closed())),
                self._enqueue_step,
                [tf.constant(0)],
                parallel_iterations=1,
                name="embedding_infeed_loop",
            )
        closes = [queue.close(cancel_pending_enqueues=True) for queue in self._queues]
        close = closes[0] if len(closes) == 1 else tf.group(*closes)
        self.hook = TensorInfeedHook(
            enqueue_op.op,
            close,
            errors_in_order=errors_in_order,
            stop_op=stop_signal.close() if drained_at_end else None,
            drain_op=drain(self._queues) if drained_at_end else None,
        )

    def _enqueue_step(self, index: tf.Tensor) -> tf.Tensor:
        parts = self._host_stage()
        queued = [QueuedStructure(structure) for _, structure in parts]
        if self._queues is None:
            self._queues = []
            for (device, _), host_queued in zip(parts, queued):
                with _tf_internal.outside_control_flow(), tf.device(device):
                    self._queues.append(
                        tf.queue.FIFOQueue(capacity=_DEPTH, dtypes=host_queued.dtypes, name="embedding_infeed")
                    )
            self._devices = [device for device, _ in parts]
            self._queued = queued
        enqueues = []
        for queue, device, host_queued in zip(self._queues, self._devices, queued):
            with tf.device(device):
                enqueues.append(queue.enqueue(host_queued.tensors))
        with tf.device(self._host_device), tf.control_dependencies(enqueues):
            return index + 1

    def dequeue(self) -> List[Any]:
        """In the step: one step's structure per host, in the order of the host stage's parts."""
        parts = []
        for queue, device, host_queued in zip(self._queues, self._devices, self._queued):
            with tf.device(device):
                parts.append(host_queued.unpack(queue.dequeue()))
        return parts
