"""The `ExportOutput` classes of SavedModel signatures (TensorFlow core keeps them in `model_utils`)."""

from tensorflow.python.saved_model.model_utils.export_output import (
    ClassificationOutput,
    EvalOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
    TrainOutput,
)

__all__ = ["ClassificationOutput", "EvalOutput", "ExportOutput", "PredictOutput", "RegressionOutput", "TrainOutput"]
