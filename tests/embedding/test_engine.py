"""EmbeddingEngine: multi-step training against a NumPy model of TPU embedding semantics.

The reference (written from docs/SEMANTICS.md 9, independent of `embedding/`): activations are the combiner
(sum / mean / sqrtn) of the weighted rows of each sample; the loss is `sum(T * a) + 0.5 * sum(a^2)` per feature,
so dL/da = T + a; every occurrence of an id (any sample, any feature sharing the table) contributes
`w * scale * dL/da[sample]`; contributions are summed per unique id and the optimizer rule is applied ONCE per
unique id and step (`tests.oracles.tables`).
"""

import numpy as np
import pytest
import tensorflow as tf

from embedding import optimizers
from embedding.engine import EmbeddingEngine
from tests.helpers.devices import logical_cpus
from tests.helpers.tables import assert_state_close, engine_state
from tests.helpers.two_table_model import DIM, TABLE_OF, VOCAB, feature_config, initial
from tests.oracles import tables as tables_oracle

CPUS = logical_cpus()
GRAPH_CPUS = [f"/cpu:{k}" for k in range(4)]

# Three steps; duplicates within a sample (user 3,3 / 7,7,7 / 4,4; item 0,0), across samples and across the
# two features sharing table A; empty samples; weights on the ragged feature.
BATCHES = [
    dict(user=([[3, 3, 5], [0], []], [[1.0, 2.0, 0.5], [3.0], []]), item=[[5, 12], [3], [0, 0]], cat=[1, 6, 1]),
    dict(user=([[12], [7, 7, 7], [1, 2]], [[0.5], [1.0, 1.0, 2.0], [1.0, 1.5]]), item=[[], [2], [7, 1]], cat=[0, 0, 3]),
    dict(user=([[4, 4], [9], [3, 0]], [[1.0, 1.0], [2.0], [1.0, 0.5]]), item=[[9], [4], []], cat=[2, 5, 2]),
]
BATCH_SIZE = 3


def _target(feature):
    seed = {"user": 10, "item": 11, "cat": 12}[feature]
    return np.random.RandomState(seed).normal(size=(BATCH_SIZE, DIM[TABLE_OF[feature]])).astype(np.float32)


def _samples(batch, feature):
    """[(ids, weights)] per sample."""
    if feature == "user":
        ids, weights = batch["user"]
        return list(zip(ids, weights))
    if feature == "item":
        return [(ids, [1.0] * len(ids)) for ids in batch["item"]]
    return [([i], [1.0]) for i in batch["cat"]]


def _tf_inputs(batch, batch_size=BATCH_SIZE):
    ids, weights = batch["user"]
    user = tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1)
    user_w = tf.ragged.constant(weights, dtype=tf.float32, ragged_rank=1)
    indices = [[b, j] for b, row in enumerate(batch["item"]) for j in range(len(row))]
    values = [i for row in batch["item"] for i in row]
    item = tf.SparseTensor(
        tf.constant(indices, tf.int64, shape=[len(indices), 2]),
        tf.constant(values, tf.int32, shape=[len(values)]),
        [batch_size, max(1, max(len(r) for r in batch["item"]))],
    )
    cat = tf.constant(np.array(batch["cat"], np.int64)[:, None])
    return {"user": user, "item": item, "cat": cat}, {"user": user_w, "item": None, "cat": None}


# ------------------------------------------------------------------------------------------ NumPy reference
def reference_training(kind, kwargs, lr, combiner_a="mean", lazy=True, zero_features=(), multiplier=1.0, steps=BATCHES):
    def activation_gradients(_, acts):
        return {f: None if f in zero_features else _target(f) + a for f, a in acts.items()}

    return tables_oracle.train_tables(
        kind,
        {t: initial(t) for t in VOCAB},
        TABLE_OF,
        {"A": combiner_a, "B": "sum"},
        [{f: _samples(batch, f) for f in TABLE_OF} for batch in steps],
        activation_gradients,
        lr,
        lazy=lazy,
        multiplier=multiplier,
        **kwargs,
    )


