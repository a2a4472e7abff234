"""SparseCore-layout checkpoints (a TPU's `TPUEmbeddingV2`) restore into ours exactly, and never silently wrong;
ours written for a described TPU (`sparse_core_topology`) are read by TensorFlow's own adapter and serving.

The TF 2.21 leg builds the checkpoints with TensorFlow's own SparseCore layout code (tests/helpers/sparsecore_fixture.py:
TF's stacker, TF's CPU -> SparseCore shuffle, TF's layouts trackable); the values expected are the per-table values
the fixture started from, and TF 2.21's own `TPUEmbeddingForServing` is checked to read the same fixture. TF 2.15 has
no SparseCore layout code: there the tests of TF 2.15's `experimental_sparsecore_restore_info` use TF 2.15's own
`TPUEmbeddingForServing` as the oracle; a checkpoint TF 2.21's code built (stored in tests/embedding/data) restores
exactly into our three APIs on 1-3 shards and is refused by a name-based Saver; our SparseCore checkpoints come
back exactly; the argument checks, the layouts-proto errors and the restore of plain checkpoints run too. The tests
that need TF's SparseCore code are marked to run on the TF 2.21 leg only, with the reason.
"""

import numpy as np
import pytest
import tensorflow as tf

from embedding import config, optimizers
from embedding import sparsecore_layout as layout_lib
from embedding.serving import TPUEmbeddingForServing
from embedding.sparsecore_layout import SparseCoreTopology
from embedding.tpu_embedding import TPUEmbedding
from embedding.tpu_embedding_v2 import TPUEmbeddingV2
from tests.helpers import sparsecore_fixture as fx
from tests.helpers.tables import engine_state
from tests.helpers.two_table_model import mirrored

needs_tf_sparsecore = pytest.mark.skipif(not fx.HAVE_TF_SPARSECORE, reason=fx.REASON)

OPTIMIZERS = {
    "adagrad": lambda: optimizers.Adagrad(0.5),
    "adam": lambda: optimizers.Adam(0.5),
    "ftrl": lambda: optimizers.FTRL(0.5),
}


def feature_config(tables=None, optimizer_of=None):
    tables = fx.TABLES if tables is None else tables
    out = {}
    for name in sorted(tables):
        rows, dim, _ = tables[name]
        opt = optimizer_of(name) if optimizer_of else None
        table = config.TableConfig(rows, dim, name=name, combiner="sum", optimizer=opt)
        out[f"f_{name}"] = config.FeatureConfig(table)
    return out


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """optimizer kind -> (path, values): one TF-built checkpoint per slot kind."""
    if not fx.HAVE_TF_SPARSECORE:
        pytest.skip(fx.REASON)
    layouts = fx.tf_layouts()
    out = {}
    for kind, slots in fx.SLOTS.items():
        values = fx.random_values(slots, seed=len(out))
        path = fx.write_checkpoint(str(tmp_path_factory.mktemp(kind) / "ckpt"), values, slots, layouts)
        out[kind] = (path, values)
    return out


def state_of(embedding):
    return engine_state(embedding._engine)


# ------------------------------------------------------------------------------------------ the fixture itself
@needs_tf_sparsecore
def test_fixture_stacks_rotates_and_coincides_as_the_issue_describes(checkpoints):
    layouts = {lay.table_name: lay for lay in fx.tf_layouts().tables}
    assert layouts["a"].stacked_table_name == layouts["b"].stacked_table_name == "a_b"
    assert layouts["b"].sparse_core_shard_rotation == 4 and layouts["b"].sparse_core_shard_row_offset > 0
    assert layouts["c"].stacked_table_name == "c" and list(layouts["c"].unsharded_padded_shape) == [64, 8]
    path, values = checkpoints["adagrad"]
    raw_c = tf.train.load_checkpoint(path).get_tensor("embedding/c/.ATTRIBUTES/VARIABLE_VALUE")
    assert raw_c.shape == values[("c", "parameters")].shape  # Same key and shape as ours...
    assert not np.array_equal(raw_c, values[("c", "parameters")])  # ...rows shuffled.


