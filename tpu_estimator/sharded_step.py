"""The stages every mode on shards shares: settings, the embedding bridge, and `model_fn` replicated over shards.

TRAIN (`train_loop.py`), EVAL (`eval_loop.py`) and PREDICT (`predict_step.py`) each read top to bottom as
read inputs -> embedding lookup -> replicate `model_fn` -> their own reduction on the host; this module holds the
stages they have in common.
"""

import dataclasses
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from tpu_estimator import _estimator_lib, _tf_internal, replication, stamping
from tpu_estimator.context import ShardingContext, TPUContext
from tpu_estimator.embedding_bridge import EmbeddingBridge
from tpu_estimator.embedding_spec import EmbeddingConfigSpec, resolve_embedding_config
from tpu_estimator.input_pipeline import InputPipeline
from tpu_estimator.spec import call_user_model_fn, verify_spec_on_shards

ModeKeys = _estimator_lib.ModeKeys


@dataclasses.dataclass(frozen=True)
class ShardedSettings:
    """What every mode on shards needs from the estimator, fixed for one `model_fn` call.

    Attributes:
      model_fn: the user's `model_fn`.
      config: the `RunConfig` passed to `model_fn`.
      params: the params passed to `model_fn` (without `batch_size`/`context`, added per replica).
      batch_axis: the estimator's `batch_axis` (PER_HOST_V1/SLICED split axes), or None.
      embedding_config_spec: the estimator's `EmbeddingConfigSpec`, or None.
    """

    model_fn: Callable
    config: Any
    params: dict
    batch_axis: Optional[Sequence[int]]
    embedding_config_spec: Optional[EmbeddingConfigSpec]


class Replicas(NamedTuple):
    """The specs `model_fn` returned, one per replica (replica 0's side effects run), and the reductions built."""

    specs: List[Any]
    num_reductions: int


def build_input_pipeline(
    settings: ShardedSettings, ctx: ShardingContext, call_input_fn: Callable[[TPUContext], Any]
) -> Tuple[InputPipeline, List[tf.compat.v1.train.SessionRunHook]]:
    """Calls `input_fn` as the input mode says; returns `(pipeline, hooks that start the input)`.

    The embedding inputs are not split over a host's replicas: the bridge joins them per host before deduplicating.
    """
    spec = settings.embedding_config_spec
    whole_host_keys = resolve_embedding_config(spec).raw_keys if spec is not None else ()
    pipeline = InputPipeline(call_input_fn, ctx, settings.batch_axis, whole_host_keys)
    return pipeline, pipeline.build()


def embedding_bridge(settings: ShardedSettings, ctx: ShardingContext) -> Optional[EmbeddingBridge]:
    """The bridge to the embedding engine for this mode, or None without an `EmbeddingConfigSpec`."""
    if settings.embedding_config_spec is None:
        return None
    return EmbeddingBridge(
        settings.embedding_config_spec,
        ctx.num_replicas,
        ctx.replica_devices,
        ctx.mode,
        ctx.batch_size_for_model_fn,
        ctx.host_device,
        python_ops=not ctx.on_cluster,
        host_devices=ctx.host_devices if ctx.on_cluster else None,
    )


def replicate_model_fn(
    settings: ShardedSettings, ctx: ShardingContext, per_replica: List[Any], bridge: Optional[EmbeddingBridge]
) -> Replicas:
    """Builds `model_fn` for every replica, on its device, on that replica's `(features, labels)`.

    On one host, `model_fn` is called once, as a TPU traces it once: replica 0 is built and the other replicas
    are copies of its ops (`stamping.py`). On a cluster, `model_fn` is called once per replica
    (`replication.build_replicas`), so that each host reads a variable once per step. In TRAIN the embedding
    activations pass through the bridge's gradient tap. With `xla_compile_shards`, the replicas' ops are marked
    for XLA compilation.
    """
    mode = ctx.mode

    def replica_fn(replica_id: int):
        features, labels = per_replica[replica_id]
        if bridge is not None:
            features = bridge.tap_activations(features)
        params = dict(settings.params)
        params["batch_size"] = ctx.batch_size_for_model_fn
        params["use_tpu"] = True
        params["context"] = TPUContext(ctx, call_from_input_fn=False)
        spec = call_user_model_fn(settings.model_fn, features, labels, mode, settings.config, params)
        return verify_spec_on_shards(spec, mode)

    graph = tf.compat.v1.get_default_graph()
    first_op = len(graph.get_operations())
    if ctx.num_replicas > 1 and not ctx.on_cluster:
        replicas = _stamped_replicas(replica_fn, ctx.replica_devices, per_replica, bridge)
    else:
        built = replication.build_replicas(replica_fn, ctx.replica_devices)
        replicas = Replicas(built.outputs, built.num_reductions)
    if ctx.config.xla_compile_shards:
        _tf_internal.mark_for_xla_compilation(graph.get_operations()[first_op:])
    return replicas


# What the modes read from a replica's spec besides replica 0's (the other fields are replica 0's).
_PER_REPLICA_FIELDS = ("loss", "predictions", "eval_metrics", "host_call")


def _stamped_replicas(
    replica_fn: Callable[[int], Any], devices: Sequence[str], per_replica: List[Any], bridge: Optional[EmbeddingBridge]
) -> Replicas:
    """`model_fn` traced once on replica 0; each other replica's spec and tapped gradients are copies of its own."""
    stamped = stamping.stamp_replicas(replica_fn, devices, per_replica)
    spec = stamped.output
    fields = {name: getattr(spec, name) for name in _PER_REPLICA_FIELDS if getattr(spec, name, None) is not None}
    taps = bridge.tapped_gradients(0) if bridge is not None else {}
    specs = [spec]
    for replica in range(1, len(devices)):
        replica_fields, replica_taps = stamped.to_replica(replica, (fields, taps))
        specs.append(spec._replace(**replica_fields))
        if bridge is not None:
            bridge.set_tapped_gradients(replica, replica_taps)
    return Replicas(specs, stamped.num_reductions)


def read_step_with_embeddings(pipeline: InputPipeline, bridge: Optional[EmbeddingBridge]) -> List[Tuple[Any, Any]]:
    """EVAL: one step's input and, with embeddings, its activations looked up in the same step.

    Returns:
      Each replica's `(features, labels)`.
    """
    per_replica = pipeline.next_step().per_replica
    if bridge is None:
        return per_replica
    return bridge.prepare(per_replica)[0]
