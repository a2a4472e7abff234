"""PREDICT on shards: one step per `Session.run`.

read inputs, padded to the predict batch (`input_pipeline.py`) -> embedding lookup (`embedding_bridge.py`, tables
read-only) -> replicate `model_fn` (`shared_stages.replicate_model_fn`) -> the predictions of all replicas joined on
the host, padded rows dropped.

With an `EmbeddingConfigSpec` the first two stages run ahead of the step, in the embedding infeed's thread
(`embedding_infeed.py`): while one batch's `model_fn` runs (and the Estimator hands its predictions out row by row),
the next batches are read and their activations looked up. Hooks still see one batch per `Session.run`.

The end of the input is a value, not an error: the readers then give every replica an all-padding batch, and
`EndOfPredictionInput` ends `predict()` after that step, yielding none of it (upstream's stopping signal). An input
that ended as an error inside TensorFlow's runtime would be logged by it as an aborted run.
"""

from typing import Any, List

import tensorflow as tf

from tpu_estimator import _estimator_lib, shared_stages
from tpu_estimator.spec import call_scaffold_fn
from tpu_estimator.step_feed import FeedSources, StepFeed

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
        with tf.device(self._ctx.host_work_device):
            has_rows = tf.reduce_any(tf.concat(inputs.padding_masks, axis=0))
        return _estimator_lib.EstimatorSpec(
            mode=ModeKeys.PREDICT,
            predictions=predictions,
            # The end first: no other hook sees the all-padding step. The infeed's hook last: the error of a bad
            # batch is raised from its `end`, after every other hook's.
            prediction_hooks=[EndOfPredictionInput(has_rows)]
            + feed.input_hooks
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


class EndOfPredictionInput(tf.compat.v1.train.SessionRunHook):
    """Ends `predict()` after a step without a real row: the input had ended (every replica's batch is padding).

    It raises `OutOfRangeError` from `after_run`, as a read past the end would from the run, so the Estimator yields
    nothing of that step and ends; the session's hooks still end normally.

    Args:
      has_rows: whether the step's batch holds a real row.
    """

    def __init__(self, has_rows: tf.Tensor):
        self._has_rows = has_rows

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._has_rows)

    def after_run(self, run_context, run_values):
        if not run_values.results:
            raise tf.errors.OutOfRangeError(None, None, "The prediction input ended.")


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
