"""`import tensorflow as tf`, then `tf.estimator.tpu.*` (TF 1.13+ programs) and `tf.compat.v1.tpu`.

(No isinstance check against `tf.estimator.Estimator`: on TensorFlow 2.x that is the V2 class, which upstream's
TPUEstimator, a V1 Estimator, is not an instance of either.)
"""

import legacy_model
import tensorflow as tf

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            tf.estimator.tpu,
            CrossShardOptimizer=tf.compat.v1.tpu.CrossShardOptimizer,
            ModeKeys=tf.estimator.ModeKeys,
            TPUClusterResolver=tf.distribute.cluster_resolver.TPUClusterResolver,
            BaseRunConfig=tf.estimator.RunConfig,
        )
    )
