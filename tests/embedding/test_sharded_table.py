"""ShardedTable: placement, lookup, sparse apply against NumPy formulas, logical checkpoints, TF1 graphs."""

import numpy as np
import pytest
import tensorflow as tf

from embedding import checkpointing, config, optimizers
from embedding.sharded_table import ShardedTable, ShardLayout
from tests.helpers.devices import logical_cpus
from tests.oracles import optimizers as ref
from tests.oracles import tables as tables_oracle

CPUS = logical_cpus()
GRAPH_CPUS = [f"/cpu:{k}" for k in range(4)]
VOCAB, DIM = 11, 3


def _session_config():
    return tf.compat.v1.ConfigProto(device_count={"CPU": 4})


def _full(seed=0, vocab=VOCAB, dim=DIM):
    return np.random.RandomState(seed).normal(size=(vocab, dim)).astype(np.float32)


def _table(opt, n, strategy, init=None, name="t", devices=None, **kw):
    init = init if init is not None else tf.constant_initializer(_full())
    tc = config.TableConfig(VOCAB, DIM, initializer=init, name=name)
    return ShardedTable(tc, opt, n, devices if devices is not None else CPUS, strategy, **kw)


def _state(table):
    out = {"params": table.read_full_table().numpy()}
    for slot in table.slot_names:
        out[slot] = table.read_full_slot(slot).numpy()
    return out


# (id, optimizer factory, reference kind, reference kwargs, lazy)
OPTIMIZERS = [
    ("sgd", lambda: optimizers.SGD(0.1), "sgd", {}, True),
    (
        "sgd_clip_decay",
        lambda: optimizers.SGD(0.1, clipvalue=0.5, weight_decay_factor=0.05, clip_weight_min=-1.0, clip_weight_max=1.2),
        "sgd",
        dict(
            clip_gradient_min=-0.5,
            clip_gradient_max=0.5,
            weight_decay_factor=0.05,
            clip_weight_min=-1.0,
            clip_weight_max=1.2,
        ),
        True,
    ),
    (
        "adagrad",
        lambda: optimizers.Adagrad(0.1, initial_accumulator_value=0.2),
        "adagrad",
        dict(initial_accumulator_value=0.2),
        True,
    ),
    (
        "adagrad_clip",
        lambda: optimizers.Adagrad(0.1, clipvalue=(-0.4, 0.6)),
        "adagrad",
        dict(clip_gradient_min=-0.4, clip_gradient_max=0.6),
        True,
    ),
    (
        "adagrad_momentum",
        lambda: optimizers.AdagradMomentum(0.1, momentum=0.9, use_nesterov=True),
        "adagrad_momentum",
        dict(momentum=0.9, use_nesterov=True),
        True,
    ),
    ("adam_lazy", lambda: optimizers.Adam(0.05), "adam", {}, True),
    (
        "adam_dense",
        lambda: optimizers.Adam(0.05, lazy_adam=False, sum_inside_sqrt=False),
        "adam",
        dict(sum_inside_sqrt=False),
        False,
    ),
    (
        "ftrl",
        lambda: optimizers.FTRL(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.02, beta=0.1),
        "ftrl",
        dict(l1=0.01, l2=0.02, beta=0.1),
        True,
    ),
    (
        "ftrl_linear_lr",
        lambda: optimizers.FTRL(0.1, l1_regularization_strength=0.01, beta=0.1, multiply_linear_by_learning_rate=True),
        "ftrl",
        dict(l1=0.01, beta=0.1, multiply_linear_by_learning_rate=True),
        True,
    ),
]

STEPS = [
    (np.array([0, 3, 10, 5], np.int64), 0.5),
    (np.array([7, 3, 10], np.int64), -0.8),
    (np.array([1, 2, 9, 6, 0], np.int64), 1.3),
]


def _grads(step, ids):
    return np.random.RandomState(100 + step).normal(size=(len(ids), DIM)).astype(np.float32)


def _reference(kind, kwargs, lazy, steps=STEPS, lr=None):
    gradient_steps = [(ids, _grads(i, ids)) for i, (ids, _) in enumerate(steps)]
    return tables_oracle.train_table(
        kind, _full(), gradient_steps, lr if lr is not None else _LR[kind], lazy=lazy, **kwargs
    )


_LR = {"sgd": 0.1, "adagrad": 0.1, "adagrad_momentum": 0.1, "adam": 0.05, "ftrl": 0.1}


