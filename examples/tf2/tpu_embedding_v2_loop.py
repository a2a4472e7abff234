"""A custom training loop with `tf.tpu.experimental.embedding.TPUEmbeddingV2`, TensorFlow's SparseCore API.

Written as for a TPU with SparseCores: `TPUClusterResolver`, `initialize_tpu_system`, `TPUStrategy`, the lookup
inside the step (`embedding(features)` returns the activations and the preserved outputs that `apply_gradients`
takes back), a `tf.function` over `tf.range`, a Keras model and Adam for the dense part (FTRL for the tables), a
checkpoint before and after training. It never imports tpu_estimator. Here, on 2 shards of this machine:

    tpu-estimator-run --num_shards=2 examples/tf2/tpu_embedding_v2_loop.py --data=data.npz --model_dir=/tmp/m

`--data` is an .npz with `query_values`/`query_lengths` (a ragged batch of word ids per row), `item` [N] ids and
`clicked` [N] labels (without it the program makes random data, common.py). `--results` gets the per-step losses (JSON).
"""

import json

import numpy as np
import tensorflow as tf
from absl import app, flags
from common import NUM_ITEMS, NUM_WORDS, define_flags, load_data, v2_loop_data  # this folder's common.py

FLAGS = flags.FLAGS
define_flags(model_dir="/tmp/tpu_embedding_v2_loop")
DIM = 4


def to_dataset(data):
    features = {
        "query": tf.RaggedTensor.from_row_lengths(
            tf.constant(data["query_values"], tf.int64), tf.constant(data["query_lengths"], tf.int64)
        ),
        "item": tf.constant(data["item"], tf.int64),
    }
    return tf.data.Dataset.from_tensor_slices((features, tf.constant(data["clicked"], tf.float32)))


def main(argv):
    del argv
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=FLAGS.tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    global_batch_size = FLAGS.global_batch_size
    per_replica_batch_size = global_batch_size // strategy.num_replicas_in_sync

    words = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=NUM_WORDS, dim=DIM, combiner="sum", name="words")
    items = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=NUM_ITEMS, dim=DIM, name="items")
    feature_config = {
        "query": tf.tpu.experimental.embedding.FeatureConfig(
            table=words, output_shape=[per_replica_batch_size], name="query"
        ),
        "item": tf.tpu.experimental.embedding.FeatureConfig(
            table=items, output_shape=[per_replica_batch_size], name="item"
        ),
    }
    with strategy.scope():
        embedding = tf.tpu.experimental.embedding.TPUEmbeddingV2(
            feature_config=feature_config,
            optimizer=tf.tpu.experimental.embedding.FTRL(learning_rate=0.1, l2_regularization_strength=0.01),
        )
        model = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="tanh"), tf.keras.layers.Dense(1)])
        model.build((None, 2 * DIM))
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)

    data = load_data(FLAGS.data, v2_loop_data)
    dataset = strategy.distribute_datasets_from_function(
        lambda context: to_dataset(data).repeat().batch(per_replica_batch_size, drop_remainder=True),
        options=tf.distribute.InputOptions(experimental_fetch_to_device=False),
    )

    @tf.function
    def train_steps(iterator, num_steps):
        def step(features, labels):
            with tf.GradientTape() as tape:
                activations, preserved_outputs = embedding(features)
                tape.watch(activations)
                logits = tf.squeeze(model(tf.concat([activations["query"], activations["item"]], axis=1)), axis=1)
                per_example_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
                loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
            embedding_gradients, dense_gradients = tape.gradient(loss, (activations, model.trainable_variables))
            embedding.apply_gradients(embedding_gradients, preserved_outputs)
            optimizer.apply_gradients(zip(dense_gradients, model.trainable_variables))
            return loss

        losses = tf.TensorArray(tf.float32, size=num_steps)
        for i in tf.range(num_steps):
            features, labels = next(iterator)
            losses = losses.write(i, strategy.reduce("SUM", strategy.run(step, args=(features, labels)), axis=None))
        return losses.stack()

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, embedding=embedding)
    manager = tf.train.CheckpointManager(checkpoint, FLAGS.model_dir, max_to_keep=None)
    manager.save(checkpoint_number=0)
    losses = train_steps(iter(dataset), tf.constant(FLAGS.steps)).numpy()
    manager.save(checkpoint_number=FLAGS.steps)
    print("training losses:", np.round(losses, 4).tolist())
    if FLAGS.results:
        with open(FLAGS.results, "w") as f:
            json.dump({"losses": losses.tolist(), "num_replicas": strategy.num_replicas_in_sync}, f)


if __name__ == "__main__":
    app.run(main)
