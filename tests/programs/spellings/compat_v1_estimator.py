"""`import tensorflow as tf`, then `tf.compat.v1.estimator.tpu.*` (TF 2 programs)."""

import legacy_model
import tensorflow as tf

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            tf.compat.v1.estimator.tpu,
            CrossShardOptimizer=tf.compat.v1.tpu.CrossShardOptimizer,
            ModeKeys=tf.compat.v1.estimator.ModeKeys,
            TPUClusterResolver=tf.compat.v1.distribute.cluster_resolver.TPUClusterResolver,
            Estimator=tf.compat.v1.estimator.Estimator,
            BaseRunConfig=tf.compat.v1.estimator.RunConfig,
        )
    )