# ------------------------------------------------------------------------------------------------- layout
@pytest.mark.parametrize("strategy", ["div", "mod"])
@pytest.mark.parametrize("vocab,n", [(11, 4), (8, 4), (3, 4), (11, 1), (5, 2)])
def test_layout_rows_cover_vocabulary_once(strategy, vocab, n):
    layout = ShardLayout(vocab, n, strategy)
    rows = np.concatenate([layout.row_ids(k) for k in range(n)])
    assert sorted(rows.tolist()) == list(range(vocab))
    assert [len(layout.row_ids(k)) for k in range(n)] == layout.sizes
    if strategy == "div":
        assert layout.sizes == sorted(layout.sizes, reverse=True)  # First vocab % n shards one row larger.
        assert rows.tolist() == list(range(vocab))
    full = np.arange(vocab * 2, dtype=np.float32).reshape(vocab, 2)
    parts = layout.split(tf.constant(full))
    np.testing.assert_array_equal(layout.assemble(parts).numpy(), full)
    for k, part in enumerate(parts):
        np.testing.assert_array_equal(part.numpy(), full[layout.row_ids(k)])


# ------------------------------------------------------------------------------------------------- lookup
@pytest.mark.parametrize("strategy", ["div", "mod"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_lookup_equals_full_table_gather(strategy, n):
    table = _table(None, n, strategy)
    full = _full()
    ids = np.array([10, 0, 3, 4, 7, 9, 1], np.int64)
    np.testing.assert_array_equal(table.lookup(ids).numpy(), full[ids])
    np.testing.assert_array_equal(table.lookup(tf.constant(ids, tf.int32)).numpy(), full[ids])
    np.testing.assert_array_equal(table.lookup(np.zeros([0], np.int64)).numpy().shape, [0, DIM])
    np.testing.assert_array_equal(table.read_full_table().numpy(), full)
    layout = table.layout
    for k, shard in enumerate(table.shards):  # Each shard holds its rows, on its own device.
        np.testing.assert_array_equal(shard.numpy(), full[layout.row_ids(k)])
        index = tf.DeviceSpec.from_string(shard.device).device_index
        assert index == tf.DeviceSpec.from_string(CPUS[k % len(CPUS)]).device_index


def test_shards_on_distinct_devices():
    if len(CPUS) < 4:
        pytest.skip("needs 4 logical CPU devices")
    table = _table(optimizers.Adagrad(0.1), 4, "mod")
    devices = {tf.DeviceSpec.from_string(v.device).device_index for v in table.shards}
    assert devices == {0, 1, 2, 3}
    for k in range(4):
        assert table.slot_shards("accumulators")[k].device == table.shards[k].device


@pytest.mark.parametrize("strategy", ["div", "mod"])
def test_row_id_initializer_gets_global_rows(strategy):
    table = _table(None, 3, strategy, init=config.RowIdInitializer(offset=5))
    expected = (np.arange(VOCAB) + 5)[:, None] * np.ones([1, DIM])
    np.testing.assert_array_equal(table.read_full_table().numpy(), expected)


def test_row_ids_protocol_initializer():
    seen = []

    def init(shape, dtype=tf.float32, row_ids=None):
        seen.append(shape)
        return tf.cast(row_ids, dtype)[:, None] * tf.ones(shape, dtype) * 2.0

    table = _table(None, 4, "mod", init=init)
    np.testing.assert_array_equal(table.read_full_table().numpy()[:, 0], np.arange(VOCAB) * 2.0)
    assert all(s[0] < VOCAB for s in seen)  # Never called with the full table shape.


# -------------------------------------------------------------------------------------------------- apply
@pytest.mark.parametrize("strategy,n", [("div", 1), ("div", 4), ("mod", 2), ("mod", 4)])
@pytest.mark.parametrize("case", OPTIMIZERS, ids=[c[0] for c in OPTIMIZERS])
def test_apply_equals_numpy_reference(case, strategy, n):
    _, make_opt, kind, kwargs, lazy = case
    table = _table(make_opt(), n, strategy)
    assert table.slot_names == ref.SLOTS[kind]
    before = _state(table)
    for i, (ids, _) in enumerate(STEPS):
        table.apply_gradients(ids, _grads(i, ids))
    expected = _reference(kind, kwargs, lazy)
    after = _state(table)
    for key in expected:
        np.testing.assert_allclose(after[key], expected[key], rtol=1e-5, atol=1e-5, err_msg=key)
    untouched = np.setdiff1d(np.arange(VOCAB), np.concatenate([s[0] for s in STEPS]))
    assert untouched.tolist() == [4, 8]  # Never looked up.
    for key in after:
        if lazy:
            np.testing.assert_array_equal(after[key][untouched], before[key][untouched], err_msg=key)
    if not lazy:  # Row 5 is only in step 0: its moments keep moving it afterwards, unlike lazy Adam.
        lazy_expected = _reference(kind, kwargs, True)
        assert not np.allclose(after["params"][5], lazy_expected["params"][5], rtol=1e-4, atol=1e-5)


def test_apply_learning_rate_argument_overrides_optimizer():
    table = _table(optimizers.SGD(0.1), 2, "mod")
    ids = STEPS[0][0]
    table.apply_gradients(ids, _grads(0, ids), learning_rate=0.5)
    expected = ref.lazy_table_step("sgd", ref.init_state("sgd", _full()), ids, _grads(0, ids), 0.5)
    np.testing.assert_allclose(table.read_full_table().numpy(), expected["params"], rtol=1e-6)


def test_apply_inside_tf_function_and_callable_learning_rate():
    lr = tf.Variable(0.1)
    table = _table(optimizers.Adagrad(lambda: lr), 4, "div")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, DIM], tf.float32)])
    def step(ids, grads):
        rows = table.lookup(ids)
        table.apply_gradients(ids, grads)
        return rows

    state = ref.init_state("adagrad", _full())
    for i, (ids, _) in enumerate(STEPS):
        lr.assign(0.1 * (i + 1))
        rows = step(tf.constant(ids), tf.constant(_grads(i, ids)))
        np.testing.assert_allclose(rows.numpy(), state["params"][ids], rtol=1e-5)
        state = ref.lazy_table_step("adagrad", state, ids, _grads(i, ids), 0.1 * (i + 1))
    np.testing.assert_allclose(table.read_full_table().numpy(), state["params"], rtol=1e-5, atol=1e-6)


