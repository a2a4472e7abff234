"""`import tensorflow_estimator as tf_estimator`, then `tf_estimator.estimator.*` (albert_zh-style programs)."""

import legacy_model
import tensorflow as tf
import tensorflow_estimator as tf_estimator

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            tf_estimator.estimator.tpu,
            CrossShardOptimizer=tf.compat.v1.tpu.CrossShardOptimizer,
            ModeKeys=tf_estimator.estimator.ModeKeys,
            TPUClusterResolver=tf.distribute.cluster_resolver.TPUClusterResolver,
            Estimator=tf_estimator.estimator.Estimator,
            BaseRunConfig=tf_estimator.estimator.RunConfig,
        )
    )