@needs_tf_sparsecore
def test_tensorflows_own_serving_reads_the_fixture(checkpoints):
    path, values = checkpoints["adagrad"]
    tables = {n: tf.tpu.experimental.embedding.TableConfig(r, d, name=n) for n, (r, d, _) in fx.TABLES.items()}
    feats = {n: tf.tpu.experimental.embedding.FeatureConfig(table=t) for n, t in tables.items()}
    serving = tf.tpu.experimental.embedding.TPUEmbeddingForServing(feats, tf.tpu.experimental.embedding.Adagrad(0.1))
    tf.train.Checkpoint(embedding=serving).restore(path).expect_partial()  # Before build, as TF requires.
    serving.build()
    for name, table in tables.items():
        np.testing.assert_array_equal(serving.embedding_tables[table].numpy(), values[(name, "parameters")])


@needs_tf_sparsecore
def test_layouts_proto_parses_as_tensorflows():
    proto = fx.tf_layouts()
    ours = layout_lib.parse_layouts(proto.SerializeToString())
    assert [lay.table_name for lay in ours] == [lay.table_name for lay in proto.tables]
    for mine, theirs in zip(ours, proto.tables):
        for field in (
            "stacked_table_name",
            "num_sparse_cores",
            "num_partitions",
            "total_rows_per_sparse_core_shard",
            "sparse_core_shard_row_offset",
            "sparse_core_shard_rotation",
        ):
            assert getattr(mine, field) == getattr(theirs, field), field
        assert list(mine.unsharded_shape) == list(theirs.unsharded_shape)
        assert list(mine.unsharded_padded_shape) == list(theirs.unsharded_padded_shape)


# ------------------------------------------------------------------------------------------------ restore
@needs_tf_sparsecore
@pytest.mark.parametrize("num_shards", [1, 2, 3])
@pytest.mark.parametrize("kind", sorted(fx.SLOTS))
def test_tpu_embedding_v2_restores_parameters_and_slots_bit_for_bit(checkpoints, kind, num_shards):
    path, values = checkpoints[kind]
    with mirrored(num_shards).scope():
        embedding = TPUEmbeddingV2(feature_config(), OPTIMIZERS[kind]())
    tf.train.Checkpoint(embedding=embedding).restore(path).expect_partial()
    state = state_of(embedding)
    for name in fx.TABLES:
        assert len(embedding.engine.tables[name].shards) == num_shards
        np.testing.assert_array_equal(state[name]["params"], values[(name, "parameters")], err_msg=name)
        for slot in fx.SLOTS[kind]:
            np.testing.assert_array_equal(state[name][slot], values[(name, slot)], err_msg=f"{name}/{slot}")
    # Shard k of a 'mod' table holds rows k, k + n, ...
    shards = [v.numpy() for v in embedding.engine.tables["b"].shards]
    for k, shard in enumerate(shards):
        np.testing.assert_array_equal(shard, values[("b", "parameters")][k::num_shards])


@needs_tf_sparsecore
def test_serving_restores_parameters_and_slots(checkpoints):
    path, values = checkpoints["ftrl"]
    serving = TPUEmbeddingForServing(feature_config(), optimizers.FTRL(0.5))
    tf.train.Checkpoint(embedding=serving).restore(path).expect_partial()
    state = state_of(serving)
    for name in fx.TABLES:
        for kind, key in [("params", "parameters"), ("accumulators", "accumulators"), ("linears", "linears")]:
            np.testing.assert_array_equal(state[name][kind], values[(name, key)], err_msg=f"{name}/{kind}")
    served = serving({f"f_{n}": tf.constant([3, 0, 3]) for n in fx.TABLES})
    for name in fx.TABLES:
        np.testing.assert_array_equal(served[f"f_{name}"].numpy(), values[(name, "parameters")][[3, 0, 3]])


def _distributed(strategy, per_replica):
    return strategy.experimental_distribute_values_from_function(lambda ctx: per_replica[ctx.replica_id_in_sync_group])


