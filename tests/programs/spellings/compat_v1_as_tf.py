"""`import tensorflow.compat.v1 as tf` (google-research ALBERT, later tensorflow/tpu models), then both
`tf.estimator.tpu.*` and `tf.compat.v1.estimator.tpu.*` inside it."""

import legacy_model
import tensorflow.compat.v1 as tf

if __name__ == "__main__":
    legacy_model.run(
        dict(
            TPUEstimator=tf.compat.v1.estimator.tpu.TPUEstimator,
            TPUEstimatorSpec=tf.estimator.tpu.TPUEstimatorSpec,
            RunConfig=tf.estimator.tpu.RunConfig,
            TPUConfig=tf.compat.v1.estimator.tpu.TPUConfig,
            CrossShardOptimizer=tf.tpu.CrossShardOptimizer,
            ModeKeys=tf.estimator.ModeKeys,
            TPUClusterResolver=tf.distribute.cluster_resolver.TPUClusterResolver,
            Estimator=tf.compat.v1.estimator.Estimator,
            BaseRunConfig=tf.estimator.RunConfig,
        )
    )
