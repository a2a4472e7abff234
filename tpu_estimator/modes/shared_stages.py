"""The stages every mode on shards shares: settings, the embedding bridge, and `model_fn` replicated over shards.

TRAIN (`train_loop.py`), EVAL (`eval_loop.py`) and PREDICT (`predict_step.py`) each read top to bottom as
read inputs -> embedding lookup -> replicate `model_fn` -> their own reduction on the host; this module holds the
stages they have in common.
"""

import abc
import dataclasses
from typing import Any, Callable, List, NamedTuple, Optional, Sequence

import tensorflow as tf

from tpu_estimator import _estimator_lib, _tf_internal
from tpu_estimator.embedding_stage import embedding_exchange
from tpu_estimator.embedding_stage.embedding_bridge import EmbeddingBridge, TappedGradients
from tpu_estimator.hosts.collectives import HostCollectives
from tpu_estimator.replicas import replication, stamping
from tpu_estimator.specs.context import ShardingContext, TPUContext
from tpu_estimator.specs.embedding_spec import EmbeddingConfigSpec
from tpu_estimator.specs.spec import ModelFnSettings, TPUEstimatorSpec, call_user_model_fn, verify_spec_on_shards

ModeKeys = _estimator_lib.ModeKeys


@dataclasses.dataclass(frozen=True)
class ShardedSettings(ModelFnSettings):
    """What every mode on shards needs from the estimator, fixed for one `model_fn` call (`params` get
    `batch_size` and `context` per replica).

    Attributes:
      batch_axis: the estimator's `batch_axis` (PER_HOST_V1/SLICED split axes), or None.
      embedding_config_spec: the estimator's `EmbeddingConfigSpec`, or None.
    """

    batch_axis: Optional[Sequence[int]]
    embedding_config_spec: Optional[EmbeddingConfigSpec]


class ModeOnShards(abc.ABC):
    """Builds one mode's graph on shards (`TrainLoop`, `EvalLoop`, `PredictStep`) from fixed settings.

    Args:
      settings: what every mode on shards needs (`model_fn`, params, embedding spec, ...).
      ctx: the `ShardingContext` of the mode.
    """

    def __init__(self, settings: ShardedSettings, ctx: ShardingContext):
        self._settings = settings
        self._ctx = ctx

    @abc.abstractmethod
    def build(self, call_input_fn: Callable[[TPUContext], Any]) -> Any:
        """Calls `input_fn` (through `call_input_fn(context)`), builds the mode's graph and returns its
        `EstimatorSpec`."""


class Replicas(NamedTuple):
    """What replicating `model_fn` built.

    Attributes:
      specs: the specs `model_fn` returned (as `TPUEstimatorSpec`s), one per replica (replica 0's side effects run).
      num_reductions: the cross-replica reductions built.
      tapped_gradients: in TRAIN with embeddings, the activation gradients of every replica
        (`embedding_bridge.TappedGradients`); otherwise None.
    """

    specs: List[TPUEstimatorSpec]
    num_reductions: int
    tapped_gradients: Optional[TappedGradients] = None


def host_collectives(ctx: ShardingContext) -> Optional[HostCollectives]:
    """With one process per host, this host's collectives with the others (for one graph); otherwise None."""
    if not ctx.process_per_host:
        return None
    host = ctx.built_hosts[0]
    timeout_ms = ctx.config.session_config.operation_timeout_in_ms
    return HostCollectives(ctx.num_hosts, host, ctx.host_devices[host], timeout_ms / 1000.0)