# ------------------------------------------------------------------------------------------------ engine runs
def _loss(acts):
    return tf.add_n([tf.reduce_sum(_target(f) * acts[f]) + 0.5 * tf.reduce_sum(acts[f] ** 2) for f in acts])


def train_eager(engine, steps=BATCHES, zero_features=(), **apply_kwargs):
    for batch in steps:
        features, weights = _tf_inputs(batch)
        batches = engine.preprocess(features, weights)
        with tf.GradientTape() as tape:
            acts = engine.activations(batches)
            tape.watch(acts)
            loss = _loss(acts)
        grads = tape.gradient(loss, acts)
        grads = {f: (None if f in zero_features else g) for f, g in grads.items()}
        engine.apply_gradients(batches, grads, **apply_kwargs)


CASES = {
    "sgd": (lambda: optimizers.SGD(0.1), "sgd", {}, 0.1, True),
    "adagrad": (lambda: optimizers.Adagrad(0.2), "adagrad", {}, 0.2, True),
    "adam": (lambda: optimizers.Adam(0.05), "adam", {}, 0.05, True),
    "adam_dense": (lambda: optimizers.Adam(0.05, lazy_adam=False), "adam", {}, 0.05, False),
    "ftrl": (
        lambda: optimizers.FTRL(0.2, l1_regularization_strength=0.01, l2_regularization_strength=0.01, beta=0.1),
        "ftrl",
        dict(l1=0.01, l2=0.01, beta=0.1),
        0.2,
        True,
    ),
}


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("case", ["sgd", "adagrad", "adam", "ftrl"])
def test_three_steps_equal_numpy_reference(case, combiner):
    make_opt, kind, kwargs, lr, lazy = CASES[case]
    engine = EmbeddingEngine(
        feature_config(combiner_a=combiner), make_opt(), num_shards=2, devices=CPUS, partition_strategy="mod"
    )
    train_eager(engine)
    assert_state_close(engine_state(engine), reference_training(kind, kwargs, lr, combiner, lazy))


@pytest.mark.parametrize("num_shards,strategy", [(1, "div"), (2, "div"), (4, "div"), (4, "mod"), (3, "mod")])
@pytest.mark.parametrize("case", ["adagrad", "adam_dense", "ftrl"])
def test_shard_and_partition_invariance(case, num_shards, strategy):
    make_opt, kind, kwargs, lr, lazy = CASES[case]
    engine = EmbeddingEngine(
        feature_config(combiner_a="sqrtn"), make_opt(), num_shards=num_shards, devices=CPUS, partition_strategy=strategy
    )
    train_eager(engine)
    got = engine_state(engine)
    assert_state_close(got, reference_training(kind, kwargs, lr, "sqrtn", lazy))
    baseline = EmbeddingEngine(feature_config(combiner_a="sqrtn"), make_opt(), num_shards=1)
    train_eager(baseline)
    assert_state_close(got, engine_state(baseline), tol=1e-6)


def _rows(batch, rows):
    ids, weights = batch["user"]
    return dict(user=(ids[rows], weights[rows]), item=batch["item"][rows], cat=batch["cat"][rows])


def train_eager_in_parts(engine, part_rows, pending=False):
    """Each step's rows preprocessed and looked up in parts (as hosts do), the update applied for all parts."""
    for batch in BATCHES:
        parts = []
        for index, rows in enumerate(part_rows):
            features, weights = _tf_inputs(_rows(batch, rows), batch_size=len(range(BATCH_SIZE)[rows]))
            batches = engine.preprocess(features, weights)
            with tf.GradientTape() as tape:
                acts = engine.activations(batches)
                tape.watch(acts)
                loss = tf.add_n(
                    [tf.reduce_sum(_target(f)[rows] * acts[f]) + 0.5 * tf.reduce_sum(acts[f] ** 2) for f in acts]
                )
            grads = tape.gradient(loss, acts)
            device = CPUS[index % len(CPUS)]
            if pending:
                unique_ids = {name: b.unique_ids for name, b in batches.items()}
                parts.append((unique_ids, engine.table_gradients(batches, grads), device))
            else:
                parts.append((batches, grads, device))
        if pending:
            engine.apply_table_gradients_of_parts(parts)
        else:
            engine.apply_gradients_of_parts(parts)


