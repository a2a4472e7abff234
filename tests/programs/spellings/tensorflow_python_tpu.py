"""`from tensorflow.python.tpu import tpu_config, tpu_estimator, tpu_optimizer` (Mesh TensorFlow, T5): TensorFlow's
stubs of tensorflow_estimator's TPU modules, with TensorFlow's own `CrossShardOptimizer`."""

import legacy_model
import tensorflow.compat.v1 as tf
from tensorflow.python.tpu import tpu_config, tpu_estimator, tpu_optimizer

if __name__ == "__main__":
    legacy_model.run(
        dict(
            TPUEstimator=tpu_estimator.TPUEstimator,
            TPUEstimatorSpec=tpu_estimator.TPUEstimatorSpec,
            RunConfig=tpu_config.RunConfig,
            TPUConfig=tpu_config.TPUConfig,
            PER_HOST_V2=tpu_config.InputPipelineConfig.PER_HOST_V2,
            CrossShardOptimizer=tpu_optimizer.CrossShardOptimizer,
            ModeKeys=tf.estimator.ModeKeys,
            TPUClusterResolver=tf.distribute.cluster_resolver.TPUClusterResolver,
        )
    )
