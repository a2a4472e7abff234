"""Everything for SavedModel export in one namespace: receivers, receiver-fn builders, outputs, signatures."""

from tpu_estimator.estimator_core._tf_internal import (
    EXPORT_TAG_MAP,
    SIGNATURE_KEY_MAP,
    build_all_signature_defs,
    export_outputs_for_mode,
    get_export_outputs,
    get_temp_export_dir,
    get_timestamped_export_dir,
)
from tpu_estimator.estimator_core.export_output import (
    ClassificationOutput,
    EvalOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
    TrainOutput,
)
from tpu_estimator.estimator_core.serving_input import (
    ServingInputReceiver,
    SupervisedInputReceiver,
    TensorServingInputReceiver,
    UnsupervisedInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
    build_raw_supervised_input_receiver_fn,
    build_supervised_input_receiver_fn_from_input_fn,
    wrap_and_check_input_tensors,
)

__all__ = [
    "EXPORT_TAG_MAP",
    "SIGNATURE_KEY_MAP",
    "ClassificationOutput",
    "EvalOutput",
    "ExportOutput",
    "PredictOutput",
    "RegressionOutput",
    "ServingInputReceiver",
    "SupervisedInputReceiver",
    "TensorServingInputReceiver",
    "TrainOutput",
    "UnsupervisedInputReceiver",
    "build_all_signature_defs",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
    "build_raw_supervised_input_receiver_fn",
    "build_supervised_input_receiver_fn_from_input_fn",
    "export_outputs_for_mode",
    "get_export_outputs",
    "get_temp_export_dir",
    "get_timestamped_export_dir",
    "wrap_and_check_input_tensors",
]
