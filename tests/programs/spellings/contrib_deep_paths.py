"""TF 1.x module paths: `from tensorflow.contrib.tpu.python.tpu import tpu_config, tpu_estimator, tpu_optimizer`
(tensorflow/tpu models of TF 1.5-1.12, Tensor2Tensor), the cluster resolver's and summary's `python` modules, and
`from tensorflow.python.estimator import model_fn as model_fn_lib`."""

import legacy_model
from tensorflow.contrib.cluster_resolver.python.training import tpu_cluster_resolver
from tensorflow.contrib.summary import summary
from tensorflow.contrib.tpu.python.tpu import tpu_config, tpu_estimator, tpu_optimizer
from tensorflow.python.estimator import model_fn as model_fn_lib

if __name__ == "__main__":
    legacy_model.run(
        legacy_model.api_of(
            tpu_estimator,
            configs=tpu_config,
            CrossShardOptimizer=tpu_optimizer.CrossShardOptimizer,
            ModeKeys=model_fn_lib.ModeKeys,
            TPUClusterResolver=tpu_cluster_resolver.TPUClusterResolver,
        ),
        summary=summary,
    )