@needs_tf_sparsecore
@pytest.mark.parametrize("num_shards", [2, 3])
def test_lookups_and_one_adagrad_step_equal_numpy_per_table_reference(checkpoints, num_shards):
    path, values = checkpoints["adagrad"]
    lr = 0.5
    strategy = mirrored(num_shards)
    with strategy.scope():
        embedding = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(lr))
    tf.train.Checkpoint(embedding=embedding).restore(path).expect_partial()
    rng = np.random.RandomState(7)
    batch = 4
    ids = {n: rng.randint(0, r, (num_shards, batch)) for n, (r, _, _) in fx.TABLES.items()}
    ids["b"][:, 0] = 69  # The last row of the rotated table, on every replica.
    grads = {n: rng.standard_normal((num_shards, batch, d)).astype(np.float32) for n, (_, d, _) in fx.TABLES.items()}
    per_replica = [
        (
            {f"f_{n}": tf.constant(ids[n][k], tf.int64) for n in fx.TABLES},
            {f"f_{n}": tf.constant(grads[n][k]) for n in fx.TABLES},
        )
        for k in range(num_shards)
    ]

    @tf.function
    def step(features, gradients):
        def replica(f, g):
            activations, preserved = embedding(f)
            embedding.apply_gradients(g, preserved)
            return activations

        return strategy.run(replica, args=(features, gradients))

    acts = step(*_distributed(strategy, per_replica))
    state = state_of(embedding)
    for name in fx.TABLES:
        params, acc = values[(name, "parameters")], values[(name, "accumulators")]
        got = [a.numpy() for a in strategy.experimental_local_results(acts[f"f_{name}"])]
        for k in range(num_shards):
            np.testing.assert_array_equal(got[k], params[ids[name][k]], err_msg=f"lookup {name} replica {k}")
        g = np.zeros_like(params)
        np.add.at(g, ids[name].reshape(-1), grads[name].reshape(-1, params.shape[1]))
        touched = np.unique(ids[name])
        new_acc = acc.copy()
        new_acc[touched] += g[touched] ** 2
        new_params = params.copy()
        new_params[touched] -= lr * g[touched] / np.sqrt(new_acc[touched])
        np.testing.assert_allclose(state[name]["accumulators"], new_acc, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(state[name]["params"], new_params, rtol=1e-5, atol=1e-6, err_msg=name)


# ---------------------------------------------------------------------------------------- never silently wrong
def _fresh_state(embedding):
    return {n: {k: v.copy() for k, v in t.items()} for n, t in state_of(embedding).items()}


@needs_tf_sparsecore
def test_tables_missing_on_either_side_are_named_and_nothing_changes(checkpoints):
    path, values = checkpoints["adagrad"]
    tables = {"a": fx.TABLES["a"], "c": fx.TABLES["c"], "d": (16, 4, "g1")}
    embedding = TPUEmbeddingV2(feature_config(tables), optimizers.Adagrad(0.5))
    before = _fresh_state(embedding)
    with pytest.raises(ValueError, match=r"tables \['d'\] are configured but not in the checkpoint, tables \['b'\]"):
        tf.train.Checkpoint(embedding=embedding).restore(path)
    for name, arrays in state_of(embedding).items():
        for key, array in arrays.items():
            np.testing.assert_array_equal(array, before[name][key], err_msg=f"{name}/{key} changed")
    embedding.partial_restore = True
    tf.train.Checkpoint(embedding=embedding).restore(path).expect_partial()
    state = state_of(embedding)
    for name in ("a", "c"):
        np.testing.assert_array_equal(state[name]["params"], values[(name, "parameters")])
        np.testing.assert_array_equal(state[name]["accumulators"], values[(name, "accumulators")])
    np.testing.assert_array_equal(state["d"]["params"], before["d"]["params"])


@needs_tf_sparsecore
def test_missing_slots_are_named_unless_partial(checkpoints):
    path, values = checkpoints["adagrad"]
    embedding = TPUEmbeddingV2(feature_config(), optimizers.Adam(0.5))
    before = _fresh_state(embedding)
    with pytest.raises(ValueError, match=r"no 'a_b/momenta' for table 'a' \(the optimizers differ\?\)"):
        tf.train.Checkpoint(embedding=embedding).restore(path)
    np.testing.assert_array_equal(state_of(embedding)["c"]["params"], before["c"]["params"])
    embedding.partial_restore = True
    tf.train.Checkpoint(embedding=embedding).restore(path).expect_partial()
    state = state_of(embedding)
    np.testing.assert_array_equal(state["c"]["params"], values[("c", "parameters")])
    np.testing.assert_array_equal(state["c"]["momenta"], before["c"]["momenta"])


@needs_tf_sparsecore
def test_a_table_of_another_shape_is_named(checkpoints):
    path, _ = checkpoints["adagrad"]
    tables = dict(fx.TABLES, c=(60, 8, "g2"))
    embedding = TPUEmbeddingV2(feature_config(tables), optimizers.Adagrad(0.5))
    with pytest.raises(ValueError, match=r"Table 'c' is \[60, 8\] here, \[64, 8\] in the SparseCore checkpoint"):
        tf.train.Checkpoint(embedding=embedding).restore(path)


@needs_tf_sparsecore
def test_graph_mode_restore_of_a_sparsecore_checkpoint_is_an_error(checkpoints):
    path, _ = checkpoints["adagrad"]
    with tf.Graph().as_default():
        serving = TPUEmbeddingForServing(feature_config(), None)
        with pytest.raises(ValueError, match="holds SparseCore layouts .* restore it executing eagerly"):
            tf.train.Checkpoint(embedding=serving).restore(path)


def test_plain_checkpoints_still_restore_and_are_consumed(tmp_path):
    trained = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(0.5))
    for name, table in trained.engine.tables.items():
        table.assign_full_table(np.full([table.vocabulary_size, table.dim], 3.0, np.float32))
    path = tf.train.Checkpoint(embedding=trained).save(str(tmp_path / "plain"))
    with mirrored(2).scope():
        restored = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(0.5))
    tf.train.Checkpoint(embedding=restored).restore(path).assert_consumed()
    for name, arrays in state_of(restored).items():
        np.testing.assert_array_equal(arrays["params"], 3.0)