@pytest.mark.parametrize("part_rows", [[slice(0, 2), slice(2, 3)], [slice(0, 3)]], ids=["two_parts", "one_part"])
@pytest.mark.parametrize("pending", [False, True])
@pytest.mark.parametrize("num_shards,strategy", [(1, "div"), (3, "div"), (4, "mod")])
@pytest.mark.parametrize("case", ["adagrad", "adam_dense", "ftrl"])
def test_batch_in_parts_updates_once_per_unique_id(case, num_shards, strategy, pending, part_rows):
    # Ids repeat across the parts (e.g. user 3 in rows 0 and 2): each shard sums the parts' gradients per id and
    # applies its optimizer once, as for the whole batch.
    make_opt, kind, kwargs, lr, lazy = CASES[case]
    engine = EmbeddingEngine(
        feature_config(combiner_a="sqrtn"), make_opt(), num_shards=num_shards, devices=CPUS, partition_strategy=strategy
    )
    # One part is the one-host case (the whole batch); two are two hosts.
    train_eager_in_parts(engine, part_rows, pending=pending)
    got = engine_state(engine)
    assert_state_close(got, reference_training(kind, kwargs, lr, "sqrtn", lazy))
    whole = EmbeddingEngine(feature_config(combiner_a="sqrtn"), make_opt(), num_shards=num_shards, devices=CPUS)
    train_eager(whole)
    # Only the float summation order differs (per part, then the parts' sums).
    assert_state_close(got, engine_state(whole), tol=1e-6)


def test_activations_structure_and_values():
    engine = EmbeddingEngine(feature_config(combiner_a="mean"), optimizers.SGD(0.1), num_shards=4, devices=CPUS)
    features, weights = _tf_inputs(BATCHES[0])
    acts = engine(features, weights)
    assert sorted(acts) == ["cat", "item", "user"]
    assert acts["user"].shape == [3, 4] and acts["cat"].shape == [3, 3]
    a = initial("A")
    np.testing.assert_allclose(acts["user"].numpy()[0], (1 * a[3] + 2 * a[3] + 0.5 * a[5]) / 3.5, rtol=1e-6)
    np.testing.assert_array_equal(acts["user"].numpy()[2], np.zeros(4))  # Empty sample.
    np.testing.assert_allclose(acts["item"].numpy()[2], a[0], rtol=1e-6)  # Duplicate id, mean.
    np.testing.assert_allclose(acts["cat"].numpy(), initial("B")[[1, 6, 1]], rtol=1e-6)


@pytest.mark.parametrize("num_shards,strategy", [(1, "div"), (2, "div"), (3, "mod")])
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_lookup_only_batches_give_the_activations_of_deduplicated_ones_to_the_bit(combiner, num_shards, strategy):
    engine = EmbeddingEngine(
        feature_config(combiner_a=combiner),
        optimizers.SGD(0.1),
        num_shards=num_shards,
        devices=CPUS,
        partition_strategy=strategy,
    )
    for step in BATCHES:
        features, weights = _tf_inputs(step)
        deduplicated = engine.preprocess(features, weights)
        every_id = engine.preprocess(features, weights, deduplicate=False)
        # Every id of the step is kept, in the table's feature order, with its own position.
        ids_of = {"user": [i for row in step["user"][0] for i in row], "item": [i for row in step["item"] for i in row]}
        ids_a = [i for key in engine.features_by_table["A"] for i in ids_of[key]]
        np.testing.assert_array_equal(every_id["A"].unique_ids.numpy(), ids_a)
        assert not every_id["A"].deduplicated and deduplicated["A"].deduplicated
        got, expected = engine.activations(every_id), engine.activations(deduplicated)
        reference = tables_oracle.activations(
            {t: initial(t) for t in VOCAB},
            {f: _samples(step, f) for f in TABLE_OF},
            TABLE_OF,
            {"A": combiner, "B": "sum"},
        )
        for feature in TABLE_OF:
            np.testing.assert_array_equal(got[feature].numpy(), expected[feature].numpy())
            np.testing.assert_allclose(got[feature].numpy(), reference[feature], rtol=1e-6, atol=1e-7)


