"""`from tensorflow.python.estimator import estimator as estimator_lib` (TF 1.x programs that reached into
TensorFlow's Estimator modules), with the TPU names from `tf.compat.v1.estimator.tpu`."""

import legacy_model
import tensorflow as tf
from tensorflow.python.estimator import estimator as estimator_lib
from tensorflow.python.estimator import model_fn as model_fn_lib
from tensorflow.python.estimator import run_config as run_config_lib

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            tf.compat.v1.estimator.tpu,
            CrossShardOptimizer=tf.compat.v1.tpu.CrossShardOptimizer,
            ModeKeys=model_fn_lib.ModeKeys,
            TPUClusterResolver=tf.distribute.cluster_resolver.TPUClusterResolver,
            Estimator=estimator_lib.Estimator,
            BaseRunConfig=run_config_lib.RunConfig,
        )
    )
