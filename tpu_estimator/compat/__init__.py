"""Run unmodified TPUEstimator programs: put our implementations behind TensorFlow's TPU names.

`install()` replaces, in the live `tensorflow` modules:

* `tf.compat.v1.estimator.tpu.{TPUEstimator, TPUEstimatorSpec, RunConfig, TPUConfig, InputPipelineConfig}` and
  `tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec`; TF2 has no `tf.estimator.tpu`, so one is added
  with the same names (for TF1-era programs that spell it so).
* `tf.compat.v1.tpu.{CrossShardOptimizer, cross_replica_sum, outside_compilation, rewrite, shard, replicate,
  batch_parallel, initialize_system, shutdown_system, bfloat16_scope}` and
  `tf.compat.v1.tpu.experimental.{Adagrad,Adam,Ftrl,StochasticGradientDescent}Parameters` (from `embedding`).
* `TPUClusterResolver` in `tf.distribute.cluster_resolver`, `tf.compat.v1.distribute.cluster_resolver` and
  `tf.compat.v2.distribute.cluster_resolver` (also `tpu_estimator.compat.TPUClusterResolver`): a resolver that
  needs no Cloud TPU API; local, or the cluster of the `grpc://` worker addresses it is given.
* TF1 `tensorflow.contrib.tpu`, `tensorflow.contrib.cluster_resolver` and `tensorflow.contrib.summary`, as
  importable modules (`from tensorflow.contrib import tpu`) and as `tf.contrib` on both `tensorflow` and
  `tensorflow.compat.v1`. Only these contrib modules exist; other `tf.contrib` names raise an AttributeError
  that lists what is provided. The TF 1.x module paths below them are provided too
  (`from tensorflow.contrib.tpu.python.tpu import tpu_estimator, tpu_config, tpu_optimizer`, see `legacy_modules`).
* With our Estimator core (TensorFlow 2.16+, or `TPU_ESTIMATOR_CORE=ours`): `tensorflow_estimator` (`import
  tensorflow_estimator as tf_estimator`, `from tensorflow_estimator.python.estimator.tpu import tpu_estimator`, ...)
  and `tensorflow.python.estimator.*` as modules of our classes. With upstream's core (TensorFlow 2.15) upstream's
  modules stay, and the TPU names in them (`tensorflow_estimator.python.estimator.tpu.tpu_estimator.TPUEstimator`,
  `...tpu_config.RunConfig`, `tensorflow_estimator.estimator.tpu.*`) become ours.
* `estimator` and `contrib` also in the `compat` modules inside the API (`import tensorflow.compat.v1 as tf` then
  `tf.compat.v1.estimator.tpu.TPUEstimator`).

On TensorFlow 2.16+, which has no `tf.estimator`, `install()` adds one: `tf.estimator`, `tf.compat.v1.estimator` and
`tf.compat.v2.estimator` (also importable as `tensorflow.estimator` etc.) hold the names of
`tpu_estimator.estimator` (our Estimator core: `Estimator`, `EstimatorSpec`, `ModeKeys`, `RunConfig`,
`TrainSpec`, `EvalSpec`, `train_and_evaluate`, `WarmStartSettings`, `export.*`) plus `tpu` and `tpu.experimental`
with the TPUEstimator names above. Other `tf.estimator` names (canned estimators) raise an AttributeError that
lists what is provided.

`tf.compat.v1.tpu.experimental.embedding_column`/`shared_embedding_columns` stay TensorFlow's: our
`EmbeddingConfigSpec` reads those feature columns.

Names bound before `install()` (`from tensorflow.compat.v1.estimator.tpu import TPUEstimator` executed
earlier) keep TensorFlow's objects: install first, then import the program (the launcher
`tpu_estimator.compat.launcher` does this). `uninstall()` puts every replaced object back and removes what was added.
"""

from tpu_estimator import _lazy_names

# Public names and the submodule defining each. They are imported on first use, so that importing the launcher
# (`tpu_estimator.compat.launcher`) does not import TensorFlow before it has quieted its logs.
_EXPORTS = {
    "install": "patching",
    "uninstall": "patching",
    "is_installed": "patching",
    "batch_parallel": "tpu_ops",
    "bfloat16_scope": "tpu_ops",
    "initialize_system": "tpu_ops",
    "replicate": "tpu_ops",
    "shard": "tpu_ops",
    "shutdown_system": "tpu_ops",
    "TPUClusterResolver": "cluster_resolver",
}
# Submodules, also imported on first use as attributes (`tpu_estimator.compat.cluster_resolver`).
_SUBMODULES = (
    "cluster_resolver",
    "launcher",
    "legacy_modules",
    "namespaces",
    "patching",
    "tf2_names",
    "tpu_ops",
    "tpu_strategy",
)

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy_names.lazy_names(__name__, _EXPORTS, _SUBMODULES)
