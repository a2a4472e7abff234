"""`tf.estimator.export`-shaped names (serving input receivers, receiver-fn builders, export outputs) from the
active Estimator core."""

from tpu_estimator import _estimator_lib

_export_lib = _estimator_lib.export_lib

ServingInputReceiver = _export_lib.ServingInputReceiver
TensorServingInputReceiver = _export_lib.TensorServingInputReceiver
build_parsing_serving_input_receiver_fn = _export_lib.build_parsing_serving_input_receiver_fn
build_raw_serving_input_receiver_fn = _export_lib.build_raw_serving_input_receiver_fn
ExportOutput = _export_lib.ExportOutput
PredictOutput = _export_lib.PredictOutput
ClassificationOutput = _export_lib.ClassificationOutput
RegressionOutput = _export_lib.RegressionOutput
EvalOutput = _export_lib.EvalOutput

__all__ = [
    "ClassificationOutput",
    "EvalOutput",
    "ExportOutput",
    "PredictOutput",
    "RegressionOutput",
    "ServingInputReceiver",
    "TensorServingInputReceiver",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
]
