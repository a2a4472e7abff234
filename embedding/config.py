"""Table and feature configuration of the embedding engine (mirrors `tf.tpu.experimental.embedding.*`).

`TableConfig`, `FeatureConfig` and `QuantizationConfig` take the arguments, defaults and checks of TensorFlow
2.15 and print the same repr. Upstream objects are accepted wherever ours are and converted by reading their
attributes (`as_table_config`, `as_feature_config`, `as_quantization_config`); a given upstream object always
converts to the same one of ours, so features that share an upstream table still share one table.

Names of features and tables, for every module of the package: `flatten_features` walks a nested feature
structure in `tf.nest` order, `feature_key` names a feature (`feature_paths` lists them), `table_names` lists the
tables in order of first appearance and names unnamed ones `table_{i}`. `resolve_feature_config` converts the
features to ours and `resolve_tables` writes the names into the tables, fills in the global optimizer and rejects
duplicate names, like upstream `TPUEmbedding.__init__`.
"""

import collections
import collections.abc
import math
import numbers
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import tensorflow as tf

from embedding import _tf_versions, graph_constants
from embedding import optimizers as optimizers_lib

__all__ = [
    "TruncatedNormalInitializer",
    "RowIdInitializer",
    "QuantizationConfig",
    "TableConfig",
    "FeatureConfig",
    "as_quantization_config",
    "as_table_config",
    "as_feature_config",
    "resolve_feature_config",
    "resolve_tables",
    "flatten_features",
    "feature_key",
    "feature_paths",
    "table_names",
    "features_by_table",
]


def _dims(shape: Any) -> Any:
    """A shape usable by tf.fill/tf.ones: a shape tensor as is, else a list of ints."""
    return shape if tf.is_tensor(shape) else tf.TensorShape(shape).as_list()


class TruncatedNormalInitializer:
    """Truncated normal initializer (the default table initializer); called as `init(shape, dtype)`.

    Args:
      mean: mean of the distribution.
      stddev: standard deviation before truncation at two standard deviations.
      seed: optional op seed.
    """

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: Optional[int] = None):
        self.mean = mean
        self.stddev = stddev
        self.seed = seed

    def __call__(self, shape: Sequence[int], dtype: tf.DType = tf.float32, **kwargs) -> tf.Tensor:
        del kwargs
        if tf.executing_eagerly():
            return tf.random.truncated_normal(
                _dims(shape), mean=self.mean, stddev=self.stddev, dtype=dtype, seed=self.seed
            )
        # `tf.random.truncated_normal`'s ops without its constants per call (shape, mean, stddev) and without adding
        # a zero mean: in `graph_constants.sharing()` the shards of all tables share the shape and stddev.
        dims = shape if tf.is_tensor(shape) else graph_constants.constant(_dims(shape), tf.int32)
        seed, seed2 = tf.compat.v1.random.get_seed(self.seed)
        value = tf.raw_ops.TruncatedNormal(shape=dims, dtype=dtype, seed=seed or 0, seed2=seed2 or 0)
        value = value * graph_constants.constant(self.stddev, dtype)
        return value + graph_constants.constant(self.mean, dtype) if self.mean else value

    def __repr__(self) -> str:
        return f"TruncatedNormalInitializer(mean={self.mean!r}, stddev={self.stddev!r}, seed={self.seed!r})"


class RowIdInitializer:
    """Initializes row `i` of a table to `i + offset` in every column (handy for tests and debugging).

    Called with the full logical table shape `[vocabulary_size, dim]`, or with a shard's shape and the global ids
    of its rows (`row_ids`), which is how a sharded table initialises 'mod' shards.

    Args:
      offset: added to each row id.
    """

    def __init__(self, offset: int = 0):
        self.offset = offset

    def __call__(
        self, shape: Sequence[int], dtype: tf.DType = tf.float32, row_ids: Optional[Any] = None, **kwargs
    ) -> tf.Tensor:
        """Returns the initial value.

        Args:
          shape: `[rows, dim]`.
          dtype: result dtype.
          row_ids: optional `[rows]` global ids of the rows; default `0..rows-1`.
          **kwargs: ignored (e.g. partition info).

        Returns:
          A `[rows, dim]` tensor whose row r holds `row_ids[r] + offset`.
        """
        del kwargs
        shape = _dims(shape)
        if row_ids is None:
            rows = tf.range(tf.cast(shape[0], tf.int64), dtype=tf.int64)
        else:
            rows = tf.cast(tf.reshape(row_ids, [-1]), tf.int64)
        return tf.cast(rows + self.offset, dtype)[:, None] * tf.ones(shape, dtype=dtype)

    def __repr__(self) -> str:
        return f"RowIdInitializer(offset={self.offset!r})"