def build_embedding_bridge(
    settings: ShardedSettings, ctx: ShardingContext, collectives: Optional[HostCollectives] = None
) -> Optional[EmbeddingBridge]:
    """The bridge to the embedding engine for this mode, or None without an `EmbeddingConfigSpec`.

    With one process per host (`collectives` given), the bridge does this host's part: its replicas' host stage,
    lookups on every host's shards and, in TRAIN, updates through the exchange of gradient pieces with the shards'
    owners (`embedding_exchange.py`).

    Raises:
      ValueError: `pipeline_execution_with_tensor_core` with one process per host (not built).
    """
    spec = settings.embedding_config_spec
    if spec is None:
        return None
    exchange = None
    if collectives is not None and ctx.mode == ModeKeys.TRAIN:
        if spec.pipeline_execution_with_tensor_core:
            raise ValueError(
                "EmbeddingConfigSpec(pipeline_execution_with_tensor_core=True) is not supported with one process per "
                "host yet: set it to False, or run the hosts from one client (docs/DISTRIBUTED.md)."
            )
        exchange = embedding_exchange.gradient_piece_exchange(
            collectives.host,
            ctx.replica_devices,
            [ctx.host_of_replica(r) for r in range(ctx.num_replicas)],
            ctx.host_work_device,
            embedding_exchange.new_generation(),
        )
    return EmbeddingBridge(
        spec,
        ctx.replica_devices,
        ctx.mode,
        ctx.batch_size_for_model_fn,
        [ctx.host_devices[h] for h in ctx.built_hosts],
        ctx.num_of_replicas_per_host,
        # A cluster's client cannot run Python on the hosts' devices.
        python_ops=not ctx.on_cluster,
        shard_exchange=exchange,
    )


def replicate_model_fn(
    settings: ShardedSettings,
    ctx: ShardingContext,
    per_replica: List[Any],
    bridge: Optional[EmbeddingBridge],
    collectives: Optional[HostCollectives] = None,
) -> Replicas:
    """Builds `model_fn` for every replica, on its device, on that replica's `(features, labels)`.

    On one host, `model_fn` is called once, as a TPU traces it once: replica 0 is built and the other replicas
    are copies of its ops (`stamping.py`). With one process per host (`collectives` given), the same for this host's
    replicas, and every reduction is summed across the hosts by a collective op. From a cluster's one client,
    `model_fn` is called once per replica (`replication.build_replicas`), so that each host reads a variable once per
    step. In TRAIN the embedding activations pass through the bridge's gradient tap. With `xla_compile_shards`, the
    replicas' ops are marked for XLA compilation.
    """
    mode = ctx.mode
    tapped = bridge.new_tap() if bridge is not None else None

    def replica_fn(replica_id: int):
        features, labels = per_replica[replica_id]
        if bridge is not None:
            features = bridge.tap_activations(features, tapped, replica_id)
        params = dict(settings.params)
        params["batch_size"] = ctx.batch_size_for_model_fn
        params["use_tpu"] = True
        params["context"] = TPUContext(ctx, call_from_input_fn=False)
        spec = call_user_model_fn(settings.model_fn, features, labels, mode, settings.config, params)
        return verify_spec_on_shards(spec, mode)

    graph = tf.compat.v1.get_default_graph()
    first_op = len(graph.get_operations())
    if collectives is not None:
        replicas = _stamped_replicas(replica_fn, ctx.built_replica_devices, per_replica, tapped, collectives)
    elif ctx.num_replicas > 1 and not ctx.on_cluster:
        replicas = _stamped_replicas(replica_fn, ctx.replica_devices, per_replica, tapped)
    else:
        built = replication.build_replicas(replica_fn, ctx.replica_devices)
        replicas = Replicas(built.outputs, built.num_reductions, tapped)
    if ctx.config.xla_compile_shards:
        _tf_internal.mark_for_xla_compilation(graph.get_operations()[first_op:])
    return replicas


# What the modes read from a replica's spec besides replica 0's (the other fields are replica 0's).
_PER_REPLICA_FIELDS = ("loss", "predictions", "eval_metrics", "host_call")


def _stamped_replicas(
    replica_fn: Callable[[int], Any],
    devices: Sequence[str],
    per_replica: List[Any],
    tapped: Optional[TappedGradients],
    collectives: Optional[HostCollectives] = None,
) -> Replicas:
    """`model_fn` traced once on replica 0; each other replica's spec and tapped gradients are copies of its own."""
    with stamping.building_replica0(devices, per_replica, collectives) as stamped:
        spec = replica_fn(0)
    fields = {name: getattr(spec, name) for name in _PER_REPLICA_FIELDS if getattr(spec, name) is not None}
    taps = tapped.of_replica(0) if tapped is not None else {}
    specs = [spec]
    for replica in range(1, len(devices)):
        replica_fields, replica_taps = stamped.to_replica(replica, (fields, taps))
        specs.append(spec._replace(**replica_fields))
        if tapped is not None:
            tapped.add_replica(replica, replica_taps)
    return Replicas(specs, stamped.num_reductions, tapped)