def test_created_under_strategy_scope_stays_plain_and_placed():
    if len(CPUS) < 4:
        pytest.skip("needs 4 logical CPU devices")
    strategy = tf.distribute.MirroredStrategy(CPUS[:2])
    with strategy.scope():
        table = _table(optimizers.SGD(0.1), 2, "mod", devices=CPUS[2:])
    assert all(type(v).__name__ == "ResourceVariable" for v in table.shard_variables())
    assert [tf.DeviceSpec.from_string(v.device).device_index for v in table.shards] == [2, 3]
    ids = tf.constant([10, 3, 4], tf.int64)

    @tf.function
    def step():
        per_replica = strategy.run(lambda: table.lookup(ids))
        table.apply_gradients(ids, tf.ones([3, DIM]))
        return strategy.experimental_local_results(per_replica)

    for rows in step():
        np.testing.assert_array_equal(rows.numpy(), _full()[[10, 3, 4]])
    expected = _full()
    expected[[10, 3, 4]] -= 0.1
    np.testing.assert_allclose(table.read_full_table().numpy(), expected, rtol=1e-6)


def test_apply_without_optimizer_names_table():
    table = _table(None, 2, "div", name="my_table")
    assert table.slot_names == []
    with pytest.raises(ValueError, match="my_table"):
        table.apply_gradients([1], np.ones([1, DIM], np.float32))


# --------------------------------------------------------------------------------------------- TF1 graph
def test_tf1_while_loop_in_session():
    kind, kwargs = "ftrl", dict(l1=0.01, l2=0.02, beta=0.1)
    steps = [(np.array([0, 3, 10, 5], np.int64), None)] * 3
    graph = tf.Graph()
    with graph.as_default():
        table = _table(
            optimizers.FTRL(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.02, beta=0.1),
            4,
            "mod",
            devices=GRAPH_CPUS,
        )
        ids = tf.constant(steps[0][0])
        grads = tf.constant(_grads(0, steps[0][0]))

        def body(i, total):
            rows = table.lookup(ids)
            with tf.control_dependencies([rows]):
                update = table.apply_gradients(ids, grads)
            with tf.control_dependencies([update]):
                return i + 1, total + tf.reduce_sum(rows)

        loop = tf.compat.v1.while_loop(lambda i, _: i < 3, body, [tf.constant(0), tf.constant(0.0)])
        full = table.read_full_table()
        slots = {s: table.read_full_slot(s) for s in table.slot_names}
        with tf.compat.v1.Session(config=_session_config()) as sess:
            sess.run(table.initializer)
            sess.run(loop)
            got = sess.run(dict(params=full, **slots))
    state = ref.init_state(kind, _full())
    for _ in range(3):
        state = ref.lazy_table_step(kind, state, steps[0][0], _grads(0, steps[0][0]), 0.1, **kwargs)
    for key in state:
        np.testing.assert_allclose(got[key], state[key], rtol=1e-5, atol=1e-5, err_msg=key)


