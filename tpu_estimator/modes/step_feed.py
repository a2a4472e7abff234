"""The feed stage of a step on shards: read the input, preprocess the embedding ids, look up the activations.

Every mode feeds its step the same way, with one difference per mode in what runs ahead of the step:

* TRAIN (`StepFeed.for_training`): the embedding infeed's thread reads the input and preprocesses the ids of the
  next steps into host queues (`embedding_infeed.py`); the step dequeues them and looks up the activations itself,
  after the previous step's update; with one process per host, a thread looks up and updates the tables beside
  the step (`embedding_exchange.py`);
* EVAL (`StepFeed.for_evaluation`): the step reads its input and looks up its activations (tables read-only);
  with one process per host, the embedding infeed's thread reads and looks up ahead, as in PREDICT;
* PREDICT (`StepFeed.for_prediction`): the input is padded to the predict batch (masks returned); the embedding
  infeed's thread reads the next batches and looks up their activations while the current one's `model_fn` runs
  (the tables are read-only).

Without an `EmbeddingConfigSpec` the step reads its input itself in every mode (the input's own prefetching is the
lookahead).
"""

import dataclasses
from typing import Any, Callable, List, Optional, Tuple

import tensorflow as tf

from tpu_estimator.embedding_stage import embedding_infeed
from tpu_estimator.embedding_stage.embedding_bridge import EmbeddingBridge
from tpu_estimator.embedding_stage.embedding_exchange import HostEmbeddingExchange
from tpu_estimator.embedding_stage.embedding_infeed import EmbeddingInfeed, HostStage
from tpu_estimator.inputs.input_pipeline import InputPipeline
from tpu_estimator.modes.shared_stages import ShardedSettings
from tpu_estimator.specs.context import ShardingContext, TPUContext
from tpu_estimator.specs.embedding_spec import resolve_embedding_config


@dataclasses.dataclass(frozen=True)
class FedStep:
    """One step's inputs, as the feed stage hands them to the replicas.

    Attributes:
      per_replica: each replica's `(features, labels)`, with the embedding activations under the feature keys.
      batches: TRAIN with embeddings: the engine batches the step's update applies to (a list of each host's on a
        cluster of several hosts); otherwise None.
      padding_masks: PREDICT: per replica, which of its rows are real (not padding); otherwise None.
    """

    per_replica: List[Tuple[Any, Any]]
    batches: Any = None
    padding_masks: Optional[List[tf.Tensor]] = None


@dataclasses.dataclass(frozen=True)
class FeedSources:
    """What a mode's feed is built from.

    Attributes:
      call_input_fn: calls the user's `input_fn` with a `TPUContext`.
      settings: the mode's `ShardedSettings` (batch axis, embedding spec).
      ctx: the `ShardingContext` of the mode.
      bridge: the mode's `EmbeddingBridge`, or None without embeddings.
    """

    call_input_fn: Callable[[TPUContext], Any]
    settings: ShardedSettings
    ctx: ShardingContext
    bridge: Optional[EmbeddingBridge]