class QuantizationConfig:
    """Simulated quantization of looked-up rows: clip to [lower, upper], round to `num_buckets` levels.

    Storage stays float32; only activations are quantized (before the combiner).

    Args:
      num_buckets: number of quantization levels, at least 2.
      lower: lower bound of the range.
      upper: upper bound of the range.

    Raises:
      ValueError: if `num_buckets < 2`.
    """

    def __init__(self, num_buckets: int, lower: float, upper: float):
        if num_buckets < 2:
            raise ValueError(f"num_buckets is {num_buckets}, must be at least 2 for simulated quantization.")
        self.num_buckets = num_buckets
        self.lower = lower
        self.upper = upper

    def __repr__(self) -> str:
        return "QuantizationConfig(num_buckets={num_buckets!r}, lower={lower!r}, upper={upper!r})".format(
            num_buckets=self.num_buckets, lower=self.lower, upper=self.upper
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_default_initializer(initializer: Any, dim: int) -> bool:
    """True for a mean-0, stddev-1/sqrt(dim) truncated normal (ours or upstream's, by duck typing)."""
    if not (isinstance(initializer, TruncatedNormalInitializer) or type(initializer).__name__ == "TruncatedNormal"):
        return False
    mean, stddev = getattr(initializer, "mean", None), getattr(initializer, "stddev", None)
    return (
        mean == 0.0
        and isinstance(stddev, numbers.Real)
        and math.isclose(stddev, 1 / math.sqrt(dim))
        and getattr(initializer, "seed", None) is None
    )


class TableConfig:
    """Configuration of one embedding table; several `FeatureConfig`s may share one.

    Tables are compared and hashed by identity, so a `TableConfig` can key dicts.

    Args:
      vocabulary_size: number of rows, an int >= 1.
      dim: embedding width, an int >= 1.
      initializer: callable `(shape, dtype) -> Tensor` for the logical table; None means a truncated normal with
        mean 0 and stddev `1/sqrt(dim)`.
      optimizer: per-table optimizer overriding the global one (any object `to_optimizer` accepts); checked when
        the tables are resolved, as upstream.
      combiner: 'mean', 'sum' or 'sqrtn'.
      name: unique table name; unnamed tables become `table_{i}` when resolved.
      quantization_config: optional `QuantizationConfig` (or upstream's).
      layout: accepted for compatibility with newer TensorFlow (SparseCore table layouts) and ignored: the
        engine chooses its own sharded layout.

    Raises:
      ValueError: for a bad `vocabulary_size`, `dim`, `initializer` or `combiner`.
      TypeError: for a `quantization_config` of the wrong type.
    """

    def __init__(
        self,
        vocabulary_size: int,
        dim: int,
        initializer: Optional[Callable[..., Any]] = None,
        optimizer: Optional[Any] = None,
        combiner: str = "mean",
        name: Optional[str] = None,
        quantization_config: Optional[QuantizationConfig] = None,
        layout: Optional[Any] = None,
    ):
        if not _is_int(vocabulary_size) or vocabulary_size < 1:
            raise ValueError(f"Argument `vocabulary_size` must be an int and must be >= 1. Received: {vocabulary_size}")
        if not _is_int(dim) or dim < 1:
            raise ValueError(f"Argument `dim` (embedding dimension) must be an int and must be >= 1. Received: {dim}")
        if initializer is not None and not callable(initializer):
            raise ValueError(f"Argument `initializer` must be a callable (or None). Received: {initializer}")
        if initializer is None:
            initializer = TruncatedNormalInitializer(mean=0.0, stddev=1 / math.sqrt(dim))
        accepted_combiners = ("mean", "sum", "sqrtn")
        if combiner not in accepted_combiners:
            raise ValueError(_tf_versions.combiner_error(accepted_combiners, combiner))
        if name is not None and not isinstance(name, str):
            raise ValueError(f"Argument `name` must be a string or None. Received: {name!r}")
        self.vocabulary_size = int(vocabulary_size)
        self.dim = int(dim)
        self.initializer = initializer
        self.optimizer = optimizer
        self.combiner = combiner
        self.name = name
        self.quantization_config = as_quantization_config(quantization_config)
        self.layout = layout
        self._source_ref = None

    @property
    def source(self) -> Optional[Any]:
        """The upstream object this config was converted from (weakly held), or None."""
        return self._source_ref() if self._source_ref is not None else None

    def __repr__(self) -> str:
        initializer = None if _is_default_initializer(self.initializer, self.dim) else self.initializer
        return (
            "TableConfig(vocabulary_size={vocabulary_size!r}, dim={dim!r}, "
            "initializer={initializer!r}, optimizer={optimizer!r}, "
            "combiner={combiner!r}, name={name!r}, "
            "quantization_config={quantization!r})".format(
                vocabulary_size=self.vocabulary_size,
                dim=self.dim,
                initializer=initializer,
                optimizer=self.optimizer,
                combiner=self.combiner,
                name=self.name,
                quantization=self.quantization_config,
            )
        )


class FeatureConfig:
    """Configuration of one embedding feature: which table it reads and its output shape.

    Args:
      table: the `TableConfig` (or upstream's, converted) to look the feature up in.
      max_sequence_length: 0 for a combined feature `[B, dim]`; L > 0 for a sequence feature `[B, L, dim]`.
      validate_weights_and_indices: serving uses a safe lookup (prunes ids < 0 and weights <= 0) when True.
      output_shape: optional activation shape without the embedding dimension.
      name: optional feature name.

    Raises:
      ValueError: if `table` is not a table config, `max_sequence_length` is not an int >= 0, or
        `validate_weights_and_indices` is not a bool.
    """

    def __init__(
        self,
        table: TableConfig,
        max_sequence_length: int = 0,
        validate_weights_and_indices: bool = True,
        output_shape: Optional[Union[List[int], tf.TensorShape]] = None,
        name: Optional[str] = None,
    ):
        if not isinstance(table, TableConfig):
            if not _looks_like_upstream_table(table):
                raise ValueError(
                    f"Argument `table` has invalid type {type(table)}. "
                    "Expected `tf.tpu.experimental.embedding.TableConfig`."
                )
            table = as_table_config(table)
        if not _is_int(max_sequence_length) or max_sequence_length < 0:
            raise ValueError(
                f"Argument `max_sequence_length` must be an int and must be >= 0. Received: {max_sequence_length}"
            )
        if not isinstance(validate_weights_and_indices, bool):
            raise ValueError(
                f"Argument `validate_weights_and_indices` must be a boolean. Received: {validate_weights_and_indices}"
            )
        self.table = table
        self.max_sequence_length = int(max_sequence_length)
        self.name = name
        self.output_shape = tf.TensorShape(output_shape)
        self.validate_weights_and_indices = validate_weights_and_indices
        self._source_ref = None

    @property
    def source(self) -> Optional[Any]:
        """The upstream object this config was converted from (weakly held), or None."""
        return self._source_ref() if self._source_ref is not None else None

    def __repr__(self) -> str:
        return (
            "FeatureConfig(table={table!r}, "
            "max_sequence_length={max_sequence_length!r}, "
            "validate_weights_and_indices={validate_weights_and_indices!r}, "
            "output_shape={output_shape!r}, name={name!r})".format(
                table=self.table,
                max_sequence_length=self.max_sequence_length,
                validate_weights_and_indices=self.validate_weights_and_indices,
                output_shape=self.output_shape,
                name=self.name,
            )
        )


# ==== upstream conversion ===========================================================================================

# Upstream object -> our converted object, so repeated conversions preserve sharing.
_CONVERTED: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _looks_like_upstream_table(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("vocabulary_size", "dim", "initializer", "combiner", "name"))


def _looks_like_upstream_feature(obj: Any) -> bool:
    return looks_like_feature_config(obj) and hasattr(obj, "output_shape")


def _weak(obj: Any) -> Optional[Callable[[], Any]]:
    # Weak, so that the conversion cache (keyed weakly by the upstream object) does not keep it alive.
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _cached(obj: Any, convert: Callable[[Any], Any]) -> Any:
    try:
        hit = _CONVERTED.get(obj)
    except TypeError:  # not weak-referenceable / unhashable: convert without caching
        return convert(obj)
    if hit is None:
        hit = convert(obj)
        _CONVERTED[obj] = hit
    return hit


def as_quantization_config(obj: Any) -> Optional[QuantizationConfig]:
    """Returns `obj` as our `QuantizationConfig` (None stays None).

    Args:
      obj: None, a `QuantizationConfig`, or an object with `num_buckets`, `lower` and `upper` attributes.

    Returns:
      Our `QuantizationConfig` or None.

    Raises:
      TypeError: for any other object.
    """
    if obj is None or isinstance(obj, QuantizationConfig):
        return obj
    if all(hasattr(obj, a) for a in ("num_buckets", "lower", "upper")):
        return QuantizationConfig(obj.num_buckets, obj.lower, obj.upper)
    raise TypeError(f"`quantization_config` must be a QuantizationConfig. Received type {type(obj).__name__}.")


def as_table_config(obj: Any) -> TableConfig:
    """Returns `obj` as our `TableConfig`, converting upstream's by its attributes.

    The same upstream object always yields the same `TableConfig`. An upstream optimizer is converted with
    `to_optimizer` when possible and otherwise kept for `resolve_tables` to reject.

    Args:
      obj: our `TableConfig` or an upstream `tf.tpu.experimental.embedding.TableConfig`.

    Returns:
      Our `TableConfig`.

    Raises:
      TypeError: if `obj` is neither.
    """

    def convert(up: Any) -> TableConfig:
        optimizer = getattr(up, "optimizer", None)
        if optimizer is not None:
            try:
                optimizer = optimizers_lib.to_optimizer(optimizer)
            except TypeError:
                pass
        return TableConfig(
            vocabulary_size=up.vocabulary_size,
            dim=up.dim,
            initializer=up.initializer,
            optimizer=optimizer,
            combiner=up.combiner,
            name=up.name,
            quantization_config=getattr(up, "quantization_config", None),
            layout=getattr(up, "layout", None),
        )

    return _as_ours(obj, TableConfig, _looks_like_upstream_table, convert, lambda: f"got {type(obj).__name__}.")


def as_feature_config(obj: Any) -> FeatureConfig:
    """Returns `obj` as our `FeatureConfig`, converting upstream's (and its table) by attributes.

    Args:
      obj: our `FeatureConfig` or an upstream `tf.tpu.experimental.embedding.FeatureConfig`.

    Returns:
      Our `FeatureConfig`.

    Raises:
      TypeError: if `obj` is neither.
    """

    def convert(up: Any) -> FeatureConfig:
        output_shape = up.output_shape
        if isinstance(output_shape, tf.TensorShape) and output_shape.rank is None:
            output_shape = None
        return FeatureConfig(
            table=as_table_config(up.table),
            max_sequence_length=up.max_sequence_length,
            validate_weights_and_indices=getattr(up, "validate_weights_and_indices", True),
            output_shape=output_shape,
            name=getattr(up, "name", None),
        )

    got = lambda: f"got {type(obj).__name__}: {obj!r}."  # noqa: E731
    return _as_ours(obj, FeatureConfig, _looks_like_upstream_feature, convert, got)


def _as_ours(obj: Any, ours: type, is_upstream: Callable[[Any], bool], convert: Callable[[Any], Any], got) -> Any:
    """`obj` if it is an `ours`, else upstream's `obj` converted (once per object) and referring to it.

    Raises:
      TypeError: `obj` is neither (`got()` says what it is).
    """
    if isinstance(obj, ours):
        return obj
    if not is_upstream(obj):
        raise TypeError(f"Expected a {ours.__name__}, {got()}")

    def converted(up: Any) -> Any:
        config = convert(up)
        config._source_ref = _weak(up)
        return config

    return _cached(obj, converted)


# ==== structure and names ==========================================================================================


def looks_like_feature_config(obj: Any) -> bool:
    """True for a feature config: ours, upstream's, or any object with `table` and `max_sequence_length`."""
    return hasattr(obj, "table") and hasattr(obj, "max_sequence_length")


def _walk(structure: Any, prefix: Tuple[Any, ...]) -> List[Tuple[Tuple[Any, ...], Any]]:
    if looks_like_feature_config(structure):
        return [(prefix, structure)]
    if isinstance(structure, collections.abc.Mapping):  # also Keras' `_DictWrapper`, unlike typing.Mapping
        return [pair for key in sorted(structure) for pair in _walk(structure[key], prefix + (key,))]
    if isinstance(structure, (list, tuple)):
        keys = getattr(structure, "_fields", None) or range(len(structure))  # namedtuples by field name
        return [pair for key, item in zip(keys, structure) for pair in _walk(item, prefix + (key,))]
    return [(prefix, structure)]


def plain_nest(structure: Any) -> Any:
    """`structure` with every mapping a plain `dict` and every list a plain `list` (namedtuples and tuples kept).

    Keras and `tf.Module` attributes wrap the nests they hold (`_DictWrapper`, `ListWrapper`); a feature config
    taken from one (e.g. by TensorFlow Recommenders' `TPUEmbedding` layer) is read as the plain nest it wraps.
    """
    if looks_like_feature_config(structure):
        return structure
    if isinstance(structure, collections.abc.Mapping):  # also Keras' `_DictWrapper`, unlike typing.Mapping
        return {key: plain_nest(value) for key, value in structure.items()}
    if isinstance(structure, list):
        return [plain_nest(item) for item in structure]
    if isinstance(structure, tuple) and not hasattr(structure, "_fields"):
        return tuple(plain_nest(item) for item in structure)
    return structure


def join_path(path: Sequence[Any]) -> str:
    """A structure path as text: its keys, field names and indices joined with '/' ('' for the root)."""
    return "/".join(str(part) for part in path)


def flatten_features(feature_config: Any) -> List[Tuple[Tuple[Any, ...], Any]]:
    """The feature configs of a nest with their paths, in `tf.nest.flatten` order.

    Dicts are walked by sorted key, namedtuples by field name, lists and tuples by index; a feature config (see
    `looks_like_feature_config`) is a leaf.

    Args:
      feature_config: a feature config or a nested dict/list/tuple of them (ours, upstream's or duck-typed).

    Returns:
      `[(path, feature)]`, `path` the tuple of keys, field names and indices from the root (`()` for a lone
      feature).

    Raises:
      TypeError: a leaf is not a feature config (naming its path).
    """
    pairs = _walk(feature_config, ())
    for path, leaf in pairs:
        if not looks_like_feature_config(leaf):
            raise TypeError(
                f"feature_config must be a nest of FeatureConfig objects; found {type(leaf).__name__} "
                f"at path {join_path(path) or '<root>'}."
            )
    return pairs


def feature_key(path: Sequence[Any], feature: Any) -> str:
    """The key naming a feature in activations, gradients, batches and error messages.

    The '/'-joined path of the feature in its nest (e.g. `'user'`, `'0'`, `'a/b'`); a lone feature (no nest) is
    keyed by its `name`, or `'feature_0'`.
    """
    if path:
        return join_path(path)
    return getattr(feature, "name", None) or "feature_0"


def feature_paths(feature_config: Any) -> List[Tuple[str, Any]]:
    """Returns `[(feature_key, FeatureConfig)]` in `tf.nest.flatten(feature_config)` order.

    See `feature_key` for the keys. Pack per-feature results back with
    `tf.nest.pack_sequence_as(feature_config, [result[key] for key, _ in feature_paths(feature_config)])`.

    Args:
      feature_config: a feature config or a nest of them (ours, upstream's or duck-typed).

    Raises:
      TypeError: a leaf is not a feature config.
    """
    return [(feature_key(path, feature), feature) for path, feature in flatten_features(feature_config)]


def _tables_by_name(keyed_features: Sequence[Tuple[str, Any]]) -> "collections.OrderedDict[str, Any]":
    """The tables of the features by name, in order of first appearance; unnamed tables are `table_{i}`."""
    tables: "collections.OrderedDict[int, Any]" = collections.OrderedDict()
    readers: Dict[int, List[str]] = collections.defaultdict(list)
    for key, feature in keyed_features:
        tables.setdefault(id(feature.table), feature.table)
        readers[id(feature.table)].append(key)
    out: "collections.OrderedDict[str, Any]" = collections.OrderedDict()
    for i, table in enumerate(tables.values()):
        name = getattr(table, "name", None) or f"table_{i}"
        if name in out:
            features = [k for t in (out[name], table) for k in readers[id(t)]]
            raise ValueError(
                f"Tables must have a unique name. Multiple tables with name {name} found. Multiple tables with name "
                f"{name!r} are read by features {features}: give each TableConfig its own name, or let those "
                f"features share one TableConfig object."
            )
        out[name] = table
    return out


def table_names(feature_config: Any) -> "collections.OrderedDict[str, Any]":
    """Returns `{table_name: TableConfig}` in order of first appearance among the flattened features.

    Unnamed tables are named `table_{i}` (i = position in that order), as upstream TPUEmbedding does. Nothing is
    changed on the tables (`resolve_tables` writes the names into them).

    Args:
      feature_config: a feature config or a nest of them (ours, upstream's or duck-typed).

    Raises:
      ValueError: two different tables share a name.
    """
    return _tables_by_name(feature_paths(feature_config))


def features_by_table(feature_config: Any) -> "collections.OrderedDict[str, List[str]]":
    """`{table_name: [feature keys]}` in table order (as `table_names`), keys in flatten order."""
    keyed = feature_paths(feature_config)
    name_of = {id(table): name for name, table in _tables_by_name(keyed).items()}
    out: "collections.OrderedDict[str, List[str]]" = collections.OrderedDict((n, []) for n in name_of.values())
    for key, feature in keyed:
        out[name_of[id(feature.table)]].append(key)
    return out


def scope_name(name: str) -> str:
    """A valid TensorFlow name scope for a free-form table name or feature key."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return cleaned if cleaned and (cleaned[0].isalnum() or cleaned[0] == ".") else "n" + cleaned


# ==== resolution ====================================================================================================


def _is_resolved(feature_config: Any) -> bool:
    return (
        isinstance(feature_config, list)
        and bool(feature_config)
        and all(
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], FeatureConfig)
            for item in feature_config
        )
    )


def resolve_feature_config(feature_config: Any) -> List[Tuple[str, FeatureConfig]]:
    """Flattens a nested structure of feature configs into `(path, FeatureConfig)` pairs.

    Order is `tf.nest.flatten` order (dict keys sorted); paths join the keys/indices with '/' ('' for a single
    feature). Upstream feature configs are converted to ours.

    Args:
      feature_config: a `FeatureConfig` or a nested dict/list/tuple of them (ours or upstream's). The output of
        this function is also accepted and returned unchanged.

    Returns:
      A list of `(path, FeatureConfig)`.

    Raises:
      ValueError: if the structure is empty or holds something that is not a feature config.
    """
    if _is_resolved(feature_config):
        return list(feature_config)
    leaves = tf.nest.flatten(feature_config)
    pairs = [(join_path(path), leaf) for path, leaf in _walk(feature_config, ())]
    if len(pairs) != len(leaves):  # a nested type tf.nest knows but we do not (e.g. attrs)
        pairs = [(str(i), leaf) for i, leaf in enumerate(leaves)]
    if not pairs:
        raise ValueError("`feature_config` must contain at least one FeatureConfig; got an empty structure.")
    resolved = []
    for path, leaf in pairs:
        if not isinstance(leaf, FeatureConfig) and not _looks_like_upstream_feature(leaf):
            raise ValueError(f"Feature config at path {path!r} must be a FeatureConfig, got {type(leaf).__name__}.")
        resolved.append((path, as_feature_config(leaf)))
    return resolved


def resolve_tables(feature_config: Any, optimizer: Optional[Any] = None) -> List[TableConfig]:
    """Lists the tables of a feature structure in order of first appearance, named and with optimizers.

    Like upstream `TPUEmbedding.__init__`, this mutates the tables: an unnamed table gets `table_{i}` (i its
    position in the list, as `table_names`; mirrored into the upstream object it came from) and a table without
    optimizer gets the global `optimizer`. Table optimizers are converted with `to_optimizer`.

    Args:
      feature_config: nested feature configs, or the output of `resolve_feature_config`.
      optimizer: global optimizer for tables without their own (anything `to_optimizer` accepts), or None.

    Returns:
      The unique tables, in order of first appearance.

    Raises:
      ValueError: if two tables have the same name, or an optimizer is not supported.
    """
    named = _tables_by_name(resolve_feature_config(feature_config))
    for name, table in named.items():
        if table.optimizer is None:
            table.optimizer = optimizer
        if table.optimizer is not None:
            try:
                table.optimizer = optimizers_lib.to_optimizer(table.optimizer)
            except TypeError as e:
                raise ValueError(
                    f"{type(table.optimizer)} is an unsupported optimizer class. Please pass an "
                    "instance of one of the optimizer classes under "
                    "tf.tpu.experimental.embedding."
                ) from e
        if table.name != name:
            table.name = name
            if table.source is not None and getattr(table.source, "name", None) is None:
                try:
                    table.source.name = name
                except AttributeError:
                    pass
    return list(named.values())
