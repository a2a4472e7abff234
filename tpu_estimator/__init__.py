"""TPUEstimator programs on CPUs, GPUs and clusters of them.

The public API mirrors `tf.compat.v1.estimator.tpu` and `tf.compat.v1.tpu`.
"""

from tpu_estimator.context import TPUContext, UnsupportedOffTPUError
from tpu_estimator.replication import CrossShardOptimizer, cross_replica_sum, outside_compilation
from tpu_estimator.rewrite import rewrite
from tpu_estimator.spec import TPUEstimatorSpec
from tpu_estimator.tpu_config import InputPipelineConfig, RunConfig, TPUConfig
from tpu_estimator.tpu_estimator import ExportSavedModelApiVersion, TPUEstimator

__all__ = [
    "CrossShardOptimizer",
    "ExportSavedModelApiVersion",
    "InputPipelineConfig",
    "RunConfig",
    "TPUConfig",
    "TPUContext",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "UnsupportedOffTPUError",
    "cross_replica_sum",
    "outside_compilation",
    "rewrite",
]
