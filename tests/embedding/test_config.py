"""TableConfig / FeatureConfig / QuantizationConfig: defaults, checks, repr, naming and upstream conversion."""

import collections
import math

import numpy as np
import pytest
import tensorflow as tf

import embedding
from embedding import config as config_lib

UPSTREAM = tf.tpu.experimental.embedding


def test_table_defaults():
    table = embedding.TableConfig(10, 4)
    assert (
        table.vocabulary_size,
        table.dim,
        table.optimizer,
        table.combiner,
        table.name,
        table.quantization_config,
        table.layout,
    ) == (10, 4, None, "mean", None, None, None)
    init = table.initializer
    assert init.mean == 0.0 and math.isclose(init.stddev, 0.5)
    values = init([2000, 4], tf.float32).numpy()
    assert values.shape == (2000, 4) and np.abs(values).max() <= 2 * 0.5 + 1e-6
    assert 0.35 < values.std() < 0.5  # truncated at 2 sigma: std ~ 0.88 * 0.5


def test_reprs_match_upstream():
    ours = embedding.TableConfig(
        10, 4, combiner="sum", name="t", quantization_config=embedding.QuantizationConfig(4, -1.0, 1.0)
    )
    theirs = UPSTREAM.TableConfig(
        10, 4, combiner="sum", name="t", quantization_config=UPSTREAM.QuantizationConfig(4, -1.0, 1.0)
    )
    assert repr(ours) == repr(theirs)
    assert repr(embedding.FeatureConfig(ours, max_sequence_length=3, output_shape=[8], name="f")) == repr(
        UPSTREAM.FeatureConfig(theirs, max_sequence_length=3, output_shape=[8], name="f")
    )
    assert "initializer=None" in repr(embedding.TableConfig(10, 9))
    custom = embedding.TableConfig(10, 4, initializer=embedding.RowIdInitializer(2))
    assert "initializer=RowIdInitializer(offset=2)" in repr(custom)


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((0, 4), {}),
        ((2.5, 4), {}),
        ((10, 0), {}),
        ((10, "4"), {}),
        ((10, 4), dict(initializer=3)),
        ((10, 4), dict(combiner="max")),
    ],
)
def test_table_checks_match_upstream(args, kwargs):
    with pytest.raises(ValueError) as theirs:
        UPSTREAM.TableConfig(*args, **kwargs)
    with pytest.raises(ValueError) as ours:
        embedding.TableConfig(*args, **kwargs)
    assert str(ours.value) == str(theirs.value)


def test_non_string_combiner_message_matches_installed_upstream():
    # TF 2.15 and TF >= 2.16 word this differently; ours follows the installed TensorFlow.
    with pytest.raises(ValueError) as theirs:
        UPSTREAM.TableConfig(10, 4, combiner=3)
    with pytest.raises(ValueError) as ours:
        embedding.TableConfig(10, 4, combiner=3)
    assert str(ours.value) == str(theirs.value)


def test_custom_combiner_is_refused_with_what_to_use_instead():
    if not hasattr(UPSTREAM, "CustomCombiner"):
        pytest.skip("tf.tpu.experimental.embedding.CustomCombiner exists from TF 2.16 on")
    custom = UPSTREAM.CustomCombiner(lambda valency, vectors: tf.reduce_sum(vectors, axis=0), max_valency=4)
    UPSTREAM.TableConfig(10, 4, combiner=custom)  # upstream accepts it (and runs it on SparseCores only)
    with pytest.raises(ValueError) as ours:
        embedding.TableConfig(10, 4, combiner=custom)
    assert str(ours.value).startswith(
        "Argument `combiner`: tf.tpu.experimental.embedding.CustomCombiner is not supported off TPU (it needs "
        "SparseCores). Use one of ('mean', 'sum', 'sqrtn')."
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(table="nope"),
        dict(max_sequence_length=-1),
        dict(max_sequence_length=1.5),
        dict(validate_weights_and_indices=1),
    ],
)
def test_feature_checks_match_upstream(kwargs):
    kwargs = dict(kwargs)
    table_ours, table_theirs = embedding.TableConfig(5, 2), UPSTREAM.TableConfig(5, 2)
    ours_kwargs = dict(kwargs, table=kwargs.get("table", table_ours))
    theirs_kwargs = dict(kwargs, table=kwargs.get("table", table_theirs))
    with pytest.raises(ValueError) as theirs:
        UPSTREAM.FeatureConfig(**theirs_kwargs)
    with pytest.raises(ValueError) as ours:
        embedding.FeatureConfig(**ours_kwargs)
    assert str(ours.value) == str(theirs.value)