def test_lookup_only_batches_cannot_be_applied_and_leave_the_tables_unchanged():
    engine = EmbeddingEngine(feature_config(), optimizers.Adagrad(0.1), num_shards=2, devices=CPUS)
    before = engine_state(engine)
    features, weights = _tf_inputs(BATCHES[0])
    batches = engine.preprocess(features, weights, deduplicate=False)
    with pytest.raises(ValueError, match=r"table '[AB]' was preprocessed with deduplicate=False"):
        engine.apply_gradients(batches, engine.activations(batches))
    assert_state_close(engine_state(engine), before, tol=0)


def test_none_gradients_multiplier_and_learning_rate_override():
    engine = EmbeddingEngine(feature_config(combiner_a="sum"), optimizers.SGD(0.1), num_shards=2, devices=CPUS)
    train_eager(engine, zero_features=("item",), gradient_multiplier=0.5, learning_rate_override=0.3)
    expected = reference_training("sgd", {}, 0.3, "sum", zero_features=("item",), multiplier=0.5)
    assert_state_close(engine_state(engine), expected)


def test_table_optimizer_overrides_global_one():
    engine = EmbeddingEngine(
        feature_config(combiner_a="mean", optimizer_a=optimizers.Adagrad(0.2)),
        optimizers.SGD(0.1),
        num_shards=2,
        devices=CPUS,
    )
    assert engine.tables["A"].slot_names == ["accumulators"] and engine.tables["B"].slot_names == []
    train_eager(engine)
    got = engine_state(engine)
    assert_state_close({"A": got["A"]}, {"A": reference_training("adagrad", {}, 0.2, "mean")["A"]})
    assert_state_close({"B": got["B"]}, {"B": reference_training("sgd", {}, 0.1, "mean")["B"]})


def test_training_without_optimizer_names_the_table():
    engine = EmbeddingEngine(feature_config(combiner_a="mean", optimizer_a=optimizers.SGD(0.1)), None, num_shards=2)
    features, weights = _tf_inputs(BATCHES[0])
    batches = engine.preprocess(features, weights)
    acts = engine.activations(batches)  # Inference works.
    before = engine_state(engine)
    with pytest.raises(ValueError, match=r"\['B'\]"):
        engine.apply_gradients(batches, acts)
    assert_state_close(engine_state(engine), before, tol=0)


def test_gradient_shape_and_structure_errors():
    engine = EmbeddingEngine(feature_config(), optimizers.SGD(0.1))
    features, weights = _tf_inputs(BATCHES[0])
    batches = engine.preprocess(features, weights)
    acts = engine.activations(batches)
    bad = dict(acts, cat=tf.zeros([3, 4]))
    with pytest.raises(ValueError, match="Found gradient of shape .* at path cat"):
        engine.apply_gradients(batches, bad)
    with pytest.raises(ValueError, match="structure"):
        engine.apply_gradients(batches, {"user": acts["user"]})


