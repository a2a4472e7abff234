"""The TF2 mid-level API `embedding.TPUEmbedding` on 2 logical CPU replicas of a MirroredStrategy.

The program follows upstream's `tf.tpu.experimental.embedding.TPUEmbedding` usage with a MirroredStrategy in place
of TPUStrategy: `enqueue` outside `strategy.run`, `dequeue` and `apply_gradients` inside it, all in one
`tf.function`. Afterwards the checkpoint is restored into `TPUEmbeddingForServing` (full tables, plain TensorFlow
lookups), saved as a SavedModel, loaded back, and its predictions are checked against the training path's.

Run: python examples/tpu_embedding_tf2.py
Environment: EXAMPLE_STEPS (training steps, default 300), EXAMPLE_MODEL_DIR (default: a new temporary directory).
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

import embedding

STEPS = int(os.environ.get("EXAMPLE_STEPS", "300"))
MODEL_DIR = os.environ.get("EXAMPLE_MODEL_DIR") or tempfile.mkdtemp(prefix="tpu_embedding_tf2_")
NUM_USERS, NUM_ITEMS, DIM = 100, 20, 8
GLOBAL_BATCH = 64
LEARNING_RATE = 0.3


def make_data(num_rows, seed):
    """A user clicks an item when the user's taste plus the item's appeal is positive."""
    rng = np.random.RandomState(seed)
    taste, appeal = np.random.RandomState(0).randn(NUM_USERS), np.random.RandomState(1).randn(NUM_ITEMS)
    ids = {
        "user": rng.randint(0, NUM_USERS, (num_rows, 1)).astype(np.int64),  # dense ids [B, 1] -> activations [B, dim]
        "item": rng.randint(0, NUM_ITEMS, (num_rows, 1)).astype(np.int64),
    }
    labels = (taste[ids["user"][:, 0]] + appeal[ids["item"][:, 0]] > 0).astype(np.float32)
    return ids, labels


USERS = embedding.TableConfig(vocabulary_size=NUM_USERS, dim=DIM, name="users")
ITEMS = embedding.TableConfig(vocabulary_size=NUM_ITEMS, dim=DIM, name="items")
FEATURE_CONFIG = {"user": embedding.FeatureConfig(USERS), "item": embedding.FeatureConfig(ITEMS)}


class Model(tf.Module):
    """The dense part: logit = relu([user, item] W1 + b1) w2 + b2."""

    def __init__(self):
        super().__init__()
        init = tf.random.stateless_normal
        aggregation = tf.VariableAggregation.ONLY_FIRST_REPLICA  # every replica applies the same summed gradient
        self.w1 = tf.Variable(init([2 * DIM, 16], seed=[1, 2]) * 0.3, aggregation=aggregation)
        self.b1 = tf.Variable(tf.zeros([16]), aggregation=aggregation)
        self.w2 = tf.Variable(init([16, 1], seed=[3, 4]) * 0.3, aggregation=aggregation)
        self.b2 = tf.Variable(tf.zeros([1]), aggregation=aggregation)

    def __call__(self, activations):
        net = tf.concat([activations["user"], activations["item"]], axis=1)
        return tf.squeeze(tf.nn.relu(net @ self.w1 + self.b1) @ self.w2 + self.b2, axis=1)


def main():
    tf.random.set_seed(0)  # the tables' initial values
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        embedding_api = embedding.TPUEmbedding(FEATURE_CONFIG, embedding.Adagrad(learning_rate=0.5))
        model = Model()

    def distributed(num_rows, seed, repeat):
        def dataset_fn(context):
            dataset = tf.data.Dataset.from_tensor_slices(make_data(num_rows, seed))
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
            if repeat:
                dataset = dataset.repeat().shuffle(1024, seed=0)
            return dataset.batch(context.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)

        options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
        return iter(strategy.distribute_datasets_from_function(dataset_fn, options))

    @tf.function
    def train_steps(iterator, num_steps):
        def step(labels):
            with tf.GradientTape() as tape:
                activations = embedding_api.dequeue()  # this replica's [per-replica batch, DIM] activations
                tape.watch(activations)
                per_example = tf.nn.sigmoid_cross_entropy_with_logits(labels, model(activations))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            activation_gradients, dense_gradients = tape.gradient(loss, (activations, model.trainable_variables))
            embedding_api.apply_gradients(activation_gradients)  # Adagrad, once per unique id over all replicas
            dense_gradients = tf.distribute.get_replica_context().all_reduce("sum", dense_gradients)
            for variable, gradient in zip(model.trainable_variables, dense_gradients):
                variable.assign_sub(LEARNING_RATE * gradient)
            return loss

        losses = tf.TensorArray(tf.float32, size=num_steps)
        for i in tf.range(num_steps):
            features, labels = next(iterator)
            embedding_api.enqueue(features, training=True)
            loss = strategy.reduce("sum", strategy.run(step, args=(labels,)), axis=None)
            losses = losses.write(i, loss)
        return losses.stack()

    @tf.function
    def predict_step(iterator):
        features, labels = next(iterator)
        embedding_api.enqueue(features, training=False)
        logits = strategy.run(lambda: model(embedding_api.dequeue()))
        return strategy.gather(logits, axis=0), strategy.gather(labels, axis=0)

    losses = train_steps(distributed(4096, seed=2, repeat=True), tf.constant(STEPS)).numpy()
    print(f"training loss: first step {losses[0]:.3f}, last 20 steps {losses[-20:].mean():.3f}")
    checkpoint_path = tf.train.Checkpoint(embedding=embedding_api, model=model).save(os.path.join(MODEL_DIR, "ckpt"))

    # Held-out rows through the training path (sharded tables, both replicas).
    held_out, held_out_labels = make_data(GLOBAL_BATCH, seed=3)
    logits, labels = predict_step(distributed(GLOBAL_BATCH, seed=3, repeat=False))
    accuracy = float(np.mean((logits.numpy() > 0) == (labels.numpy() > 0.5)))
    print(f"held-out accuracy: {accuracy:.3f}")

    # Serving: full tables restored from the checkpoint, plain lookups, saved and loaded as a SavedModel.
    serving_embedding = embedding.TPUEmbeddingForServing(FEATURE_CONFIG, optimizer=None)
    serving_model = Model()
    tf.train.Checkpoint(embedding=serving_embedding, model=serving_model).restore(checkpoint_path).expect_partial()
    module = tf.Module()
    module.embedding, module.model = serving_embedding, serving_model
    signature = {key: tf.TensorSpec([None, 1], tf.int64, name=key) for key in FEATURE_CONFIG}
    module.serve = tf.function(lambda ids: serving_model(serving_embedding(ids)), input_signature=[signature])
    export_dir = os.path.join(MODEL_DIR, "saved_model")
    tf.saved_model.save(module, export_dir)
    loaded = tf.saved_model.load(export_dir)  # keep the loaded object: it owns the variables `serve` reads
    served = loaded.serve({key: tf.constant(value) for key, value in held_out.items()}).numpy()
    print(f"served {export_dir}: first logits {np.round(served[:5], 3)}")

    # Replica r read rows [r * 32, (r + 1) * 32) of the held-out batch (dataset.shard over 1 input pipeline).
    np.testing.assert_allclose(labels.numpy(), held_out_labels)
    np.testing.assert_allclose(served, logits.numpy(), rtol=1e-5, atol=1e-5)
    assert losses[-20:].mean() < 0.6 * losses[0], losses
    assert accuracy > 0.75, accuracy


if __name__ == "__main__":
    main()