def test_quantization_config_check_and_conversion():
    with pytest.raises(ValueError, match="num_buckets is 1, must be at least 2 for simulated quantization."):
        embedding.QuantizationConfig(1, 0.0, 1.0)
    converted = embedding.TableConfig(4, 2, quantization_config=UPSTREAM.QuantizationConfig(3, -2.0, 2.0))
    q = converted.quantization_config
    assert isinstance(q, embedding.QuantizationConfig) and (q.num_buckets, q.lower, q.upper) == (3, -2.0, 2.0)
    with pytest.raises(TypeError, match="QuantizationConfig"):
        embedding.TableConfig(4, 2, quantization_config="8bit")


def test_feature_defaults_and_output_shape():
    feature = embedding.FeatureConfig(embedding.TableConfig(5, 2))
    assert feature.max_sequence_length == 0 and feature.validate_weights_and_indices
    assert feature.output_shape.rank is None and feature.name is None
    assert embedding.FeatureConfig(embedding.TableConfig(5, 2), output_shape=[4, 3]).output_shape == [4, 3]


def test_layout_is_accepted_and_ignored():
    assert embedding.TableConfig(5, 2, layout="anything").layout == "anything"


def test_row_id_initializer():
    values = embedding.RowIdInitializer(offset=3)([4, 2], tf.float32).numpy()
    np.testing.assert_array_equal(values, [[3, 3], [4, 4], [5, 5], [6, 6]])
    assert embedding.RowIdInitializer()([2, 3], tf.float64).dtype == tf.float64
    shard = embedding.RowIdInitializer(offset=10)([3, 2], tf.float32, row_ids=tf.constant([1, 4, 7], tf.int64))
    np.testing.assert_array_equal(shard.numpy(), [[11, 11], [14, 14], [17, 17]])


def test_resolve_feature_config_order_and_paths():
    t1, t2 = embedding.TableConfig(5, 2), embedding.TableConfig(6, 3)
    f = {
        "b": embedding.FeatureConfig(t1),
        "a": [embedding.FeatureConfig(t2), embedding.FeatureConfig(t1)],
        "c": (embedding.FeatureConfig(t2),),
    }
    pairs = embedding.resolve_feature_config(f)
    assert [p for p, _ in pairs] == ["a/0", "a/1", "b", "c/0"]
    assert [fc for _, fc in pairs] == tf.nest.flatten(f)
    assert embedding.resolve_feature_config(pairs) == pairs
    single = embedding.FeatureConfig(t1)
    assert embedding.resolve_feature_config(single) == [("", single)]
    Pair = collections.namedtuple("Pair", ["user", "item"])
    assert [p for p, _ in embedding.resolve_feature_config(Pair(single, single))] == ["user", "item"]


def test_resolve_feature_config_errors():
    with pytest.raises(ValueError, match="at least one"):
        embedding.resolve_feature_config({})
    with pytest.raises(ValueError, match="path 'x'"):
        embedding.resolve_feature_config({"x": 3})


def test_resolve_tables_names_in_first_appearance_order_and_sets_optimizer():
    shared, other, named = (
        embedding.TableConfig(5, 2),
        embedding.TableConfig(6, 3),
        embedding.TableConfig(7, 2, name="mine", optimizer=embedding.Adagrad(0.5)),
    )
    features = {
        "z": embedding.FeatureConfig(shared),
        "a": embedding.FeatureConfig(other),
        "m": embedding.FeatureConfig(named),
        "b": embedding.FeatureConfig(shared),
    }
    sgd = embedding.SGD(0.1)
    tables = embedding.resolve_tables(features, sgd)
    assert tables == [other, shared, named]  # order of first appearance in tf.nest order: a, b, m, z
    assert [t.name for t in tables] == ["table_0", "table_1", "mine"]
    assert other.optimizer is sgd and shared.optimizer is sgd
    assert isinstance(named.optimizer, embedding.Adagrad)
    # Resolving again is stable.
    assert [t.name for t in embedding.resolve_tables(features, sgd)] == ["table_0", "table_1", "mine"]


@pytest.mark.upstream
def test_resolve_tables_accepts_resolved_pairs_and_converts_optimizers():
    table = embedding.TableConfig(5, 2, optimizer=UPSTREAM.FTRL(0.2))
    pairs = embedding.resolve_feature_config([embedding.FeatureConfig(table)])
    tables = embedding.resolve_tables(pairs, optimizer=tf.compat.v1.tpu.experimental.AdagradParameters(0.1))
    assert isinstance(tables[0].optimizer, embedding.FTRL) and tables[0].optimizer.learning_rate == 0.2
    other = embedding.TableConfig(5, 2)
    embedding.resolve_tables([embedding.FeatureConfig(other)], tf.compat.v1.tpu.experimental.AdagradParameters(0.1))
    assert isinstance(other.optimizer, embedding.Adagrad)


