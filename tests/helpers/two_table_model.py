"""The two-table model shared by the engine and mid-level API tests (TPUEmbedding, TPUEmbeddingV2, serving, Keras).

Features `user` (ragged, weighted, table A), `item` (sparse, table A) and `cat` (dense `[B, 1]`, table B, sum);
12 samples, global batch 4. Loss per feature `sum(T * a) + 0.5 * sum(a^2)`, so `dL/da = T + a`. The reference
(`tests.oracles.tables`) computes the activations of the GLOBAL batch with the parameters before the step, sums
every occurrence's gradient per unique id over all samples, replicas and features sharing a table, and applies
the rule once per id.
"""

import numpy as np
import tensorflow as tf

from embedding import config, optimizers
from tests.helpers.devices import logical_cpus
from tests.oracles import tables as tables_oracle

CPUS = logical_cpus()
VOCAB = {"A": 13, "B": 7}
DIM = {"A": 4, "B": 3}
TABLE_OF = {"user": "A", "item": "A", "cat": "B"}
GLOBAL_BATCH = 4
NUM_STEPS = 3
ITEM_WIDTH = 3

# Per sample: user (ids, weights) with duplicates and empty rows; item ids; cat id.
USER = [
    ([3, 3, 5], [1.0, 2.0, 0.5]),
    ([0], [3.0]),
    ([], []),
    ([12], [0.5]),
    ([7, 7, 7], [1.0, 1.0, 2.0]),
    ([1, 2], [1.0, 1.5]),
    ([4, 4], [1.0, 1.0]),
    ([9], [2.0]),
    ([3, 0], [1.0, 0.5]),
    ([5], [1.0]),
    ([3], [2.0]),
    ([11, 3], [0.5, 0.5]),
]
ITEM = [[5, 12], [3], [0, 0], [], [2], [7, 1], [9], [4], [], [3, 3, 5], [6], [0]]
CAT = [1, 6, 1, 0, 0, 3, 2, 5, 2, 1, 1, 4]
_rng = np.random.RandomState(42)
TARGETS = {f: _rng.normal(size=(len(CAT), DIM[TABLE_OF[f]])).astype(np.float32) for f in sorted(TABLE_OF)}

CASES = {
    "sgd": (lambda: optimizers.SGD(0.1), "sgd", {}, 0.1),
    "adagrad": (lambda: optimizers.Adagrad(0.2), "adagrad", {}, 0.2),
    "adam": (lambda: optimizers.Adam(0.05), "adam", {}, 0.05),
    "ftrl": (
        lambda: optimizers.FTRL(0.2, l1_regularization_strength=0.01, l2_regularization_strength=0.01, beta=0.1),
        "ftrl",
        dict(l1=0.01, l2=0.01, beta=0.1),
        0.2,
    ),
}


def initial(table):
    seed = {"A": 1, "B": 2}[table]
    return np.random.RandomState(seed).normal(size=(VOCAB[table], DIM[table])).astype(np.float32)


def feature_config(optimizer_a=None, combiner_a="mean"):
    a = config.TableConfig(
        VOCAB["A"],
        DIM["A"],
        initializer=tf.constant_initializer(initial("A")),
        combiner=combiner_a,
        name="A",
        optimizer=optimizer_a,
    )
    b = config.TableConfig(
        VOCAB["B"], DIM["B"], initializer=tf.constant_initializer(initial("B")), combiner="sum", name="B"
    )
    return {"user": config.FeatureConfig(a), "item": config.FeatureConfig(a), "cat": config.FeatureConfig(b)}


def mirrored(num_replicas):
    return tf.distribute.MirroredStrategy(CPUS[:num_replicas])


# ------------------------------------------------------------------------------------------------ inputs
def all_samples():
    """(features, user weights, targets) of every sample, for `Dataset.from_tensor_slices`."""
    user = tf.ragged.constant([u for u, _ in USER], dtype=tf.int64, ragged_rank=1)
    user_w = tf.ragged.constant([w for _, w in USER], dtype=tf.float32, ragged_rank=1)
    indices = [[b, j] for b, row in enumerate(ITEM) for j in range(len(row))]
    item = tf.SparseTensor(
        tf.constant(indices, tf.int64), tf.constant([i for r in ITEM for i in r], tf.int32), [len(ITEM), ITEM_WIDTH]
    )
    cat = tf.constant(np.array(CAT, np.int64)[:, None])
    return {"user": user, "item": item, "cat": cat}, user_w, {f: tf.constant(t) for f, t in TARGETS.items()}