def test_a_malformed_layouts_proto_is_a_clear_error():
    with pytest.raises(ValueError, match="`_sparse_core_table_layouts` is not a SparseCoreTableLayouts proto"):
        layout_lib.parse_layouts(b"\x0a\xff\xff")


# ------------------------------------------------------------------ TF 2.15's experimental_sparsecore_restore_info
@pytest.mark.parametrize(
    "info, message",
    [
        ({"num_tpu_devices": 2}, "Missing `num_sc_chips_per_tpu` in `experimental_sparsecore_restore_info`"),
        ({"num_sc_chips_per_tpu": 4}, "Missing `num_tpu_devices` in `experimental_sparsecore_restore_info`"),
        ({"num_tpu_devices": 2, "num_sc_chips_per_tpu": 0}, "`num_sc_chips_per_tpu` .* must be a positive int"),
        ({"num_tpu_devices": 2, "num_sc_chips_per_tpu": 4, "rotation": 1}, r"Unknown keys \['rotation'\]"),
    ],
)
def test_restore_info_is_checked_at_construction(info, message):
    with pytest.raises(ValueError, match=message):
        TPUEmbeddingForServing(feature_config(), None, experimental_sparsecore_restore_info=info)


RESTORE_INFO = {"num_tpu_devices": 2, "num_sc_chips_per_tpu": 4}
ONE_TABLE = {"c": (40, 4, "g")}  # Padded on the TPU to [64, 8]: 2 x 4 SparseCores.


def _shuffled_checkpoint(path, padded):
    """A checkpoint `{c, c/accumulators}` of arbitrary [64, 8] values (as 2.15-era SparseCore training wrote)."""
    owner = tf.Module()
    owner.c = tf.Variable(padded[0])
    owner.acc = tf.Variable(padded[1])
    embedding = tf.train.Checkpoint(**{"c": owner.c, "c/accumulators": owner.acc})
    return tf.train.Checkpoint(embedding=embedding).save(path)


