"""`ModeKeys`: the mode strings passed to `model_fn` and `input_fn` (`train`, `eval`, `infer`)."""

from tpu_estimator.estimator_core._tf_internal import EstimatorModeKeys

# TensorFlow core keeps the Estimator mode keys next to the SavedModel export helpers that use them.
ModeKeys = EstimatorModeKeys

__all__ = ["ModeKeys"]
