"""The example of TensorFlow's `tf.tpu.experimental.embedding.TPUEmbedding` page, completed into a program.

A TPU program as that page writes it: `TPUClusterResolver`, `experimental_connect_to_cluster`,
`initialize_tpu_system`, `TPUStrategy`, the mid-level API with `enqueue` outside and `dequeue` / `apply_gradients`
inside `strategy.run`, in one `tf.function` over `tf.range`, a Keras model and optimizer for the dense part, and a
checkpoint of both. It never imports tpu_estimator. On a TPU: `python tpu_embedding_mid_level.py --tpu=NAME ...`;
here, on 2 shards of this machine:

    tpu-estimator-run --num_shards=2 examples/tf2/tpu_embedding_mid_level.py --data=data.npz --model_dir=/tmp/m

`--data` is an .npz with `watched` [N] and `user` [N] ids, `liked` [N, 3] ids (-1: none) and `clicked` [N] labels
(without it the program makes random data, common.py). The program saves the checkpoint `ckpt-0` before training and
`ckpt-<steps>` after, and writes the per-step training losses and the evaluation loss to `--results` (JSON).
"""

import json
import os

import numpy as np
import tensorflow as tf
from absl import app, flags
from common import NUM_USERS, NUM_VIDEOS, define_flags, load_data, mid_level_data  # this folder's common.py

FLAGS = flags.FLAGS
define_flags(model_dir="/tmp/tpu_embedding_mid_level")
DIM = 4


def to_dataset(data):
    liked = tf.sparse.from_dense(tf.constant(data["liked"], tf.int64) + 1)  # ids + 1: 0 is "none"
    liked = tf.SparseTensor(liked.indices, liked.values - 1, liked.dense_shape)
    features = {
        "watched": tf.constant(data["watched"], tf.int64),
        "liked": liked,
        "user": tf.constant(data["user"], tf.int64),
    }
    return tf.data.Dataset.from_tensor_slices((features, tf.constant(data["clicked"], tf.float32)))


def main(argv):
    del argv
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=FLAGS.tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)

    table_videos = tf.tpu.experimental.embedding.TableConfig(
        vocabulary_size=NUM_VIDEOS, dim=DIM, combiner="mean", name="videos"
    )
    table_users = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=NUM_USERS, dim=DIM, name="users")
    feature_config = {
        "watched": tf.tpu.experimental.embedding.FeatureConfig(table=table_videos),
        "liked": tf.tpu.experimental.embedding.FeatureConfig(table=table_videos),
        "user": tf.tpu.experimental.embedding.FeatureConfig(table=table_users),
    }

    with strategy.scope():
        embedding = tf.tpu.experimental.embedding.TPUEmbedding(
            feature_config=feature_config, optimizer=tf.tpu.experimental.embedding.Adagrad(learning_rate=0.1)
        )
        model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(1)])
        model.build((None, 3 * DIM))
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)

    data = load_data(FLAGS.data, mid_level_data)
    global_batch_size = FLAGS.global_batch_size

    def dataset_fn(context):
        per_replica_batch_size = context.get_per_replica_batch_size(global_batch_size)
        return to_dataset(data).repeat().batch(per_replica_batch_size, drop_remainder=True)

    distributed_dataset = strategy.distribute_datasets_from_function(
        dataset_fn=dataset_fn, options=tf.distribute.InputOptions(experimental_fetch_to_device=False)
    )
    dataset_iterator = iter(distributed_dataset)

    def model_loss(activations, labels):
        inputs = tf.concat([activations["watched"], activations["liked"], activations["user"]], axis=1)
        logits = tf.squeeze(model(inputs), axis=1)
        per_example_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        return tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)

    @tf.function
    def training_step(dataset_iterator, num_steps):
        def tpu_step(tpu_features):
            with tf.GradientTape() as tape:
                activations = embedding.dequeue()
                tape.watch(activations)
                loss = model_loss(activations, tpu_features)
            embedding_gradients, model_gradients = tape.gradient(loss, (activations, model.trainable_variables))
            embedding.apply_gradients(embedding_gradients)
            optimizer.apply_gradients(zip(model_gradients, model.trainable_variables))
            return loss

        losses = tf.TensorArray(tf.float32, size=num_steps)
        for step in tf.range(num_steps):
            embedding_features, tpu_features = next(dataset_iterator)
            embedding.enqueue(embedding_features, training=True)
            per_replica_loss = strategy.run(tpu_step, args=(tpu_features,))
            losses = losses.write(step, strategy.reduce("SUM", per_replica_loss, axis=None))
        return losses.stack()

    @tf.function
    def evaluation_step(dataset_iterator):
        def tpu_step(tpu_features):
            return model_loss(embedding.dequeue(), tpu_features)

        embedding_features, tpu_features = next(dataset_iterator)
        embedding.enqueue(embedding_features, training=False)
        return strategy.reduce("SUM", strategy.run(tpu_step, args=(tpu_features,)), axis=None)

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, embedding=embedding)
    manager = tf.train.CheckpointManager(checkpoint, FLAGS.model_dir, max_to_keep=None)
    manager.save(checkpoint_number=0)
    losses = training_step(dataset_iterator, tf.constant(FLAGS.steps)).numpy()
    manager.save(checkpoint_number=FLAGS.steps)
    print("training losses:", np.round(losses, 4).tolist())

    eval_iterator = iter(
        strategy.distribute_datasets_from_function(
            lambda context: to_dataset(data).batch(context.get_per_replica_batch_size(global_batch_size)),
            options=tf.distribute.InputOptions(experimental_fetch_to_device=False),
        )
    )
    eval_loss = float(evaluation_step(eval_iterator).numpy())
    print("evaluation loss on the first batch:", round(eval_loss, 4))
    tf.tpu.experimental.shutdown_tpu_system(resolver)
    if FLAGS.results:
        with open(FLAGS.results, "w") as f:
            json.dump(
                {
                    "losses": losses.tolist(),
                    "eval_loss": eval_loss,
                    "num_replicas": strategy.num_replicas_in_sync,
                    "worker_devices": list(strategy.extended.worker_devices),
                    "checkpoints": [os.path.basename(p) for p in manager.checkpoints],
                },
                f,
            )


if __name__ == "__main__":
    app.run(main)
