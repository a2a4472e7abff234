"""PREDICT on shards: one step per `Session.run`.

read inputs, padded to the predict batch (`input_pipeline.py`) -> embedding lookup (`embedding_bridge.py`, tables
read-only) -> replicate `model_fn` (`sharded_step.replicate_model_fn`) -> the predictions of all replicas joined on
the host, padded rows dropped.
"""

import tensorflow as tf

from tpu_estimator import _estimator_lib, sharded_step
from tpu_estimator.context import ShardingContext
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
    per_replica, masks = sharded_step.read_step_with_embeddings(pipeline, bridge)
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
        prediction_hooks=list(input_hooks) + list(spec.prediction_hooks),
        scaffold=call_scaffold_fn(spec.scaffold_fn),
    )


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
