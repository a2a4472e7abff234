"""`tf.contrib.tpu.*` and `tf.contrib.cluster_resolver` as attributes (google-research BERT's run_classifier.py)."""

import legacy_model
import tensorflow as tf

if __name__ == "__main__":
    legacy_model.run(
        dict(
            TPUEstimator=tf.contrib.tpu.TPUEstimator,
            TPUEstimatorSpec=tf.contrib.tpu.TPUEstimatorSpec,
            RunConfig=tf.contrib.tpu.RunConfig,
            TPUConfig=tf.contrib.tpu.TPUConfig,
            PER_HOST_V2=tf.contrib.tpu.InputPipelineConfig.PER_HOST_V2,
            CrossShardOptimizer=tf.contrib.tpu.CrossShardOptimizer,
            ModeKeys=tf.estimator.ModeKeys,
            TPUClusterResolver=tf.contrib.cluster_resolver.TPUClusterResolver,
        ),
        summary=tf.contrib.summary,
    )
