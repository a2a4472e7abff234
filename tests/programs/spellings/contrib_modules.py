"""`from tensorflow.contrib import tpu as contrib_tpu` and friends (ALBERT, tensorflow/tpu models of TF 1.14-1.15)."""

import legacy_model
import tensorflow.compat.v1 as tf
from tensorflow.contrib import cluster_resolver as contrib_cluster_resolver
from tensorflow.contrib import summary
from tensorflow.contrib import tpu as contrib_tpu

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            contrib_tpu,
            CrossShardOptimizer=contrib_tpu.CrossShardOptimizer,
            ModeKeys=tf.estimator.ModeKeys,
            TPUClusterResolver=contrib_cluster_resolver.TPUClusterResolver,
        ),
        summary=summary,
    )
