"""`ModeKeys`: the mode strings passed to `model_fn` and `input_fn` (`train`, `eval`, `infer`)."""

from tensorflow.python.saved_model.model_utils import mode_keys as _tf_mode_keys

# TensorFlow core keeps the Estimator mode keys next to the SavedModel export helpers that use them.
ModeKeys = _tf_mode_keys.EstimatorModeKeys

__all__ = ["ModeKeys"]