def test_bad_ids_error_names_feature_and_tables_unchanged_eager():
    engine = EmbeddingEngine(feature_config(), optimizers.Adagrad(0.1), num_shards=2, devices=CPUS)
    before = engine_state(engine)
    features, weights = _tf_inputs(BATCHES[0])
    features["cat"] = tf.constant([[1], [7], [0]], tf.int64)  # 7 >= vocabulary_size of B.
    with pytest.raises(tf.errors.InvalidArgumentError, match="cat"):
        batches = engine.preprocess(features, weights)
        engine.apply_gradients(batches, engine.activations(batches))
    assert_state_close(engine_state(engine), before, tol=0)


def test_non_finite_gradient_is_an_error_before_any_update():
    engine = EmbeddingEngine(feature_config(), optimizers.SGD(0.1), num_shards=2, devices=CPUS)
    before = engine_state(engine)
    features, weights = _tf_inputs(BATCHES[0])
    batches = engine.preprocess(features, weights)
    acts = engine.activations(batches)
    grads = {f: tf.ones_like(a) for f, a in acts.items()}
    grads["cat"] = grads["cat"] * np.inf
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 'B'"):
        engine.apply_gradients(batches, grads)
    assert_state_close(engine_state(engine), before, tol=0)


@pytest.mark.parametrize("pending", [False, True])
def test_non_finite_gradient_of_one_part_is_an_error_before_any_update(pending):
    engine = EmbeddingEngine(feature_config(), optimizers.SGD(0.1), num_shards=2, devices=CPUS)
    before = engine_state(engine)
    parts = []
    for index, rows in enumerate([slice(0, 2), slice(2, 3)]):
        features, weights = _tf_inputs(_rows(BATCHES[0], rows), batch_size=len(range(BATCH_SIZE)[rows]))
        batches = engine.preprocess(features, weights)
        grads = {f: tf.ones_like(a) for f, a in engine.activations(batches).items()}
        if index == 1:
            grads["cat"] = grads["cat"] * np.inf
        if pending:
            unique_ids = {name: b.unique_ids for name, b in batches.items()}
            parts.append((unique_ids, engine.table_gradients(batches, grads), CPUS[index]))
        else:
            parts.append((batches, grads, CPUS[index]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 'B'"):
        if pending:
            engine.apply_table_gradients_of_parts(parts)
        else:
            engine.apply_gradients_of_parts(parts)
    assert_state_close(engine_state(engine), before, tol=0)


@pytest.mark.parametrize("poison", ["activation_grad", "multiplier", "weight"])
def test_non_finite_gradient_input_is_an_error_in_graphs_before_any_update(poison):
    with tf.Graph().as_default():
        engine = EmbeddingEngine(feature_config(), optimizers.SGD(0.1), num_shards=2, devices=CPUS)
        features, weights = _tf_inputs(BATCHES[0])
        if poison == "weight":  # An Inf weight passes validation (>= 0) and makes the mean combiner's gains NaN.
            weights["user"] = tf.ragged.constant([[1.0, np.inf, 0.5], [3.0], []], tf.float32, ragged_rank=1)
        batches = engine.preprocess(features, weights)
        acts = engine.activations(batches)
        grads = {f: tf.ones_like(a) for f, a in acts.items()}
        multiplier = None
        if poison == "activation_grad":
            grads["cat"] = grads["cat"] * np.nan
        elif poison == "multiplier":
            multiplier = tf.constant(np.inf, tf.float32)
        update = engine.apply_gradients(batches, grads, gradient_multiplier=multiplier)
        tables = {name: t.read_full_table() for name, t in engine.tables.items()}
        with tf.compat.v1.Session() as sess:
            sess.run(engine.initializer)
            before = sess.run(tables)
            expected = {
                "activation_grad": "table 'B'",
                "multiplier": "Non-finite embedding gradient",
                "weight": "table 'A'",
            }[poison]
            with pytest.raises(tf.errors.InvalidArgumentError, match=expected):
                sess.run(update)
            after = sess.run(tables)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])


