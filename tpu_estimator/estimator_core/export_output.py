"""The `ExportOutput` classes of SavedModel signatures (TensorFlow core keeps them in `model_utils`)."""

from tpu_estimator.estimator_core._tf_internal import (
    ClassificationOutput,
    EvalOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
    TrainOutput,
)

__all__ = ["ClassificationOutput", "EvalOutput", "ExportOutput", "PredictOutput", "RegressionOutput", "TrainOutput"]
