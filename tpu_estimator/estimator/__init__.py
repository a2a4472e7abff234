"""`tf.estimator`-shaped names from the active Estimator core (see `tpu_estimator._estimator_lib`).

On TensorFlow 2.15 with tensorflow-estimator installed these are upstream's objects; on TensorFlow 2.16+ (or with
`TPU_ESTIMATOR_CORE=ours`) they are ours, from `tpu_estimator.estimator_core`. Programs write
`from tpu_estimator import estimator` and use `estimator.Estimator`, `estimator.ModeKeys`,
`estimator.export.ServingInputReceiver`, ... as they would `tf.estimator`.
"""

import tensorflow as tf

from tpu_estimator import _estimator_lib
from tpu_estimator.estimator import export

# The session hooks tf.estimator re-exports: TensorFlow core's objects, whichever core is active.
HOOK_NAMES = (
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "FeedFnHook",
    "FinalOpsHook",
    "GlobalStepWaiterHook",
    "LoggingTensorHook",
    "NanLossDuringTrainingError",
    "NanTensorHook",
    "ProfilerHook",
    "SecondOrStepTimer",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunHook",
    "SessionRunValues",
    "StepCounterHook",
    "StopAtStepHook",
    "SummarySaverHook",
)
globals().update({name: getattr(tf.compat.v1.train, name) for name in HOOK_NAMES})

Estimator = _estimator_lib.Estimator
EstimatorSpec = _estimator_lib.EstimatorSpec
ModeKeys = _estimator_lib.ModeKeys
RunConfig = _estimator_lib.BaseRunConfig
TrainSpec = _estimator_lib.TrainSpec
EvalSpec = _estimator_lib.EvalSpec
train_and_evaluate = _estimator_lib.train_and_evaluate
WarmStartSettings = _estimator_lib.WarmStartSettings
VocabInfo = _estimator_lib.VocabInfo
Exporter = _estimator_lib.Exporter
FinalExporter = _estimator_lib.FinalExporter
LatestExporter = _estimator_lib.LatestExporter
BestExporter = _estimator_lib.BestExporter

__all__ = list(HOOK_NAMES) + [
    "BestExporter",
    "Estimator",
    "EstimatorSpec",
    "EvalSpec",
    "Exporter",
    "FinalExporter",
    "LatestExporter",
    "ModeKeys",
    "RunConfig",
    "TrainSpec",
    "VocabInfo",
    "WarmStartSettings",
    "export",
    "train_and_evaluate",
]