# ---------------------------------------------------------------------------------------------- TF1 graph
def _graph_step(engine, batch):
    features, weights = _tf_inputs(batch)
    batches = engine.preprocess(features, weights)
    acts = engine.activations(batches)
    keys = sorted(acts)
    grads = tf.gradients(_loss(acts), [acts[k] for k in keys])
    return engine.apply_gradients(batches, dict(zip(keys, grads)))


def _graph_reads(engine):
    return {
        name: dict(params=t.read_full_table(), **{s: t.read_full_slot(s) for s in t.slot_names})
        for name, t in engine.tables.items()
    }


@pytest.mark.quick
def test_tf1_session_training_equals_reference():
    with tf.Graph().as_default():
        engine = EmbeddingEngine(
            feature_config(combiner_a="sqrtn"),
            optimizers.Adam(0.05),
            num_shards=4,
            devices=GRAPH_CPUS,
            partition_strategy="div",
        )
        steps = [_graph_step(engine, batch) for batch in BATCHES]
        reads = _graph_reads(engine)
        with tf.compat.v1.Session(config=tf.compat.v1.ConfigProto(device_count={"CPU": 4})) as sess:
            sess.run(engine.initializer)
            for step in steps:
                sess.run(step)
            got = sess.run(reads)
    assert_state_close(got, reference_training("adam", {}, 0.05, "sqrtn"))


def test_tf1_bad_ids_error_names_feature_and_tables_unchanged():
    with tf.Graph().as_default():
        engine = EmbeddingEngine(
            feature_config(), optimizers.Adagrad(0.1), num_shards=2, devices=GRAPH_CPUS, partition_strategy="mod"
        )
        cat = tf.compat.v1.placeholder(tf.int64, [BATCH_SIZE, 1])
        features, weights = _tf_inputs(BATCHES[0])
        features["cat"] = cat
        batches = engine.preprocess(features, weights)
        acts = engine.activations(batches)
        keys = sorted(acts)
        grads = tf.gradients(_loss(acts), [acts[k] for k in keys])
        step = engine.apply_gradients(batches, dict(zip(keys, grads)))
        reads = _graph_reads(engine)
        with tf.compat.v1.Session(config=tf.compat.v1.ConfigProto(device_count={"CPU": 4})) as sess:
            sess.run(engine.initializer)
            before = sess.run(reads)
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"Feature .*cat.* ids must be in"):
                sess.run(step, {cat: [[1], [-1], [0]]})
            assert_state_close(sess.run(reads), before, tol=0)
            sess.run(step, {cat: [[1], [6], [1]]})
            after = sess.run(reads)
    assert not np.allclose(after["B"]["params"], before["B"]["params"])


def test_tf2_checkpoint_uses_upstream_layout(tmp_path):
    engine = EmbeddingEngine(feature_config(), optimizers.Adam(0.05), num_shards=4, devices=CPUS)
    train_eager(engine, steps=BATCHES[:1])
    path = tf.train.Checkpoint(embedding=engine).write(str(tmp_path / "ckpt"))
    keys = {k for k, _ in tf.train.list_variables(path)} - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert keys == {
        f"embedding/{t}{s}/.ATTRIBUTES/VARIABLE_VALUE" for t in "AB" for s in ("", ".Smomenta", ".Svelocities")
    }
    other = EmbeddingEngine(feature_config(), optimizers.Adam(0.05), num_shards=3, partition_strategy="mod")
    tf.train.Checkpoint(embedding=other).read(path).assert_consumed()
    assert_state_close(engine_state(other), engine_state(engine), tol=0)


def test_callable_learning_rate_evaluated_once_per_step():
    calls = []

    def lr():
        calls.append(1)
        return 0.1

    engine = EmbeddingEngine(feature_config(combiner_a="sum"), optimizers.SGD(lr), num_shards=2, devices=CPUS)
    train_eager(engine)
    assert len(calls) == len(BATCHES)  # Two tables share the global optimizer: one evaluation per step.
    assert_state_close(engine_state(engine), reference_training("sgd", {}, 0.1, "sum"))
