"""Our Estimator core: `tf.estimator`'s Estimator, specs, RunConfig and export helpers on TensorFlow core.

TensorFlow 2.16+ no longer ships `tf.estimator`; this package provides the parts Estimator and TPUEstimator
programs use, built on what TensorFlow core still has (`MonitoredTrainingSession`, `Saver`, session hooks,
`saved_model.Builder`, `model_utils`, `warm_start`). `tpu_estimator._estimator_lib` selects it (or upstream's
`tensorflow_estimator` where that imports); `tpu_estimator.estimator` is the public, `tf.estimator`-shaped namespace.
"""

from tpu_estimator.estimator_core import export_lib, export_output
from tpu_estimator.estimator_core.checkpoint_step import load_global_step_from_checkpoint_dir
from tpu_estimator.estimator_core.cluster import TaskType
from tpu_estimator.estimator_core.estimator import Estimator
from tpu_estimator.estimator_core.exporters import BestExporter, Exporter, FinalExporter, LatestExporter
from tpu_estimator.estimator_core.inputs import fn_args, parse_input_fn_result
from tpu_estimator.estimator_core.mode_keys import ModeKeys
from tpu_estimator.estimator_core.model_fn import EstimatorSpec, verify_model_fn_args
from tpu_estimator.estimator_core.run_config import RunConfig, get_default_session_config
from tpu_estimator.estimator_core.training import EvalSpec, TrainSpec, train_and_evaluate
from tpu_estimator.estimator_core.warm_starting import VocabInfo, WarmStartSettings

__all__ = [
    "BestExporter",
    "Estimator",
    "EstimatorSpec",
    "EvalSpec",
    "Exporter",
    "FinalExporter",
    "LatestExporter",
    "ModeKeys",
    "RunConfig",
    "TaskType",
    "TrainSpec",
    "VocabInfo",
    "WarmStartSettings",
    "export_lib",
    "export_output",
    "fn_args",
    "get_default_session_config",
    "load_global_step_from_checkpoint_dir",
    "parse_input_fn_result",
    "train_and_evaluate",
    "verify_model_fn_args",
]