def test_tf1_shards_not_global_variables_but_initialized_by_scaffold():
    graph = tf.Graph()
    with graph.as_default():
        table = _table(optimizers.Adagrad(0.1), 4, "div", devices=GRAPH_CPUS)
        tf.compat.v1.train.get_or_create_global_step()
        global_vars = tf.compat.v1.global_variables()
        assert not any(v is s for v in global_vars for s in table.shard_variables())
        assert len(checkpointing.shard_variables(graph)) == 8
        full = table.read_full_table()
        scaffold = tf.compat.v1.train.Scaffold()
        scaffold.finalize()
        with tf.compat.v1.Session(config=_session_config()) as sess:
            assert len(sess.run(scaffold.ready_op)) == 9  # global_step + 8 shards
            sess.run(scaffold.init_op)
            assert len(sess.run(scaffold.ready_op)) == 0
            np.testing.assert_array_equal(sess.run(full), _full())


def _train_graph_table(n, strategy, opt, steps=STEPS, **kw):
    table = _table(opt, n, strategy, devices=GRAPH_CPUS, **kw)
    updates = []
    for i, (ids, _) in enumerate(steps):
        updates.append(table.apply_gradients(tf.constant(ids), tf.constant(_grads(i, ids))))
    return table, updates


def test_tf1_saver_restores_onto_other_shard_count_and_strategy(tmp_path):
    names = dict(
        checkpoint_name="input_layer/x_embedding/embedding_weights",
        slot_checkpoint_names={
            "momenta": "input_layer/x_embedding/embedding_weights/Adam",
            "velocities": "input_layer/x_embedding/embedding_weights/Adam_1",
        },
    )
    with tf.Graph().as_default():
        table, updates = _train_graph_table(4, "div", optimizers.Adam(0.05), **names)
        reads = {
            "params": table.read_full_table(),
            "momenta": table.read_full_slot("momenta"),
            "velocities": table.read_full_slot("velocities"),
        }
        # Default var_list (the logical saveables, not the shards); sharded=True as the Estimator's Scaffold.
        saver = tf.compat.v1.train.Saver(sharded=True)
        with tf.compat.v1.Session(config=_session_config()) as sess:
            sess.run(checkpointing.initializer_op())
            for u in updates:
                sess.run(u)
            saved = sess.run(reads)
            path = saver.save(sess, str(tmp_path / "model"))
    assert dict(tf.train.list_variables(path)) == {
        "input_layer/x_embedding/embedding_weights": [VOCAB, DIM],
        "input_layer/x_embedding/embedding_weights/Adam": [VOCAB, DIM],
        "input_layer/x_embedding/embedding_weights/Adam_1": [VOCAB, DIM],
    }
    reader = tf.train.load_checkpoint(path)
    np.testing.assert_array_equal(reader.get_tensor("input_layer/x_embedding/embedding_weights"), saved["params"])

    with tf.Graph().as_default():
        table = _table(optimizers.Adam(0.05), 2, "mod", init=tf.zeros_initializer(), devices=GRAPH_CPUS, **names)
        ids = tf.constant([10, 1, 4, 7], tf.int64)
        rows = table.lookup(ids)
        reads = {
            "params": table.read_full_table(),
            "momenta": table.read_full_slot("momenta"),
            "velocities": table.read_full_slot("velocities"),
        }
        with tf.compat.v1.Session(config=_session_config()) as sess:
            tf.compat.v1.train.Saver().restore(sess, path)
            restored, looked_up = sess.run([reads, rows])
    for key in saved:
        np.testing.assert_array_equal(restored[key], saved[key], err_msg=key)
    np.testing.assert_array_equal(looked_up, saved["params"][[10, 1, 4, 7]])


