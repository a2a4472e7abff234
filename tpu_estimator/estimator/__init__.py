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

# name -> its name in the active core (`_estimator_lib`).
CORE_NAMES = {
    "BestExporter": "BestExporter",
    "Estimator": "Estimator",
    "EstimatorSpec": "EstimatorSpec",
    "EvalSpec": "EvalSpec",
    "Exporter": "Exporter",
    "FinalExporter": "FinalExporter",
    "LatestExporter": "LatestExporter",
    "ModeKeys": "ModeKeys",
    "RunConfig": "BaseRunConfig",
    "TrainSpec": "TrainSpec",
    "VocabInfo": "VocabInfo",
    "WarmStartSettings": "WarmStartSettings",
    "train_and_evaluate": "train_and_evaluate",
}
globals().update({name: getattr(_estimator_lib, core_name) for name, core_name in CORE_NAMES.items()})

__all__ = list(HOOK_NAMES) + list(CORE_NAMES) + ["export"]