def _padded_values():
    rng = np.random.RandomState(3)
    return [rng.standard_normal((64, 8)).astype(np.float32), rng.uniform(0.1, 1, (64, 8)).astype(np.float32)]


@pytest.mark.skipif(
    not hasattr(tf.tpu.experimental.embedding.TPUEmbeddingForServing, "_unshuffle_from_sc_to_cpu"),
    reason="the oracle is TF 2.15's TPUEmbeddingForServing, which unshuffles with experimental_sparsecore_restore_info "
    "(TF 2.21's ignores the argument; the TF 2.21 leg checks against TF's shuffle below): runs on the TF 2.15 leg",
)
def test_restore_info_reads_as_tensorflow_2_15_does(tmp_path):
    padded = _padded_values()
    path = _shuffled_checkpoint(str(tmp_path / "sc"), padded)
    table = tf.tpu.experimental.embedding.TableConfig(40, 4, name="c")
    upstream = tf.tpu.experimental.embedding.TPUEmbeddingForServing(
        tf.tpu.experimental.embedding.FeatureConfig(table=table),
        tf.tpu.experimental.embedding.Adagrad(0.1),
        experimental_sparsecore_restore_info=RESTORE_INFO,
    )
    tf.train.Checkpoint(embedding=upstream).restore(path).expect_partial()  # Restore-on-create, as 2.15 requires.
    upstream.build()
    ours = TPUEmbeddingForServing(
        feature_config(ONE_TABLE), optimizers.Adagrad(0.1), experimental_sparsecore_restore_info=RESTORE_INFO
    )
    tf.train.Checkpoint(embedding=ours).restore(path).assert_consumed()
    state = state_of(ours)["c"]
    np.testing.assert_array_equal(state["params"], upstream.embedding_tables[table].numpy())
    np.testing.assert_array_equal(state["accumulators"], upstream._variables["c"]["accumulators"].numpy())
    assert not np.array_equal(state["params"], padded[0][:40, :4])


@needs_tf_sparsecore
def test_restore_info_unshuffles_tensorflows_shuffle(tmp_path):
    layout = fx.tf_layouts({"c": (40, 4, "g")}).tables[0]
    assert layout.sparse_core_shard_rotation == 0 and list(layout.unsharded_padded_shape) == [64, 8]
    rng = np.random.RandomState(5)
    values = [rng.standard_normal((40, 4)).astype(np.float32) for _ in range(2)]
    padded = [fx.tf_stack({"c": v}, [layout]) for v in values]
    path = _shuffled_checkpoint(str(tmp_path / "sc"), padded)
    ours = TPUEmbeddingForServing(
        feature_config(ONE_TABLE), optimizers.Adagrad(0.1), experimental_sparsecore_restore_info=RESTORE_INFO
    )
    tf.train.Checkpoint(embedding=ours).restore(path).assert_consumed()
    np.testing.assert_array_equal(state_of(ours)["c"]["params"], values[0])
    np.testing.assert_array_equal(state_of(ours)["c"]["accumulators"], values[1])


def test_restore_info_with_rows_not_a_multiple_of_the_sparsecores_is_named(tmp_path):
    path = _shuffled_checkpoint(str(tmp_path / "sc"), [np.zeros((60, 8), np.float32)] * 2)
    ours = TPUEmbeddingForServing(feature_config(ONE_TABLE), None, experimental_sparsecore_restore_info=RESTORE_INFO)
    with pytest.raises(ValueError, match=r"Cannot restore 'c' with experimental_sparsecore_restore_info \(8 Sparse"):
        tf.train.Checkpoint(embedding=ours).restore(path).expect_partial()


# --------------------------------------------------- a checkpoint TensorFlow 2.21 built, restored on both legs
# tests/embedding/data/sparsecore_adagrad-1: the fixture's three tables with Adagrad slots (values
# `fx.random_values(["accumulators"], seed=11)`), written on the TF 2.21 leg by tests/helpers/sparsecore_fixture.py;
# the first test checks that TensorFlow's code still builds exactly this checkpoint.
STORED = str(__import__("pathlib").Path(__file__).parent / "data" / "sparsecore_adagrad-1")


