"""tensorflow_estimator's modules: `from tensorflow_estimator.python.estimator.tpu import tpu_estimator` etc.
(tensorflow/tpu models and T2T after TF 1.13 moved the Estimator out of TensorFlow)."""

import legacy_model
import tensorflow.compat.v1 as tf
from tensorflow_estimator.python.estimator import estimator as estimator_lib
from tensorflow_estimator.python.estimator import mode_keys
from tensorflow_estimator.python.estimator import run_config as run_config_lib
from tensorflow_estimator.python.estimator.tpu import tpu_config, tpu_estimator

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            tpu_estimator,
            configs=tpu_config,
            CrossShardOptimizer=tf.tpu.CrossShardOptimizer,
            ModeKeys=mode_keys.ModeKeys,
            TPUClusterResolver=tf.distribute.cluster_resolver.TPUClusterResolver,
            Estimator=estimator_lib.Estimator,
            BaseRunConfig=run_config_lib.RunConfig,
        )
    )
