"""`from tensorflow.python.tpu import tpu_config, tpu_estimator, tpu_optimizer` (Mesh TensorFlow, T5): TensorFlow's
stubs of tensorflow_estimator's TPU modules, with TensorFlow's own `CrossShardOptimizer`."""

import legacy_model
import tensorflow.compat.v1 as tf
from tensorflow.python.tpu import tpu_config, tpu_estimator, tpu_optimizer

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            tpu_estimator,
            configs=tpu_config,
            CrossShardOptimizer=tpu_optimizer.CrossShardOptimizer,
            ModeKeys=tf.estimator.ModeKeys,
            TPUClusterResolver=tf.distribute.cluster_resolver.TPUClusterResolver,
        )
    )