def _stored_values():
    return fx.random_values(["accumulators"], seed=11)


@needs_tf_sparsecore
def test_stored_checkpoint_is_what_tensorflows_code_builds(tmp_path):
    fresh = fx.write_checkpoint(str(tmp_path / "ckpt"), _stored_values(), ["accumulators"], fx.tf_layouts())
    stored, built = tf.train.load_checkpoint(STORED), tf.train.load_checkpoint(fresh)
    keys = sorted(k for k in built.get_variable_to_shape_map() if k.startswith("embedding/"))
    assert keys == sorted(k for k in stored.get_variable_to_shape_map() if k.startswith("embedding/"))
    for key in keys:
        if "_sparse_core_table_layouts" in key:
            assert layout_lib.parse_layouts(stored.get_tensor(key)) == layout_lib.parse_layouts(built.get_tensor(key))
        else:
            np.testing.assert_array_equal(stored.get_tensor(key), built.get_tensor(key), err_msg=key)


@pytest.mark.parametrize(
    "api, num_shards", [("v2", 1), ("v2", 2), ("v2", 3), ("mid_level", 1), ("mid_level", 3), ("serving", 1)]
)
def test_stored_tensorflow_checkpoint_restores_exactly(api, num_shards):
    values = _stored_values()
    with mirrored(num_shards).scope():
        if api == "v2":
            embedding = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(0.5))
        elif api == "mid_level":
            embedding = TPUEmbedding(feature_config(), optimizers.Adagrad(0.5))
    if api == "serving":
        embedding = TPUEmbeddingForServing(feature_config(), optimizers.Adagrad(0.5))
    tf.train.Checkpoint(embedding=embedding).restore(STORED).expect_partial()
    state = state_of(embedding)
    for name in fx.TABLES:
        np.testing.assert_array_equal(state[name]["params"], values[(name, "parameters")], err_msg=name)
        np.testing.assert_array_equal(state[name]["accumulators"], values[(name, "accumulators")], err_msg=name)


# ---------------------------------------------------------------------- the way back: writing the SparseCore layout
TOPOLOGY = SparseCoreTopology(num_chips=2, sparse_cores_per_chip=4)


def _write_ours(directory, kind, num_shards=2):
    """Our TPUEmbeddingV2 for a 2 x 4 SparseCore TPU, holding known values, saved: (path, values)."""
    values = fx.random_values(fx.SLOTS[kind], seed=21)
    with mirrored(num_shards).scope():
        ours = TPUEmbeddingV2(feature_config(), OPTIMIZERS[kind](), sparse_core_topology=TOPOLOGY)
    for (name, what), value in values.items():
        table = ours.engine.tables[name]
        table.assign_full_table(value) if what == "parameters" else table.assign_full_slot(what, value)
    return tf.train.Checkpoint(embedding=ours).save(str(directory / "ours")), values


@needs_tf_sparsecore
def test_written_layouts_are_tensorflows_with_stacking_disabled(tmp_path):
    path, _ = _write_ours(tmp_path, "adagrad")
    raw = tf.train.load_checkpoint(path).get_tensor("embedding/_sparse_core_table_layouts/.ATTRIBUTES/VARIABLE_VALUE")
    written = fx.sparse_core_layout_pb2.SparseCoreTableLayouts.FromString(raw)  # TensorFlow's proto parser.
    stacker = _tf_unstacked_layouts()
    assert [lay.table_name for lay in written.tables] == [lay.table_name for lay in stacker.tables]
    for mine, theirs in zip(written.tables, stacker.tables):
        theirs.ClearField("per_sparse_core_batch_size")  # Batch facts a checkpoint of tables does not know.
        theirs.ClearField("num_features")
        assert mine == theirs, (mine, theirs)


def _tf_unstacked_layouts():
    stacker = fx._pywrap_sparse_core_layout.SparseCoreLayoutStacker(
        num_partitions=2, sparse_cores_per_partition=4, disable_table_stacking=True
    )
    for name in sorted(fx.TABLES):
        rows, dim, group = fx.TABLES[name]
        stacker.AddTable(
            table_name=name, table_height=rows, table_width=dim, group=group, output_samples=8, num_features=1
        )
    return stacker.GetLayouts()