class StepFeed(object):
    """Builds what runs ahead of the step now and hands out one step's inputs in the step (`read`).

    Use the constructor of the mode: `for_training`, `for_evaluation`, `for_prediction`.

    Attributes:
      input_hooks: the hooks that start the input (iterator initialisers, tensor infeed), before `model_fn`'s.
      infeed_hook: the embedding infeed thread's hook, or None. PREDICT puts it after every other hook, so that the
        error of a bad batch is raised after the other hooks' `end`.
      embedding_exchange: TRAIN with embeddings and one process per host: the thread that looks up and updates the
        tables beside the step (`embedding_exchange.py`; its `hook` runs it, its `update` ends the step); else None.
    """

    def __init__(
        self,
        read: Callable[[], FedStep],
        input_hooks: List[tf.compat.v1.train.SessionRunHook],
        infeed_hook: Optional[tf.compat.v1.train.SessionRunHook] = None,
        embedding_exchange: Optional[HostEmbeddingExchange] = None,
    ):
        self._read = read
        self.input_hooks = list(input_hooks)
        self.infeed_hook = infeed_hook
        self.embedding_exchange = embedding_exchange

    def read(self) -> FedStep:
        """In the step: its inputs (built in the step's control-flow context)."""
        return self._read()

    @classmethod
    def for_training(cls, sources: FeedSources) -> "StepFeed":
        """TRAIN: ids preprocessed ahead by the embedding infeed; activations looked up in the step.

        Args:
          sources: what the feed is built from.

        Returns:
          The feed; `input_fn` has been called and the infeed's enqueue loop built.
        """
        pipeline, input_hooks, bridge, ctx = _built(sources)
        if bridge is None:
            return cls(lambda: FedStep(pipeline.next_step().per_replica), input_hooks)

        infeed = EmbeddingInfeed(
            HostStage.for_training(pipeline, bridge),
            ctx.host_work_device,
            embedding_infeed.steps_per_run(ctx.global_batch_size, len(bridge.features)),
            # With one process per host the exchange's thread dequeues the infeed, not the step.
            drained_at_end=not ctx.process_per_host,
        )
        if ctx.process_per_host:
            exchange = HostEmbeddingExchange(bridge, infeed, ctx.built_hosts[0], ctx.host_devices)
            return cls(lambda: FedStep(exchange.read()), input_hooks, infeed.hook, exchange)

        def read() -> FedStep:
            per_replica, batches = bridge.join_host_parts(infeed.dequeue())
            return FedStep(bridge.attach_activations(per_replica, batches), batches)

        return cls(read, input_hooks, infeed.hook)

    @classmethod
    def for_evaluation(cls, sources: FeedSources) -> "StepFeed":
        """EVAL: the step reads its input and looks up its activations (arguments as `for_training`'s); with one
        process per host, a thread reads and looks up ahead (the step's collective ops cannot share a run with the
        lookups on other hosts' shards, `embedding_exchange.py`)."""
        pipeline, input_hooks, bridge, ctx = _built(sources)
        if bridge is not None and ctx.process_per_host:
            # Errors at the next hook call: one run of the step takes all the evaluation's steps, so the thread's
            # error cannot wait for the caller's runs (PREDICT's errors_in_order).
            infeed = EmbeddingInfeed(HostStage.for_evaluation(pipeline, bridge), ctx.host_work_device, 1)
            return cls(
                lambda: FedStep([r for replicas in infeed.dequeue() for r in replicas]), input_hooks, infeed.hook
            )

        def read() -> FedStep:
            per_replica = pipeline.next_step().per_replica
            if bridge is not None:
                per_replica = bridge.prepare(per_replica)[0]
            return FedStep(per_replica)

        return cls(read, input_hooks)

    @classmethod
    def for_prediction(cls, sources: FeedSources) -> "StepFeed":
        """PREDICT: padded batches; with embeddings, the next batches are read and looked up ahead of the step
        (arguments as `for_training`'s)."""
        pipeline, input_hooks, bridge, ctx = _built(sources)
        if bridge is None:

            def read_padded() -> FedStep:
                step = pipeline.next_step()
                return FedStep(step.per_replica, padding_masks=step.padding_masks)

            return cls(read_padded, input_hooks)

        # One batch per run of the thread: the step itself takes a Session.run per batch, so the thread's runs cost
        # no more than the step's. A bad batch fails after the batches before it are predicted, as without the
        # lookahead.
        infeed = EmbeddingInfeed(
            HostStage.for_prediction(pipeline, bridge), ctx.host_work_device, 1, errors_in_order=True
        )

        def read() -> FedStep:
            replicas = [replica for host_replicas in infeed.dequeue() for replica in host_replicas]
            return FedStep([inputs for inputs, _ in replicas], padding_masks=[mask for _, mask in replicas])

        return cls(read, input_hooks, infeed.hook)


def _built(sources: FeedSources):
    """`input_fn` called: `(pipeline, hooks that start the input, bridge, ctx)`."""
    pipeline, input_hooks = build_input_pipeline(sources.call_input_fn, sources.ctx, sources.settings)
    return pipeline, input_hooks, sources.bridge, sources.ctx


def build_input_pipeline(
    call_input_fn: Callable[[TPUContext], Any], ctx: ShardingContext, settings: ShardedSettings
) -> Tuple[InputPipeline, List[tf.compat.v1.train.SessionRunHook]]:
    """Calls `input_fn` as the input mode says; returns `(pipeline, hooks that start the input)`.

    The embedding inputs are not split over a host's replicas: the bridge joins them per host before deduplicating.

    Args:
      call_input_fn: calls the user's `input_fn` with a `TPUContext`.
      ctx: the `ShardingContext` of the mode.
      settings: the mode's `ShardedSettings` (its `batch_axis` and `embedding_config_spec`).
    """
    spec = settings.embedding_config_spec
    whole_host_keys = resolve_embedding_config(spec).raw_keys if spec is not None else ()
    pipeline = InputPipeline(call_input_fn, ctx, settings.batch_axis, whole_host_keys)
    return pipeline, pipeline.build()
