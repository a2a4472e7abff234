"""`tf.contrib.tpu.*` and `tf.contrib.cluster_resolver` as attributes (google-research BERT's run_classifier.py)."""

import legacy_model
import tensorflow as tf

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            tf.contrib.tpu,
            CrossShardOptimizer=tf.contrib.tpu.CrossShardOptimizer,
            ModeKeys=tf.estimator.ModeKeys,
            TPUClusterResolver=tf.contrib.cluster_resolver.TPUClusterResolver,
        ),
        summary=tf.contrib.summary,
    )