@needs_tf_sparsecore
@pytest.mark.parametrize("kind", ["adagrad", "ftrl"])
def test_tensorflows_adapter_restacks_our_checkpoint_for_a_tpu(tmp_path, kind):
    path, values = _write_ours(tmp_path, kind)
    target = fx.tf_layouts()  # How the TPU's TPUEmbeddingV2 stacks them: 'a_b' (b rotated), 'c'.
    adapter = fx.tf_adapter.TpuEmbeddingV3CheckpointAdapter.create_from_checkpoint(path)
    adapter.initialize_reshard_callbacks({lay.table_name: lay for lay in target.tables})
    reader = tf.train.load_checkpoint(path)
    for stack, layouts in fx.by_stack(target).items():
        callback = adapter.get_reshard_callback(stack)
        full = [layouts[0].total_rows_per_sparse_core_shard * layouts[0].num_sparse_cores, 8]
        for what in ["parameters"] + fx.SLOTS[kind]:
            key = f"embedding/{stack}{'' if what == 'parameters' else '.S' + what}/.ATTRIBUTES/VARIABLE_VALUE"
            expected = fx.tf_stack({lay.table_name: values[(lay.table_name, what)] for lay in layouts}, layouts)
            # The whole stack, and the second chip's half (what that chip's shard restores).
            for offset, rows in [(0, full[0]), (full[0] // 2, full[0] // 2)]:
                spec = fx.tf_adapter._shard_info_str(
                    full, fx.trackable_base.ShardInfo(offset=[offset, 0], shape=[rows, full[1]])
                )
                keys, _ = callback.update_restore_inputs(key, spec)
                got = callback.reshard([tf.constant(reader.get_tensor(k)) for k in keys], spec).numpy()
                np.testing.assert_array_equal(got, expected[offset : offset + rows], err_msg=f"{key} {offset}")


@needs_tf_sparsecore
def test_tensorflows_serving_reads_our_checkpoint(tmp_path):
    path, values = _write_ours(tmp_path, "adagrad")
    tables = {n: tf.tpu.experimental.embedding.TableConfig(r, d, name=n) for n, (r, d, _) in fx.TABLES.items()}
    feats = {n: tf.tpu.experimental.embedding.FeatureConfig(table=t) for n, t in tables.items()}
    serving = tf.tpu.experimental.embedding.TPUEmbeddingForServing(feats, tf.tpu.experimental.embedding.Adagrad(0.1))
    tf.train.Checkpoint(embedding=serving).restore(path).expect_partial()
    serving.build()
    for name, table in tables.items():
        np.testing.assert_array_equal(serving.embedding_tables[table].numpy(), values[(name, "parameters")])


@pytest.mark.parametrize("kind", sorted(fx.SLOTS))
def test_our_sparsecore_checkpoint_comes_back_exactly(tmp_path, kind):
    path, values = _write_ours(tmp_path, kind)
    raw_c = tf.train.load_checkpoint(path).get_tensor("embedding/c/.ATTRIBUTES/VARIABLE_VALUE")
    assert raw_c.shape == (64, 8) and not np.array_equal(raw_c, values[("c", "parameters")])  # Shuffled.
    with mirrored(3).scope():
        plain = TPUEmbeddingV2(feature_config(), OPTIMIZERS[kind]())
    with mirrored(1).scope():
        same_tpu = TPUEmbeddingV2(feature_config(), OPTIMIZERS[kind](), sparse_core_topology=TOPOLOGY)
    serving = TPUEmbeddingForServing(feature_config(), OPTIMIZERS[kind]())
    for embedding in (plain, same_tpu, serving):
        tf.train.Checkpoint(embedding=embedding).restore(path).expect_partial()
        state = state_of(embedding)
        for name in fx.TABLES:
            np.testing.assert_array_equal(state[name]["params"], values[(name, "parameters")], err_msg=name)
            for slot in fx.SLOTS[kind]:
                np.testing.assert_array_equal(state[name][slot], values[(name, slot)], err_msg=f"{name}/{slot}")


def test_a_plain_checkpoint_restores_into_an_object_writing_sparsecore_checkpoints(tmp_path):
    plain = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(0.5))
    for table in plain.engine.tables.values():
        table.assign_full_table(np.arange(table.vocabulary_size * table.dim, dtype=np.float32).reshape(-1, table.dim))
    path = tf.train.Checkpoint(embedding=plain).save(str(tmp_path / "plain"))
    with mirrored(2).scope():
        ours = TPUEmbeddingV2(feature_config(), optimizers.Adagrad(0.5), sparse_core_topology=TOPOLOGY)
    tf.train.Checkpoint(embedding=ours).restore(path).expect_partial()
    for name, arrays in state_of(ours).items():
        np.testing.assert_array_equal(arrays["params"], state_of(plain)[name]["params"], err_msg=name)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: SparseCoreTopology(0), r"SparseCoreTopology.num_chips must be a positive int, got 0"),
        (lambda: SparseCoreTopology(2, 2.5), r"SparseCoreTopology.sparse_cores_per_chip must be a positive int"),
        (
            lambda: TPUEmbeddingV2(feature_config(), None, sparse_core_topology=(2, 4)),
            r"sparse_core_topology must be a SparseCoreTopology\(num_chips, sparse_cores_per_chip\), got \(2, 4\)",
        ),
    ],
)
def test_a_bad_topology_is_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def _saver_restore(path, tables):
    """Restores `path` with a TF1 name-based Saver into ShardedTables of `tables`; returns their values."""
    from embedding.sharded_table import ShardedTable

    with tf.Graph().as_default():
        sharded = {
            name: ShardedTable(config.TableConfig(rows, dim, name=name), None, num_shards=2)
            for name, (rows, dim, _) in tables.items()
        }
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            saver.restore(session, path)
            return {name: session.run(t.read_full_table()) for name, t in sharded.items()}