def test_tf1_meta_graph_import_and_restore(tmp_path):
    with tf.Graph().as_default():
        table, updates = _train_graph_table(3, "mod", optimizers.Adagrad(0.1))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(config=_session_config()) as sess:
            sess.run(checkpointing.initializer_op())
            sess.run(updates[0])
            saved = sess.run(table.read_full_slot("accumulators"))
            path = saver.save(sess, str(tmp_path / "model"))
    with tf.Graph().as_default() as graph:
        imported = tf.compat.v1.train.import_meta_graph(path + ".meta")
        shards = checkpointing.shard_variables(graph)
        assert len(shards) == 6 and all(isinstance(v, tf.Variable) for v in shards)
        with tf.compat.v1.Session(config=_session_config()) as sess:
            imported.restore(sess, path)
            slot = sess.run([v for v in shards if "accumulators" in v.name])
    np.testing.assert_array_equal(
        np.concatenate(slot)[np.argsort(np.concatenate([ShardLayout(VOCAB, 3, "mod").row_ids(k) for k in range(3)]))],
        saved,
    )


def test_tf1_explicit_saveables_and_var_list(tmp_path):
    with tf.Graph().as_default():
        table = _table(optimizers.Adagrad(0.1), 3, "mod", devices=GRAPH_CPUS, register_in_graph=False)
        other = tf.compat.v1.get_variable("dense", initializer=tf.ones([2]))
        assert not tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)
        saver = tf.compat.v1.train.Saver(var_list=[other] + table.saveables())
        with tf.compat.v1.Session(config=_session_config()) as sess:
            sess.run([tf.compat.v1.global_variables_initializer(), table.initializer])
            path = saver.save(sess, str(tmp_path / "m"))
    assert sorted(n for n, _ in tf.train.list_variables(path)) == ["dense", "t", "t/accumulators"]


# ------------------------------------------------------------------------------------------ TF2 checkpoint
def test_tf2_checkpoint_restores_onto_other_shard_count_and_strategy(tmp_path):
    table = _table(optimizers.FTRL(0.1), 4, "div")
    for i, (ids, _) in enumerate(STEPS):
        table.apply_gradients(ids, _grads(i, ids))
    saved = _state(table)
    path = tf.train.Checkpoint(embedding=table).write(str(tmp_path / "ckpt"))
    keys = dict(tf.train.list_variables(path))
    assert "embedding/t/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert keys["embedding/t.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE"] == [VOCAB, DIM]
    assert not any("shard" in k for k in keys)

    restored = _table(optimizers.FTRL(0.1), 2, "mod", init=tf.zeros_initializer())
    tf.train.Checkpoint(embedding=restored).read(path).assert_consumed()
    got = _state(restored)
    for key in saved:
        np.testing.assert_array_equal(got[key], saved[key], err_msg=key)
    ids = np.array([10, 1, 4, 7])
    np.testing.assert_array_equal(restored.lookup(ids).numpy(), saved["params"][ids])


def test_tf2_checkpoint_interoperates_with_plain_variable(tmp_path):
    full = _full(seed=3)
    plain = tf.train.Checkpoint()
    plain.t = tf.Variable(full)  # Same child name as the table's logical tensor.
    path = plain.write(str(tmp_path / "plain"))
    table = _table(None, 4, "mod")
    tf.train.Checkpoint(root=table)  # The table itself is the root object below.
    status = tf.train.Checkpoint(t=table.logical_tensors()["t"]).read(path)
    status.assert_existing_objects_matched()
    np.testing.assert_array_equal(table.read_full_table().numpy(), full)


def test_restore_with_wrong_shape_is_a_clear_error():
    table = _table(None, 2, "div")
    with pytest.raises(ValueError, match="expected"):
        table.assign_full_table(np.zeros([VOCAB + 1, DIM], np.float32))


def test_free_form_table_name_and_estimator_style_parameters():
    tc = config.TableConfig(VOCAB, DIM, initializer=tf.constant_initializer(_full()), name="tbl_x emb:weights")
    table = ShardedTable(tc, optimizers.AdagradParameters(0.1), 2, CPUS, "mod")
    assert table.slot_names == ["accumulators"]
    ids = STEPS[0][0]
    table.apply_gradients(ids, _grads(0, ids))
    expected = ref.lazy_table_step("adagrad", ref.init_state("adagrad", _full()), ids, _grads(0, ids), 0.1)
    np.testing.assert_allclose(table.read_full_table().numpy(), expected["params"], rtol=1e-5)
