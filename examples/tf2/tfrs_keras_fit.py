"""Keras `fit`/`evaluate` under `TPUStrategy` with TensorFlow Recommenders' `tfrs.layers.embedding.TPUEmbedding`.

The Keras style of TPU embeddings: a model whose embedding layer wraps `tf.tpu.experimental.embedding.TPUEmbedding`
(the layer enqueues, dequeues and applies the embedding optimizer itself), compiled with `steps_per_execution` and
trained with `fit` (under the TPU's `TPUStrategy`). It never imports tpu_estimator. Here, on 2 shards of this machine:

    tpu-estimator-run --num_shards=2 examples/tf2/tfrs_keras_fit.py --data=data.npz --model_dir=/tmp/m

`--data` is an .npz with `user` [N] and `item` [N] ids and `clicked` [N] labels (without it the program makes
random data, common.py). The program saves the checkpoint `ckpt-0` before `fit` and `ckpt-1` after, and writes the training
history and the evaluation loss to `--results` (JSON).
"""

import json

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app, flags
from common import NUM_ITEMS, NUM_USERS, define_flags, load_data, tfrs_data  # this folder's common.py

FLAGS = flags.FLAGS
define_flags(model_dir="/tmp/tfrs_keras_fit")
DIM = 4


class ClickModel(tf.keras.Model):
    def __init__(self, feature_config):
        super().__init__()
        self.embedding = tfrs.layers.embedding.TPUEmbedding(
            feature_config=feature_config, optimizer=tf.tpu.experimental.embedding.SGD(learning_rate=0.2)
        )
        self.hidden = tf.keras.layers.Dense(8, activation="relu")
        self.logit = tf.keras.layers.Dense(1)

    def call(self, features):
        activations = self.embedding(features)
        return self.logit(self.hidden(tf.concat([activations["user"], activations["item"]], axis=1)))


def main(argv):
    del argv
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=FLAGS.tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)

    users = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=NUM_USERS, dim=DIM, name="users")
    items = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=NUM_ITEMS, dim=DIM, name="items")
    feature_config = {
        "user": tf.tpu.experimental.embedding.FeatureConfig(table=users),
        "item": tf.tpu.experimental.embedding.FeatureConfig(table=items),
    }
    with strategy.scope():
        model = ClickModel(feature_config)
        model.compile(
            optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
            loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
            steps_per_execution=2,
        )

    data = load_data(FLAGS.data, tfrs_data)
    features = {"user": data["user"].astype(np.int64), "item": data["item"].astype(np.int64)}
    labels = data["clicked"][:, None]
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
    dataset = dataset.batch(FLAGS.global_batch_size, drop_remainder=True)
    baseline_loss = model.evaluate(dataset.take(1), verbose=0)  # the untrained model's loss (builds it)
    checkpoint = tf.train.Checkpoint(model=model)
    manager = tf.train.CheckpointManager(checkpoint, FLAGS.model_dir, max_to_keep=None)
    manager.save(checkpoint_number=0)

    history = model.fit(dataset, epochs=1, steps_per_epoch=FLAGS.steps, verbose=0)
    manager.save(checkpoint_number=1)
    eval_loss = model.evaluate(dataset.take(1), verbose=0)
    print("training loss:", round(history.history["loss"][-1], 4), "evaluation loss:", round(eval_loss, 4))
    if FLAGS.results:
        with open(FLAGS.results, "w") as f:
            json.dump({"loss": history.history["loss"], "eval_loss": eval_loss, "baseline_loss": baseline_loss}, f)


if __name__ == "__main__":
    app.run(main)