def test_a_name_based_saver_never_loads_a_sparsecore_table_raw(tmp_path):
    # As a TPU writes it (one slice per chip, no variable names), a Saver finds nothing by name.
    with pytest.raises(tf.errors.NotFoundError):
        _saver_restore(STORED, {"c": fx.TABLES["c"]})
    # With variable names ('c' a plain variable 'c' holding the TPU's shuffled rows), it would load them shuffled.
    reader = tf.train.load_checkpoint(STORED)
    named = tf.Module()
    for name in ("c", "_sparse_core_table_layouts"):
        variable = tf.Variable(reader.get_tensor(f"embedding/{name}/.ATTRIBUTES/VARIABLE_VALUE"), name=name)
        named._track_trackable(variable, name)
    path = tf.train.Checkpoint(embedding=named).save(str(tmp_path / "named"))
    with pytest.raises(tf.errors.OpError, match="belongs to a SparseCore-layout checkpoint .* Restore it with "):
        _saver_restore(path, {"c": fx.TABLES["c"]})
    # An object-based checkpoint without layouts (upstream TF2 TPUEmbedding's variables) still restores by name.
    expected = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    plain = tf.train.Checkpoint(c=tf.Variable(expected, name="c"))
    path = tf.train.Checkpoint(embedding=plain).save(str(tmp_path / "plain"))
    np.testing.assert_array_equal(_saver_restore(path, {"c": fx.TABLES["c"]})["c"], expected)


def test_restore_info_disagreeing_with_the_checkpoints_layouts_is_named():
    serving = TPUEmbeddingForServing(
        feature_config(), None, experimental_sparsecore_restore_info={"num_tpu_devices": 1, "num_sc_chips_per_tpu": 4}
    )
    before = state_of(serving)["c"]["params"].copy()
    with pytest.raises(ValueError, match=r"says 4 SparseCores, the checkpoint's layouts say \[8\]: drop the argument"):
        tf.train.Checkpoint(embedding=serving).restore(STORED).expect_partial()
    np.testing.assert_array_equal(state_of(serving)["c"]["params"], before)
