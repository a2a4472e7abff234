"""Graph size and build time of one TRAIN graph vs the number of shards (docs/DISTRIBUTED.md).

In-graph replication builds `model_fn` once per shard in the one client graph, so both grow with the shard count.
The graph is built in this process (logical CPU shards): on a cluster it is the same graph with `/job:worker/task:i`
device names. Model: two embedding tables (Adagrad, sharded 'div') and two dense layers.

    python scripts/graph_size_vs_shards.py --shards=4,8,16
"""

import os
import tempfile
import time

from absl import app, flags

flags.DEFINE_string("shards", "4,8,16", "Comma-separated shard counts.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import numpy as np
    import tensorflow as tf

    import tpu_estimator as te
    from tpu_estimator import experimental as tex

    columns = [
        tf.compat.v1.tpu.experimental.embedding_column(
            tf.feature_column.categorical_column_with_identity(key, 1000), 16
        )
        for key in ("a", "b")
    ]

    def input_fn(params):
        rng = np.random.RandomState(0)
        features = {k: rng.randint(0, 1000, size=(512,)).astype(np.int64) for k in ("a", "b")}
        features["x"] = rng.randn(512, 8).astype(np.float32)
        labels = (rng.rand(512) > 0.5).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(params["batch_size"], True)

    def model_fn(features, labels, mode, params):
        net = tf.concat([tf.compat.v1.keras.layers.DenseFeatures(columns)(features), features["x"]], axis=1)
        net = tf.compat.v1.layers.dense(net, 64, activation=tf.nn.relu)
        logits = tf.squeeze(tf.compat.v1.layers.dense(net, 1), 1)
        loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
        opt = te.CrossShardOptimizer(tf.compat.v1.train.AdagradOptimizer(0.1))
        return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))

    class Measure(tf.compat.v1.train.SessionRunHook):
        def __init__(self, started):
            self.started = started

        def begin(self):
            graph = tf.compat.v1.get_default_graph()
            self.build_secs = time.time() - self.started
            self.nodes = len(graph.get_operations())
            self.bytes = len(graph.as_graph_def().SerializeToString())

    print("| shards | graph nodes | GraphDef bytes | build seconds |")
    print("|---|---|---|---|")
    for shards in [int(s) for s in FLAGS.shards.split(",")]:
        spec = tex.EmbeddingConfigSpec(
            feature_columns=columns, optimization_parameters=tex.AdagradParameters(0.1, initial_accumulator=0.1)
        )
        config = te.RunConfig(
            model_dir=tempfile.mkdtemp(), tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=shards)
        )
        estimator = te.TPUEstimator(
            model_fn=model_fn, config=config, train_batch_size=8 * shards, embedding_config_spec=spec
        )
        measure = Measure(time.time())
        estimator.train(input_fn, max_steps=1, hooks=[measure])
        print("| {} | {} | {} | {:.1f} |".format(shards, measure.nodes, measure.bytes, measure.build_secs))


if __name__ == "__main__":
    app.run(main)