def sample_slice(start, stop):
    """(features, weights, targets) of samples [start, stop) as plain tensors."""
    features, user_w, targets = all_samples()
    return (
        {
            "user": features["user"][start:stop],
            "item": tf.sparse.slice(features["item"], [start, 0], [stop - start, ITEM_WIDTH]),
            "cat": features["cat"][start:stop],
        },
        {"user": user_w[start:stop], "item": None, "cat": None},
        {f: t[start:stop] for f, t in targets.items()},
    )


def make_dataset_fn(num_replicas):
    """Per-replica batches in sample order: replica r of step t gets samples of batch `t * R + r`."""

    def fn(ctx):
        per_replica = ctx.get_per_replica_batch_size(GLOBAL_BATCH)
        assert per_replica * num_replicas == GLOBAL_BATCH
        return tf.data.Dataset.from_tensor_slices(all_samples()).batch(per_replica, drop_remainder=True)

    return fn


def distributed_iterator(strategy):
    dist = strategy.distribute_datasets_from_function(
        make_dataset_fn(strategy.num_replicas_in_sync),
        options=tf.distribute.InputOptions(experimental_fetch_to_device=False),
    )
    return iter(dist)


def loss_fn(acts, targets):
    return tf.add_n([tf.reduce_sum(targets[f] * acts[f]) + 0.5 * tf.reduce_sum(acts[f] ** 2) for f in sorted(acts)])


def apply_loss_gradients(embedding, targets):
    """One replica's step: its activations dequeued, `loss_fn`'s gradients applied to the tables."""
    with tf.GradientTape() as tape:
        acts = embedding.dequeue()
        tape.watch(acts)
        loss = loss_fn(acts, targets)
    embedding.apply_gradients(tape.gradient(loss, acts))


def with_weights(user_w):
    return {"user": user_w, "item": None, "cat": None}


# ------------------------------------------------------------------------------------------------ reference
def samples(start, stop):
    """`{feature: [(ids, weights)] per sample}` of samples [start, stop)."""
    return {
        "user": USER[start:stop],
        "item": [(ids, [1.0] * len(ids)) for ids in ITEM[start:stop]],
        "cat": [([c], [1.0]) for c in CAT[start:stop]],
    }


def reference_activations(params, start, stop, combiner_a="mean"):
    """`{feature: [stop - start, dim]}` from `params = {table: [V, D]}`."""
    return tables_oracle.activations(params, samples(start, stop), TABLE_OF, {"A": combiner_a, "B": "sum"})


def reference_training(kind, kwargs, lr, num_steps=NUM_STEPS, combiner_a="mean"):
    """Full-table state `{table: {'params': ..., slot: ...}}` after `num_steps` global steps."""

    def activation_gradients(step, acts):
        start, stop = step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH
        return {f: TARGETS[f][start:stop] + a for f, a in acts.items()}

    return tables_oracle.train_tables(
        kind,
        {t: initial(t) for t in VOCAB},
        TABLE_OF,
        {"A": combiner_a, "B": "sum"},
        [samples(s * GLOBAL_BATCH, (s + 1) * GLOBAL_BATCH) for s in range(num_steps)],
        activation_gradients,
        lr,
        **kwargs,
    )


# ------------------------------------------------------------------------------------------ seed examples
def seed_training_step(strategy, embedding):
    """The seed page's training step, TPUStrategy replaced by `strategy` (its `tpu_step`: `apply_loss_gradients`)."""

    @tf.function
    def training_step(dataset_iterator, num_steps):
        def tpu_step(tpu_features):
            apply_loss_gradients(embedding, tpu_features)

        for _ in tf.range(num_steps):
            embedding_features, user_w, tpu_features = next(dataset_iterator)
            embedding.enqueue(embedding_features, weights=with_weights(user_w), training=True)
            strategy.run(tpu_step, args=(tpu_features,))

    return training_step


def seed_evaluation_step(strategy, embedding, outputs):
    """The seed page's evaluation step; activations are written to `outputs` (a list of variables)."""

    @tf.function
    def evaluation_step(dataset_iterator, num_steps):
        def tpu_step(tpu_features):
            activations = embedding.dequeue()
            return activations

        for i in tf.range(num_steps):
            embedding_features, user_w, tpu_features = next(dataset_iterator)
            embedding.enqueue(embedding_features, weights=with_weights(user_w), training=False)
            per_replica = strategy.run(tpu_step, args=(tpu_features,))
            for f in sorted(TABLE_OF):
                local = strategy.experimental_local_results(per_replica[f])
                outputs[f].scatter_nd_update([[i]], tf.concat(local, 0)[None])

    return evaluation_step