def test_resolve_tables_errors():
    features = [
        embedding.FeatureConfig(embedding.TableConfig(5, 2, name="t")),
        embedding.FeatureConfig(embedding.TableConfig(6, 2, name="t")),
    ]
    with pytest.raises(ValueError, match="Tables must have a unique name. Multiple tables with name t found."):
        embedding.resolve_tables(features)
    # An unnamed table colliding with an explicit 'table_1'.
    clash = [
        embedding.FeatureConfig(embedding.TableConfig(5, 2, name="table_1")),
        embedding.FeatureConfig(embedding.TableConfig(6, 2)),
    ]
    with pytest.raises(ValueError, match="table_1"):
        embedding.resolve_tables(clash)
    with pytest.raises(ValueError, match="unsupported optimizer class"):
        embedding.resolve_tables([embedding.FeatureConfig(embedding.TableConfig(5, 2, optimizer="adam"))])


def test_resolve_tables_without_optimizer_leaves_none():
    table = embedding.TableConfig(5, 2)
    embedding.resolve_tables([embedding.FeatureConfig(table)])
    assert table.optimizer is None and table.name == "table_0"


def test_upstream_conversion_preserves_sharing_and_fields():
    init = tf.constant_initializer(0.5)
    up_shared = UPSTREAM.TableConfig(
        8,
        4,
        initializer=init,
        optimizer=UPSTREAM.Adam(0.01),
        combiner="sqrtn",
        quantization_config=UPSTREAM.QuantizationConfig(5, -1.0, 1.0),
    )
    up_other = UPSTREAM.TableConfig(3, 2, name="small")
    features = {
        "f1": UPSTREAM.FeatureConfig(up_shared, max_sequence_length=4, name="f1"),
        "f2": UPSTREAM.FeatureConfig(up_shared, output_shape=[16], validate_weights_and_indices=False),
        "f3": UPSTREAM.FeatureConfig(up_other),
    }
    pairs = embedding.resolve_feature_config(features)
    (p1, f1), (p2, f2), (p3, f3) = pairs
    assert [p1, p2, p3] == ["f1", "f2", "f3"]
    assert all(isinstance(f, embedding.FeatureConfig) for f in (f1, f2, f3))
    assert f1.table is f2.table and f3.table is not f1.table
    assert (f1.max_sequence_length, f1.name, f1.output_shape.rank) == (4, "f1", None)
    assert f2.output_shape == [16] and f2.validate_weights_and_indices is False
    table = f1.table
    assert (table.vocabulary_size, table.dim, table.combiner, table.initializer) == (8, 4, "sqrtn", init)
    assert isinstance(table.optimizer, embedding.Adam) and table.optimizer.learning_rate == 0.01
    assert table.quantization_config.num_buckets == 5 and table.source is up_shared
    # Converting again (e.g. by resolve_tables on the nested structure) yields the same objects.
    assert embedding.as_table_config(up_shared) is table
    tables = embedding.resolve_tables(features)
    assert tables == [table, f3.table]
    assert [t.name for t in tables] == ["table_0", "small"]
    assert up_shared.name == "table_0"  # mirrored into the upstream object, as upstream TPUEmbedding does


def test_upstream_default_initializer_prints_as_none():
    table = embedding.as_table_config(UPSTREAM.TableConfig(8, 16))
    assert "initializer=None" in repr(table)


def test_our_feature_config_accepts_upstream_table():
    up = UPSTREAM.TableConfig(8, 4)
    a, b = embedding.FeatureConfig(up), embedding.FeatureConfig(up)
    assert isinstance(a.table, embedding.TableConfig) and a.table is b.table


def test_as_converters_reject_other_types():
    with pytest.raises(TypeError):
        embedding.as_table_config(3)
    with pytest.raises(TypeError):
        embedding.as_feature_config("f")
    assert config_lib.as_quantization_config(None) is None


def test_initializers_accept_shape_tensors():
    shape = tf.constant([3, 2])
    np.testing.assert_array_equal(embedding.RowIdInitializer(1)(shape, tf.float32).numpy(), [[1, 1], [2, 2], [3, 3]])
    np.testing.assert_array_equal(embedding.ConstantInitializer(0.5)(shape, tf.float32).numpy(), np.full([3, 2], 0.5))
    assert embedding.TableConfig(5, 2).initializer(shape, tf.float32).shape == [3, 2]


def test_conversion_cache_does_not_keep_upstream_objects_alive():
    import gc
    import weakref

    up = UPSTREAM.FeatureConfig(UPSTREAM.TableConfig(4, 2))
    ours = embedding.as_feature_config(up)
    assert ours.source is up
    ref = weakref.ref(up)
    del up
    gc.collect()
    assert ref() is None and ours.source is None
