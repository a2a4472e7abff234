"""`import tensorflow as tf`, then `tf.compat.v1.estimator.tpu.*` (TF 2 programs)."""

import legacy_model
import tensorflow as tf

if __name__ == "__main__":
    legacy_model.run(
        dict(
            TPUEstimator=tf.compat.v1.estimator.tpu.TPUEstimator,
            TPUEstimatorSpec=tf.compat.v1.estimator.tpu.TPUEstimatorSpec,
            RunConfig=tf.compat.v1.estimator.tpu.RunConfig,
            TPUConfig=tf.compat.v1.estimator.tpu.TPUConfig,
            CrossShardOptimizer=tf.compat.v1.tpu.CrossShardOptimizer,
            ModeKeys=tf.compat.v1.estimator.ModeKeys,
            TPUClusterResolver=tf.compat.v1.distribute.cluster_resolver.TPUClusterResolver,
            Estimator=tf.compat.v1.estimator.Estimator,
            BaseRunConfig=tf.compat.v1.estimator.RunConfig,
        )
    )
