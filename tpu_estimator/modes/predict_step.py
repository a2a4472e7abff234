"""PREDICT on shards: one step per `Session.run`.

read inputs, padded to the predict batch (`input_pipeline.py`) -> embedding lookup (`embedding_bridge.py`, tables
read-only) -> replicate `model_fn` (`shared_stages.replicate_model_fn`) -> the predictions of all replicas joined on
the host, padded rows dropped.

With an `EmbeddingConfigSpec` the first two stages run ahead of the step, in the embedding infeed's thread
(`embedding_infeed.py`): while one batch's `model_fn` runs (and the Estimator hands its predictions out row by row),
the next batches are read and their activations looked up. Hooks still see one batch per `Session.run`.
"""

from typing import Any, List

import tensorflow as tf

from tpu_estimator import _estimator_lib
from tpu_estimator.modes import shared_stages
from tpu_estimator.modes.step_feed import FeedSources, StepFeed
from tpu_estimator.specs.spec import call_scaffold_fn

ModeKeys = _estimator_lib.ModeKeys


class PredictStep(shared_stages.ModeOnShards):
    """Builds the PREDICT graph on shards: one step over every replica, its predictions and hooks."""

    def build(self, call_input_fn) -> _estimator_lib.EstimatorSpec:
        """Calls `input_fn`, builds the step, and returns its `EstimatorSpec` (predictions, hooks, scaffold).

        Raises:
          ValueError: no predictions, or predictions without a batch dimension.
        """
        collectives = shared_stages.host_collectives(self._ctx)
        bridge = shared_stages.build_embedding_bridge(self._settings, self._ctx, collectives)
        feed = StepFeed.for_prediction(FeedSources(call_input_fn, self._settings, self._ctx, bridge))
        inputs = feed.read()
        # With one process per host, each host predicts its own rows.
        specs = shared_stages.replicate_model_fn(
            self._settings, self._ctx, inputs.per_replica, bridge, collectives
        ).specs
        if bridge is not None:
            bridge.register_checkpoint_names(tf.compat.v1.get_default_graph())
        spec = specs[0]
        if spec.predictions is None:
            raise ValueError("model_fn must return predictions in PREDICT mode.")
        predictions = self._join_predictions([s.predictions for s in specs], inputs.padding_masks)
        return _estimator_lib.EstimatorSpec(
            mode=ModeKeys.PREDICT,
            predictions=predictions,
            # The infeed's hook last: the error of a bad batch is raised from its `end`, after every other hook's.
            prediction_hooks=feed.input_hooks
            + list(spec.prediction_hooks)
            + ([feed.infeed_hook] if feed.infeed_hook else []),
            scaffold=call_scaffold_fn(spec.scaffold_fn),
        )

    def _join_predictions(self, per_replica_predictions: List[Any], masks: List[tf.Tensor]) -> Any:
        """The predictions of every replica joined on the host, without the padded rows."""
        with tf.device(self._ctx.host_work_device):
            mask = tf.concat(masks, axis=0) if len(masks) > 1 else masks[0]

            def gather(*replica_values):
                replica_values = [_with_batch(t, m.shape[0]) for t, m in zip(replica_values, masks)]
                joined = tf.concat(replica_values, axis=0) if len(replica_values) > 1 else replica_values[0]
                return tf.boolean_mask(joined, mask)

            return tf.nest.map_structure(gather, *per_replica_predictions)


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
