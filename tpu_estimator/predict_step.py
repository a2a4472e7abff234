"""PREDICT on shards: one step per `Session.run`.

read inputs, padded to the predict batch (`input_pipeline.py`) -> embedding lookup (`embedding_bridge.py`, tables
read-only) -> replicate `model_fn` (`sharded_step.replicate_model_fn`) -> the predictions of all replicas joined on
the host, padded rows dropped.

With an `EmbeddingConfigSpec` the first two stages run ahead of the step, in the embedding infeed's thread
(`embedding_infeed.py`): while one batch's `model_fn` runs (and the Estimator hands its predictions out row by row),
the next batches are read and their activations looked up. Hooks still see one batch per `Session.run`.
"""

from typing import Any, List, Optional, Tuple

import tensorflow as tf

from tpu_estimator import _estimator_lib, embedding_infeed, sharded_step
from tpu_estimator.context import ShardingContext
from tpu_estimator.embedding_bridge import EmbeddingBridge
from tpu_estimator.embedding_infeed import EmbeddingInfeed
from tpu_estimator.input_pipeline import InputPipeline
from tpu_estimator.spec import call_scaffold_fn

ModeKeys = _estimator_lib.ModeKeys


def build_predict(
    settings: sharded_step.ShardedSettings, ctx: ShardingContext, call_input_fn
) -> _estimator_lib.EstimatorSpec:
    """Calls `input_fn` and builds one prediction step over every replica; returns its `EstimatorSpec`.

    Raises:
      ValueError: no predictions, or predictions without a batch dimension.
    """
    pipeline, input_hooks = sharded_step.build_input_pipeline(settings, ctx, call_input_fn)
    bridge = sharded_step.embedding_bridge(settings, ctx)
    per_replica, masks, infeed_hook = _read_step(pipeline, bridge, ctx)
    specs = sharded_step.replicate_model_fn(settings, ctx, per_replica, bridge).specs
    if bridge is not None:
        bridge.register_checkpoint_names(tf.compat.v1.get_default_graph())
    spec = specs[0]
    if spec.predictions is None:
        raise ValueError("model_fn must return predictions in PREDICT mode.")
    with tf.device(ctx.host_device):
        mask = tf.concat(masks, axis=0) if len(masks) > 1 else masks[0]

        def gather(*per_replica_predictions):
            per_replica_predictions = [_with_batch(t, m.shape[0]) for t, m in zip(per_replica_predictions, masks)]
            joined = (
                tf.concat(per_replica_predictions, axis=0)
                if len(per_replica_predictions) > 1
                else per_replica_predictions[0]
            )
            return tf.boolean_mask(joined, mask)

        predictions = tf.nest.map_structure(gather, *[s.predictions for s in specs])
    return _estimator_lib.EstimatorSpec(
        mode=ModeKeys.PREDICT,
        predictions=predictions,
        # The infeed's hook last: the error of a bad batch is raised from its `end`, after every other hook's.
        prediction_hooks=list(input_hooks) + list(spec.prediction_hooks) + ([infeed_hook] if infeed_hook else []),
        scaffold=call_scaffold_fn(spec.scaffold_fn),
    )


def _read_step(
    pipeline: InputPipeline, bridge: Optional[EmbeddingBridge], ctx: ShardingContext
) -> Tuple[List[Tuple[Any, Any]], List[tf.Tensor], Optional[tf.compat.v1.train.SessionRunHook]]:
    """Stages 1-2: each replica's `(features, labels)` with its activations, the padding masks, and the hook of the
    embedding infeed that runs them ahead of the step (None without embeddings: the input's own prefetching is the
    lookahead then)."""
    if bridge is None:
        step = pipeline.next_step()
        return step.per_replica, step.padding_masks, None

    def read_and_look_up() -> embedding_infeed.HostParts:
        step = pipeline.next_step()
        per_replica, _ = bridge.prepare(step.per_replica)
        return bridge.per_host(list(zip(per_replica, step.padding_masks)))

    # One batch per run of the thread: the step itself takes a Session.run per batch, so the thread's runs cost no
    # more than the step's. A bad batch fails after the batches before it are predicted, as without the lookahead.
    infeed = EmbeddingInfeed(read_and_look_up, ctx.host_device, 1, errors_in_order=True)
    replicas = [replica for host_replicas in infeed.dequeue() for replica in host_replicas]
    return [inputs for inputs, _ in replicas], [mask for _, mask in replicas], infeed.hook


def _with_batch(tensor: tf.Tensor, batch_size: int) -> tf.Tensor:
    """A replica's prediction with its static batch dimension: the replica's padded batch size.

    A dynamic batch (e.g. the output of a sparse lookup) is checked when the step runs.

    Raises:
      ValueError: the prediction has no batch dimension (a scalar or unknown rank).
    """
    if tensor.shape.rank is None or tensor.shape.rank == 0:
        raise ValueError(
            "Predictions on shards must have a batch dimension (one row per input row); got {}.".format(tensor)
        )
    if tensor.shape[0] is None:
        return tf.ensure_shape(tensor, [batch_size] + tensor.shape.as_list()[1:])
    return tensor
