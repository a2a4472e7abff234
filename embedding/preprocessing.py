"""Host-side embedding preprocessing: id features -> deduplicated per-table batches.

Every step, the id features of a batch are turned into one `TableBatch` per table:

* `unique_ids`: the ids of this step, deduplicated across ALL features that share the table and sorted
  ascending (int64 `[U]`). The engine gathers these rows once, and applies the optimizer once per id.
* per feature, a `FeatureSegments` "combine plan": entry `k` says that the looked-up row
  `unique_ids[unique_index[k]]`, times `gains[k]`, is added into output row `segment_ids[k]`.
  The gains already carry the combiner scale (sum: `w`, mean: `w / sum(w)`, sqrtn: `w / sqrt(sum(w^2))`, sums
  taken over the raw weights of the output row). Entries with the same (row, id) stay separate entries (they add
  up when combining); `to_partitioned_csr` merges them by summing their gains, as the SparseCore preprocessing
  of upstream does. Sequence features are not combined: their output row is
  `batch_index * max_sequence_length + position` and the gain is the weight.

Input rules follow upstream's `TPUEmbedding.enqueue` (see docs/SEMANTICS.md 10):

* dense `tf.Tensor` ids: rank >= 1; rank >= 2 must end in 1; no weights. Output shape = input shape minus the
  last dim (rank 1: the input shape). Extension: a sequence feature accepts dense `[B, L']` ids (every position
  present, also id 0), truncated or padded to `max_sequence_length`; upstream rejects `L' != 1`.
* `tf.SparseTensor`: rank >= 2, the last dim is the id position. Rank 2 with `max_sequence_length > 0` and no
  `output_shape` is a sequence `[B, L]`; otherwise output shape = dense shape minus the last dim.
* `tf.RaggedTensor`: rank 2. `output_shape` with `prod == B` combines, `prod == k*B` is a sequence of length `k`
  (upstream's serving rule); otherwise `max_sequence_length > 0` gives `[B, L]`, else `[B]`.
* weights: same structure and composite type as the ids (`None` entries allowed), any float or int dtype (cast
  to float32), non-negative. A weight of a sequence entry is its gain.

Everything is vectorised (no Python loop over data, no work proportional to the vocabulary): TensorFlow ops,
except the per-table dedup sort of a step with many ids, which is one NumPy host call (see `_sorted_unique`).
It runs eagerly, inside `tf.function`, in TF1 graphs and inside `tf.compat.v1.while_loop` bodies. `TableBatch`
and `FeatureSegments` support `tf.nest` (flatten to tensors, pack back), e.g. to pass them through queues.

Choices where upstream is silent or differs:

* A row whose weights sum to 0 (mean) or whose squared weights sum to 0 (sqrtn) gives zeros, not NaN.
* Dense ids of a sequence feature are `[B, L']` sequences (also `[B, 1]`: a sequence of length 1, output
  `[B, L, dim]`), where upstream TPU rejects `L' != 1` and upstream serving rejects dense sequence input.
* Weights of sequence features are kept as gains (upstream serving refuses them; the TPU path uses them).
* Run-time validation messages name feature and table; graph-mode `Assert` output escapes their quotes
  (`Feature \\'a\\'`).
"""

import collections
import dataclasses
import functools
import logging
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from embedding import config as config_lib
from embedding import graph_constants
from embedding.config import feature_paths, table_names

# Pure TensorFlow ops without data-dependent Python control flow: AutoGraph conversion would only cost
# seconds of tracing time in users' tf.functions.
_do_not_convert = tf.autograph.experimental.do_not_convert

__all__ = [
    "FeatureSegments",
    "TableBatch",
    "PartitionedCsrFormatTensor",
    "preprocess_features",
    "feature_paths",
    "table_names",
    "partition_ids",
    "unpartition_ids",
    "shard_sizes",
    "to_partitioned_csr",
]

_COMBINERS = ("sum", "mean", "sqrtn")
_STRATEGIES = ("div", "mod")

Dim = Union[int, tf.Tensor]


@dataclasses.dataclass(frozen=True)
class FeatureSegments:
    """How the rows of one feature are combined from its table's unique rows.

    Attributes:
      unique_index: int32 `[nnz]`, index into `TableBatch.unique_ids` of each entry.
      segment_ids: int32 `[nnz]`, output row of each entry (`row * L + position` for sequence features).
      gains: float32 `[nnz]`, weight times combiner scale; entries with equal (row, id) add up.
      num_segments: int32 scalar tensor, number of output rows (`prod(output_shape)`).
      output_shape: the activation shape without the table dim, e.g. `[B]`, `[B, L]` or the feature's
        `output_shape`; entries are Python ints when static, int32 scalar tensors otherwise, so
        `tf.reshape(x, output_shape + [dim])` always works.
      is_sequence: True for sequence features (no combining).
      sorted_segments: True when `segment_ids` is non-decreasing (dense and ragged inputs; sparse inputs make no
        such promise); consumers that need sorted segments (e.g. `tf.math.segment_sum`) can rely on it.
      matrix_indices: int64 `[nnz, 2]`, `stack([segment_ids, unique_index], axis=1)`: the plan as the indices of
        a sparse `[num_segments, U]` matrix (see `combiners`), built once on the host so that the training step
        does not rebuild it; None when not precomputed.
      matrix_shape: int64 `[2]`, `[num_segments, U]` (None when `matrix_indices` is None).
      weighted: True when the gains come from the feature's weights; False when they are the combiner's scale of
        unit weights (1, 1/n or 1/sqrt(n) with n >= 1), finite by construction, so gradient checks skip them.
    """

    unique_index: tf.Tensor
    segment_ids: tf.Tensor
    gains: tf.Tensor
    num_segments: tf.Tensor
    output_shape: List[Dim]
    is_sequence: bool = False
    sorted_segments: bool = False
    matrix_indices: Optional[tf.Tensor] = None
    matrix_shape: Optional[tf.Tensor] = None
    weighted: bool = True

    @property
    def static_output_shape(self) -> tf.TensorShape:
        """`output_shape` as a `tf.TensorShape` (None for dims only known at run time)."""
        return tf.TensorShape([d if isinstance(d, int) else None for d in self.output_shape])

    # tf.nest support (TF >= 2.13 CustomNestProtocol): tensors are components, the rest is metadata, so that
    # `tf.nest.flatten` / `tf.nest.pack_sequence_as` carry a plan through queues, loops and datasets.
    def __tf_flatten__(self):
        static = tuple(d if isinstance(d, int) else None for d in self.output_shape)
        dynamic = tuple(d for d in self.output_shape if not isinstance(d, int))
        has_matrix = self.matrix_indices is not None
        metadata = (static, self.is_sequence, self.sorted_segments, has_matrix, self.weighted)
        matrix = (self.matrix_indices, self.matrix_shape) if has_matrix else ()
        return metadata, (self.unique_index, self.segment_ids, self.gains, self.num_segments) + matrix + dynamic

    @classmethod
    def __tf_unflatten__(cls, metadata, components):
        static, is_sequence, sorted_segments, has_matrix, weighted = metadata
        matrix = tuple(components[4:6]) if has_matrix else (None, None)
        dynamic = iter(components[6:] if has_matrix else components[4:])
        shape = [d if d is not None else next(dynamic) for d in static]
        return cls(
            *components[:4],
            output_shape=shape,
            is_sequence=is_sequence,
            sorted_segments=sorted_segments,
            matrix_indices=matrix[0],
            matrix_shape=matrix[1],
            weighted=weighted,
        )


@dataclasses.dataclass(frozen=True)
class TableBatch:
    """The preprocessed ids of one table for one step.

    Attributes:
      table_name: the table's name (`TableConfig.name`, or `table_{i}` by first appearance when unnamed).
      unique_ids: int64 `[U]`: when `deduplicated`, sorted ascending and deduplicated over all features sharing
        the table; otherwise every id of the step in feature order (`U` = the number of ids, duplicates kept).
      features: `{feature_key: FeatureSegments}` for every feature of this table, keyed as `feature_paths`.
      table: the table config object (for convenience; not needed to combine).
      deduplicated: whether `unique_ids` are unique and ascending, as an optimizer update needs them; a batch
        preprocessed for lookups only (`deduplicate=False`) can be combined but not applied.
    """

    table_name: str
    unique_ids: tf.Tensor
    features: Dict[str, FeatureSegments]
    table: Any = None
    deduplicated: bool = True

    @property
    def num_unique(self) -> tf.Tensor:
        """int32 scalar: `U`, the length of `unique_ids`."""
        return tf.size(self.unique_ids, out_type=tf.int32)

    def __tf_flatten__(self):
        keys = tuple(self.features)
        metadata = (self.table_name, keys, self.table, self.deduplicated)
        return metadata, (self.unique_ids,) + tuple(self.features[k] for k in keys)

    @classmethod
    def __tf_unflatten__(cls, metadata, components):
        table_name, keys, table, deduplicated = metadata
        return cls(table_name, components[0], dict(zip(keys, components[1:])), table, deduplicated)


class PartitionedCsrFormatTensor(NamedTuple):
    """CSR form of one table's batch, field names as upstream `tpu_embedding_v3.PartitionedCsrFormatTensor`.

    TF 2.15 has no `tpu_embedding_v3`; the fields are defined here per docs/SEMANTICS.md 11 (one CPU/GPU "sparse core"
    per shard, no minibatching):

    Attributes:
      row_pointers: int32 `[num_shards * sample_count + 1]`; the entries of shard `s`, sample `b` are
        `sorted_*[row_pointers[s * sample_count + b]:row_pointers[s * sample_count + b + 1]]`.
      sorted_sample_ids: int32 `[nnz]`, sample (output row) of each entry; the features of a table are stacked:
        feature `j`'s rows are offset by the `num_segments` of the features before it (in `features` order).
      sorted_token_ids: int32 `[nnz]`, global id (table row) of each entry.
      sorted_gains: float32 `[nnz]`, gains (combiner scale folded in, duplicates merged).
      sample_count: int32 scalar, total number of samples (sum of `num_segments` of the table's features).
      num_minibatches_per_physical_sparse_core: int32 scalar, always 1.
    Entries are sorted by (shard, sample, token).
    """

    row_pointers: tf.Tensor
    sorted_sample_ids: tf.Tensor
    sorted_token_ids: tf.Tensor
    sorted_gains: tf.Tensor
    sample_count: tf.Tensor
    num_minibatches_per_physical_sparse_core: tf.Tensor


class _Coo(NamedTuple):
    """One feature as flat (id, row, weight) entries."""

    ids: tf.Tensor  # int64 [n]
    rows: tf.Tensor  # int32 [n]
    weights: Optional[tf.Tensor]  # float32 [n] or None (all ones)
    num_segments: tf.Tensor  # int32 scalar
    output_shape: List[Dim]
    is_sequence: bool
    rows_sorted: bool  # rows non-decreasing in entry order.
    max_entries: Optional[int] = None  # Static upper bound of n (None: unknown).
    one_per_row: bool = False  # Entry i is the only entry of row i (dense ids, not a sequence).


def _max_entries(value: Any) -> Optional[int]:
    """A static upper bound of the number of id entries of an input (None when not static)."""
    if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
        static = value.values.shape.num_elements() if value.values.shape.is_fully_defined() else None
        if static is None and isinstance(value, tf.SparseTensor) and value.shape.is_fully_defined():
            static = value.shape.num_elements()
        return static
    return value.shape.num_elements() if value.shape.is_fully_defined() else None


# ----------------------------------------------------------------------------------------------------------
# Structure helpers.


def _lookup_path(structure: Any, path: Tuple, what: str, key: str, table_name: str) -> Any:
    node = structure
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"Feature {key!r} (table {table_name!r}) is missing from the {what}.") from None
    return node


def _check_no_extra_keys(config: Any, values: Any, what: str, prefix: Tuple = ()) -> None:
    """Raises ValueError for mapping keys in `values` that `config` does not have."""
    if config_lib.looks_like_feature_config(config) or values is None:
        return
    if isinstance(config, Mapping) and isinstance(values, Mapping):
        extra = sorted(str(k) for k in values if k not in config)
        if extra:
            where = "/".join(str(p) for p in prefix)
            raise ValueError(
                f"The {what} contain keys {extra}{' under ' + where if where else ''} that are not in feature_config."
            )
        for k in config:
            if k in values:
                _check_no_extra_keys(config[k], values[k], what, prefix + (k,))
    elif isinstance(config, (list, tuple)) and isinstance(values, (list, tuple)):
        if len(values) != len(config):
            raise ValueError(
                f"The {what} have {len(values)} entries at {'/'.join(map(str, prefix)) or '<root>'}, "
                f"feature_config has {len(config)}."
            )
        for i, (c, v) in enumerate(zip(config, values)):
            _check_no_extra_keys(c, v, what, prefix + (i,))


# ----------------------------------------------------------------------------------------------------------
# Per-feature conversion to COO entries.


def _static_output_shape(feature: Any, ctx: str) -> Optional[List[int]]:
    shape = getattr(feature, "output_shape", None)
    if shape is None:
        return None
    shape = tf.TensorShape(shape)
    if shape.rank is None or shape.rank == 0:
        return None
    dims = shape.as_list()
    if any(d is None for d in dims):
        raise ValueError(f"{ctx}: output_shape {dims} must be fully defined.")
    return dims


def _to_input(value: Any) -> Any:
    if isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
        return value
    if isinstance(value, tf.compat.v1.SparseTensorValue):
        return tf.SparseTensor.from_value(value)
    return tf.convert_to_tensor(value)  # NumPy arrays, lists, variables.


def _check_id_dtype(dtype: tf.DType, ctx: str) -> None:
    if dtype == tf.string:
        raise TypeError(
            f"{ctx}: string ids are not supported; map them to integer ids first "
            f"(e.g. with tf.lookup or a StringLookup layer)."
        )
    if dtype not in (tf.int32, tf.int64):
        raise TypeError(f"{ctx}: ids must be int32 or int64, got {dtype.name}.")


def _weight_values(weight: Any, ctx: str) -> tf.Tensor:
    dtype = weight.dtype
    if not (dtype.is_floating or dtype.is_integer) or dtype == tf.bool:
        raise TypeError(f"{ctx}: weights must be a float (or int) tensor, got {dtype.name}.")
    values = weight.values if isinstance(weight, (tf.SparseTensor, tf.RaggedTensor)) else weight
    return tf.cast(values, tf.float32)


def _dims_from(static: Sequence[Optional[int]], dynamic: Union[tf.Tensor, Callable[[], tf.Tensor]]) -> List[Dim]:
    """Python ints where static, else int32 scalars sliced from `dynamic` (a shape, or a callable building it
    only when a dimension is unknown)."""
    if any(d is None for d in static) and callable(dynamic):
        dynamic = dynamic()
    out: List[Dim] = []
    for i, d in enumerate(static):
        out.append(int(d) if d is not None else tf.cast(dynamic[i], tf.int32))
    return out


def _prod(dims: Sequence[Dim]) -> Dim:
    if all(isinstance(d, int) for d in dims):
        return int(np.prod(dims, dtype=np.int64))
    result = tf.constant(1, tf.int32)
    for d in dims:
        result = result * d
    return result


def _as_scalar(d: Dim) -> tf.Tensor:
    return graph_constants.constant(d, tf.int32) if isinstance(d, int) else tf.cast(d, tf.int32)


def _positions(ids: tf.Tensor) -> tf.Tensor:
    """`tf.range(size(ids))` (int32) with shared constants; one op for all ids of the same static size."""
    zero, one = graph_constants.constant(0, tf.int32), graph_constants.constant(1, tf.int32)
    size = ids.shape.num_elements()
    if size is None:
        return tf.raw_ops.Range(start=zero, limit=tf.size(ids, out_type=tf.int32), delta=one)
    limit = graph_constants.constant(size, tf.int32)
    return graph_constants.shared(("positions", size), lambda: tf.raw_ops.Range(start=zero, limit=limit, delta=one))


def _as_int64(scalar: tf.Tensor) -> tf.Tensor:
    """An int32 scalar as int64: a shared constant when its value is static."""
    value = tf.get_static_value(scalar)
    return graph_constants.constant(value, tf.int64) if value is not None else tf.cast(scalar, tf.int64)


def _check_output_numel(out_shape: List[int], numel: Dim, ctx: str, what: str) -> None:
    if isinstance(numel, int) and int(np.prod(out_shape)) != numel:
        raise ValueError(
            f"{ctx}: output_shape {out_shape} has {int(np.prod(out_shape))} rows but the {what} input has {numel}."
        )


def _dense_coo(value: tf.Tensor, out_shape: Optional[List[int]], seq_len: int, ctx: str) -> _Coo:
    shape = value.shape
    if shape.rank is None:
        raise ValueError(f"{ctx}: dense ids must have a known rank.")
    if shape.rank == 0:
        raise ValueError(f"{ctx}: only rank 1 and above dense tensors are supported, got a scalar.")
    dynamic = functools.partial(tf.shape, value, out_type=tf.int32)  # Built only if a dimension is unknown.
    if seq_len > 0 and out_shape is None:
        if shape.rank != 2:
            raise ValueError(
                f"{ctx}: a sequence feature (max_sequence_length={seq_len}) needs dense ids of shape "
                f"[batch, length], got shape {shape}."
            )
        value = value[:, :seq_len]
        width = tf.maximum(tf.shape(value, out_type=tf.int32)[1], 1)
        ids = tf.reshape(value, [-1])
        pos = tf.range(tf.size(ids, out_type=tf.int32), dtype=tf.int32)
        rows = (pos // width) * seq_len + pos % width
        batch = _dims_from(shape[:1], dynamic)[0]
        out = [batch, seq_len]
        return _Coo(tf.cast(ids, tf.int64), rows, None, _as_scalar(_prod(out)), out, True, True)
    if shape.rank >= 2 and shape[-1] != 1:
        raise ValueError(
            f"{ctx}: rank 2 or above dense tensor should have last dimension as 1 as the last "
            f"dimension will always be reduced. Instead got dense tensor as shape {shape}."
        )
    lead = shape.as_list() if shape.rank == 1 else shape.as_list()[:-1]
    out = _dims_from(lead, dynamic)
    ids = tf.reshape(value, graph_constants.constant([-1], tf.int32))
    numel = _prod(out)
    if out_shape is not None:
        _check_output_numel(out_shape, numel, ctx, "dense")
        out = list(out_shape)
    rows = _positions(ids)
    return _Coo(tf.cast(ids, tf.int64), rows, None, _as_scalar(numel), out, False, True, one_per_row=True)


def _sparse_coo(
    value: tf.SparseTensor, weights: Optional[tf.Tensor], out_shape: Optional[List[int]], seq_len: int, ctx: str
) -> _Coo:
    rank = value.shape.rank
    if rank is None:
        raise ValueError(f"{ctx}: sparse ids must have a known rank.")
    if rank < 2:
        raise ValueError(f"{ctx}: only rank 2 and above sparse tensor is supported, found rank {rank} sparse tensor.")
    indices = value.indices
    ids = value.values
    dense_shape = tf.cast(value.dense_shape, tf.int32)
    static = value.shape.as_list()
    if rank == 2 and seq_len > 0 and out_shape is None:
        pos = indices[:, 1]
        keep = pos < seq_len
        ids = tf.boolean_mask(ids, keep)
        if weights is not None:
            weights = tf.boolean_mask(weights, keep)
        rows = tf.cast(tf.boolean_mask(indices[:, 0] * seq_len + pos, keep), tf.int32)
        out = [_dims_from(static[:1], dense_shape)[0], seq_len]
        return _Coo(tf.cast(ids, tf.int64), rows, weights, _as_scalar(_prod(out)), out, True, False)
    if rank > 2 and seq_len > 0:
        logging.warning("%s: input is a rank %d sparse tensor, max_sequence_length=%d is ignored.", ctx, rank, seq_len)
    if rank == 2:
        rows = tf.cast(indices[:, 0], tf.int32)  # The row-major index of [B] outputs is the first index.
    else:
        lead = dense_shape[:-1]
        strides = tf.math.cumprod(lead, axis=0, exclusive=True, reverse=True)
        rows = tf.reduce_sum(tf.cast(indices[:, :-1], tf.int32) * strides[tf.newaxis, :], axis=1)
    out = _dims_from(static[:-1], dense_shape)
    numel = _prod(out)
    if out_shape is not None:
        _check_output_numel(out_shape, numel, ctx, "sparse")
        out = list(out_shape)
    return _Coo(tf.cast(ids, tf.int64), rows, weights, _as_scalar(numel), out, False, False)


def _ragged_coo(
    value: tf.RaggedTensor, weights: Optional[tf.Tensor], out_shape: Optional[List[int]], seq_len: int, ctx: str
) -> _Coo:
    if value.shape.rank != 2:
        raise ValueError(f"{ctx}: only rank 2 ragged tensor is supported, found rank {value.shape.rank} ragged tensor.")
    ids = value.values
    row_of = tf.cast(value.value_rowids(), tf.int32)
    static_batch = value.shape[0]
    batch: Dim = int(static_batch) if static_batch is not None else tf.cast(value.nrows(), tf.int32)
    is_sequence = False
    if out_shape is not None:
        if static_batch is None:
            raise ValueError(f"{ctx}: a ragged input with output_shape {out_shape} needs a static batch size.")
        total = int(np.prod(out_shape))
        if total == static_batch:
            out: List[Dim] = list(out_shape)
        elif total > static_batch and total % static_batch == 0:
            is_sequence, seq_len, out = True, total // static_batch, list(out_shape)
        else:
            raise ValueError(
                f"{ctx}: output shape set in the FeatureConfig should be the factor of the input data "
                f"batch size. But instead got output shape {out_shape}, input data batch size "
                f"{static_batch}."
            )
    elif seq_len > 0:
        is_sequence, out = True, [batch, seq_len]
    else:
        out = [batch]
    if not is_sequence:
        return _Coo(tf.cast(ids, tf.int64), row_of, weights, _as_scalar(_prod(out)), out, False, True)
    starts = tf.cast(tf.gather(value.row_splits, row_of), tf.int32)
    pos = tf.range(tf.size(ids, out_type=tf.int32), dtype=tf.int32) - starts
    keep = pos < seq_len
    ids = tf.boolean_mask(ids, keep)
    if weights is not None:
        weights = tf.boolean_mask(weights, keep)
    rows = tf.boolean_mask(row_of * seq_len + pos, keep)
    return _Coo(tf.cast(ids, tf.int64), rows, weights, _as_scalar(_prod([batch, seq_len])), out, True, True)


def _same_values(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """Scalar bool: `a` and `b` (1-D or 2-D) have equal shapes and values, without shape errors."""
    a = tf.reshape(a, [-1])
    b = tf.reshape(tf.cast(b, a.dtype), [-1])
    n = tf.minimum(tf.size(a), tf.size(b))
    return tf.logical_and(tf.equal(tf.size(a), tf.size(b)), tf.reduce_all(tf.equal(a[:n], b[:n])))


def _structure_asserts(value: Any, weight: Any, ctx: str) -> List[Any]:
    """Run-time checks that sparse/ragged weights line up with the ids."""
    if isinstance(value, tf.SparseTensor):
        return [
            tf.debugging.Assert(
                tf.logical_and(
                    _same_values(value.indices, weight.indices), _same_values(value.dense_shape, weight.dense_shape)
                ),
                [f"{ctx}: weights must have the same indices and dense_shape as the ids."],
            )
        ]
    return [
        tf.debugging.Assert(
            _same_values(value.row_splits, weight.row_splits),
            [f"{ctx}: weights must have the same row_splits as the ids."],
        )
    ]


def _feature_to_coo(
    value: Any, weight: Any, feature: Any, key: str, table_name: str, validate: bool
) -> Tuple[_Coo, List[Any]]:
    """Converts one feature to COO entries; returns them with the run-time checks of its weights (if any).

    The ids' range is checked for all features at once (`_ids_in_range_check`).
    """
    ctx = f"Feature {key!r} (table {table_name!r})"
    value = _to_input(value)
    if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
        _check_id_dtype(value.values.dtype, ctx)
    else:
        _check_id_dtype(value.dtype, ctx)
    seq_len = int(getattr(feature, "max_sequence_length", 0) or 0)
    out_shape = _static_output_shape(feature, ctx)
    weights = None
    if weight is not None:
        weight = _to_input(weight)
        if isinstance(value, tf.Tensor):
            raise ValueError(
                f"{ctx}: weight specified for dense input, which is not allowed. Weight will always be 1 in this case."
            )
        if type(weight) is not type(value):
            raise ValueError(
                f"{ctx}: weight is of type {type(weight).__name__} which does not match the type of the "
                f"input, {type(value).__name__}."
            )
        weights = _weight_values(weight, ctx)
        n_ids, n_w = value.values.shape[0], weights.shape[0]
        if n_ids is not None and n_w is not None and n_ids != n_w:
            raise ValueError(f"{ctx}: weights have {n_w} values but the ids have {n_ids}.")
    if isinstance(value, tf.SparseTensor):
        coo = _sparse_coo(value, weights, out_shape, seq_len, ctx)
    elif isinstance(value, tf.RaggedTensor):
        coo = _ragged_coo(value, weights, out_shape, seq_len, ctx)
    else:
        coo = _dense_coo(value, out_shape, seq_len, ctx)
    coo = coo._replace(max_entries=_max_entries(value))

    checks = []
    if weight is not None and validate and getattr(feature, "validate_weights_and_indices", True):
        checks.extend(_structure_asserts(value, weight, ctx))
        checks.append(
            tf.debugging.Assert(
                tf.reduce_all(coo.weights >= 0.0),
                [f"{ctx}: weights must be non-negative; smallest weight:", tf.reduce_min(coo.weights)],
            )
        )
    return coo, [c for c in checks if c is not None]  # Eager asserts return None (and raise immediately).


def _ids_in_range_check(checked: List[Tuple[str, int, tf.Tensor]]) -> Any:
    """ONE check that every feature's ids are in `[0, vocabulary_size)`, naming the first feature that is not.

    Per feature only its smallest and largest id are computed; the comparison is shared, and the message (which
    feature, its two extreme ids as strings) is built only when a check fails, in the false branch of one
    conditional, so a passing step runs a few ops per feature plus the conditional's switches. The message is the
    feature's own: "Feature 'a' (table 't'): ids must be in [0, V) (vocabulary_size); smallest and largest id:"
    followed by the two ids.

    Args:
      checked: per feature, `(its context "Feature 'a' (table 't')", vocabulary size, its ids)`.

    Returns:
      A bool scalar to depend on (graph mode); eagerly a failing check has raised already.
    """
    # The extremes of int32 ids cast to int64 after the reduction; those of no ids (INT_MAX, INT_MIN) pass.
    axis = graph_constants.constant(0, tf.int32)  # The ids are 1-D.
    lowest = tf.stack([tf.cast(tf.reduce_min(ids, axis=axis), tf.int64) for _, _, ids in checked])
    highest = tf.stack([tf.cast(tf.reduce_max(ids, axis=axis), tf.int64) for _, _, ids in checked])
    bad = tf.logical_or(lowest < 0, highest >= tf.constant([vocab for _, vocab, _ in checked], tf.int64))
    passed = tf.logical_not(tf.reduce_any(bad))
    messages = [
        f"{ctx}: ids must be in [0, {vocab}) (vocabulary_size); smallest and largest id:" for ctx, vocab, _ in checked
    ]

    def report_first_bad_feature() -> tf.Tensor:
        first = tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)
        # String data only: the assert needs no guarding conditional of its own (which int64 data would add).
        failed = tf.debugging.Assert(
            passed,
            [
                tf.gather(tf.constant(messages), first),
                tf.strings.as_string(tf.gather(lowest, first)),
                tf.strings.as_string(tf.gather(highest, first)),
            ],
        )
        with tf.control_dependencies([failed] if failed is not None else []):
            return tf.identity(passed)

    return tf.cond(passed, lambda: tf.identity(passed), report_first_bad_feature)


def _checked(coo: _Coo, checks: List[Any]) -> _Coo:
    """`coo` whose ids and weights are read after `checks` passed."""
    if not checks:
        return coo
    with tf.control_dependencies(checks):
        ids = tf.identity(coo.ids)
        weights = tf.identity(coo.weights) if coo.weights is not None else None
    return coo._replace(ids=ids, weights=weights)


# ----------------------------------------------------------------------------------------------------------
# Per-table deduplication.


def _segment_sum(values: tf.Tensor, segment_ids: tf.Tensor, num_segments: tf.Tensor) -> tf.Tensor:
    """Scalar `unsorted_segment_sum` via a weighted bincount (several times faster on CPU for many segments).

    The raw op: segment ids are in `[0, num_segments)` by construction, and `tf.math.bincount` would add a dozen
    ops per call (per feature) to compute and clamp the output size.
    """
    return tf.raw_ops.DenseBincount(
        input=segment_ids, size=tf.cast(num_segments, segment_ids.dtype), weights=values, binary_output=False
    )


def _gains(coo: _Coo, combiner: str) -> tf.Tensor:
    weights = coo.weights
    if weights is None:
        n = coo.ids.shape.num_elements()
        weights = (
            graph_constants.constant(np.ones([n]), tf.float32)
            if n is not None
            else tf.ones_like(coo.ids, dtype=tf.float32)
        )
    if coo.is_sequence or combiner == "sum" or (coo.one_per_row and coo.weights is None):
        return weights  # Also a row's only id of weight 1: its mean and sqrtn gains are 1 / 1, exactly 1.
    axis = graph_constants.constant(0, tf.int32)
    if combiner == "mean":
        totals = _segment_sum(weights, coo.rows, coo.num_segments)
        return tf.math.divide_no_nan(weights, tf.gather(totals, coo.rows, axis=axis))
    squares = _segment_sum(weights * weights, coo.rows, coo.num_segments)
    return tf.math.divide_no_nan(weights, tf.sqrt(tf.gather(squares, coo.rows, axis=axis)))


def _sorted_unique_numpy(*ids_per_table: np.ndarray) -> List[np.ndarray]:
    """`[unique_0, index_0, unique_1, index_1, ...]`: sorted unique ids and each id's index into them."""
    out: List[np.ndarray] = []
    for ids in ids_per_table:
        n = ids.size
        if n == 0:
            out += [np.zeros([0], np.int64), np.zeros([0], np.int32)]
            continue
        low = int(ids.min())
        span = int(ids.max()) - low + 1
        bits = max(int(n - 1).bit_length(), 1)
        if span.bit_length() + bits <= 62:
            # Sorting (id, position) packed into one int64 is an argsort by value sort, which NumPy vectorises.
            keys = np.sort(((ids - low) << bits) | np.arange(n, dtype=np.int64))
            order = keys & ((1 << bits) - 1)
            sorted_ids = (keys >> bits) + low
        else:
            order = np.argsort(ids, kind="stable")
            sorted_ids = ids[order]
        is_new = np.empty(n, bool)
        is_new[0] = True
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=is_new[1:])
        index = np.empty(n, np.int32)
        index[order] = np.cumsum(is_new, dtype=np.int32) - 1
        out += [sorted_ids[is_new], index]
    return out


# Below this many ids (static bound) per table, the TensorFlow path is cheaper than a host call (whose fixed
# cost, ~0.1 ms, would bound small models' steps); above it, NumPy's sort wins (12x faster than TopKV2).
_HOST_SORT_MIN_IDS = 4096


def _sorted_unique_tf(ids: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """`(unique ids ascending, index of each id into them)` by TensorFlow ops."""
    unique_ids, index = tf.unique(ids, out_idx=tf.int32)
    # What tf.argsort does for ascending integers (top_k of -x - 1, i.e. ~x, which cannot overflow) in 3 ops
    # instead of 10; the unique ids have no ties, so the order is the stable one.
    _, order = tf.raw_ops.TopKV2(
        input=tf.bitwise.invert(unique_ids), k=tf.size(unique_ids, out_type=tf.int32), sorted=True
    )
    axis = graph_constants.constant(0, tf.int32)
    return tf.gather(unique_ids, order, axis=axis), tf.gather(tf.math.invert_permutation(order), index, axis=axis)


def _static_size_bound(ids: tf.Tensor) -> Optional[int]:
    return ids.shape.num_elements() if ids.shape.is_fully_defined() else None


def _sorted_unique(
    ids_per_table: List[tf.Tensor], size_bounds: Optional[List[Optional[int]]] = None, python_ops: bool = True
) -> List[Tuple[tf.Tensor, tf.Tensor]]:
    """Per table, `(unique ids ascending, index of each id into them)`.

    Ascending ids make the table gather and the sparse optimizer update walk the table in address order (1.5x
    faster sparse Adagrad on 26 x 500k x 64 tables than hash order). TensorFlow sorts through `TopKV2` (3 ms for
    20k int64 ids); NumPy's vectorised sort of packed (id, position) keys takes 0.25 ms. So tables with many ids
    are deduplicated together in one `tf.numpy_function` (host CPU; never part of an exported serving graph),
    tables with few ids (static bound below `_HOST_SORT_MIN_IDS`) with TensorFlow ops.

    Args:
      ids_per_table: int64 ids `[n]` of each table.
      size_bounds: per table, a static upper bound of `n` (None: unknown); defaults to the static shapes.
      python_ops: allow the NumPy host call; False deduplicates every table with TensorFlow ops (for graphs run
        by another process, e.g. a worker of a cluster, which cannot call this process's Python).
    """
    ids_per_table = [tf.cast(ids, tf.int64) for ids in ids_per_table]
    if size_bounds is None:
        size_bounds = [_static_size_bound(ids) for ids in ids_per_table]
    out: List[Optional[Tuple[tf.Tensor, tf.Tensor]]] = [None] * len(ids_per_table)
    on_host = []
    for i, (ids, bound) in enumerate(zip(ids_per_table, size_bounds)):
        if not python_ops or (bound is not None and bound < _HOST_SORT_MIN_IDS):
            out[i] = _sorted_unique_tf(ids)
        else:
            on_host.append(i)
    if on_host:
        flat = tf.numpy_function(
            _sorted_unique_numpy,
            [ids_per_table[i] for i in on_host],
            [tf.int64, tf.int32] * len(on_host),
            stateful=False,
            name="sorted_unique",
        )
        for j, i in enumerate(on_host):
            unique_ids, index = flat[2 * j], flat[2 * j + 1]
            unique_ids.set_shape([None])
            index.set_shape(ids_per_table[i].shape)
            out[i] = (unique_ids, index)
    return out


def _every_id(ids: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """`(int64 ids, the position of each)`: the pair `_sorted_unique` gives, without deduplicating (lookups only)."""
    n = _static_size_bound(ids)
    size = n if n is not None else tf.size(ids, out_type=tf.int32)
    return ids, tf.range(size, dtype=tf.int32)


def _ids_bound(entries: List[Tuple[str, _Coo]]) -> Optional[int]:
    """A static upper bound of the number of ids of a table's entries, or None."""
    total = 0
    for _, coo in entries:
        if coo.max_entries is None:
            return None
        total += coo.max_entries
    return total


def _all_ids(entries: List[Tuple[str, _Coo]]) -> tf.Tensor:
    return tf.concat([coo.ids for _, coo in entries], axis=0) if len(entries) > 1 else entries[0][1].ids


def _table_batch(
    table_name: str,
    table: Any,
    entries: List[Tuple[str, _Coo]],
    unique_ids: tf.Tensor,
    index: tf.Tensor,
    deduplicated: bool,
) -> TableBatch:
    combiner = getattr(table, "combiner", "mean") or "mean"
    if len(entries) > 1:
        sizes = tf.stack([tf.size(coo.ids, out_type=tf.int32) for _, coo in entries])
        indices = tf.split(index, sizes, num=len(entries))
    else:
        indices = [index]
    num_unique = tf.size(unique_ids, out_type=tf.int64)
    features = collections.OrderedDict()
    for (key, coo), idx in zip(entries, indices):
        segment_ids = tf.cast(coo.rows, tf.int32)
        features[key] = FeatureSegments(
            unique_index=idx,
            segment_ids=segment_ids,
            gains=_gains(coo, combiner),
            num_segments=coo.num_segments,
            output_shape=coo.output_shape,
            is_sequence=coo.is_sequence,
            sorted_segments=coo.rows_sorted,
            matrix_indices=tf.cast(tf.stack([segment_ids, tf.cast(idx, tf.int32)], axis=1), tf.int64),
            matrix_shape=tf.stack([_as_int64(coo.num_segments), num_unique]),
            weighted=coo.weights is not None,
        )
    return TableBatch(
        table_name=table_name, unique_ids=unique_ids, features=dict(features), table=table, deduplicated=deduplicated
    )


@_do_not_convert
def preprocess_features(
    features: Any,
    feature_config: Any,
    weights: Any = None,
    validate: bool = True,
    name: Optional[str] = None,
    python_ops: bool = True,
    deduplicate: bool = True,
) -> "collections.OrderedDict[str, TableBatch]":
    """Turns one batch of id features into deduplicated per-table batches.

    Args:
      features: a nest matching `feature_config` of int32/int64 `tf.Tensor`, `tf.SparseTensor` or
        `tf.RaggedTensor` ids (NumPy arrays are converted).
      feature_config: a nest of FeatureConfig objects (duck-typed: `.table`, `.max_sequence_length`,
        `.output_shape`, `.name`, `.validate_weights_and_indices`; the table: `.vocabulary_size`, `.dim`,
        `.combiner`, `.name`).
      weights: None, or a nest matching `features` of weights (None entries allowed); sparse/ragged only.
      validate: if True, features with `validate_weights_and_indices=True` get run-time asserts (ids in
        `[0, vocabulary_size)`, weights >= 0, weights aligned with the ids) that raise
        `tf.errors.InvalidArgumentError` naming the feature and table before any output is produced.
      name: optional name scope.
      python_ops: allow one `tf.numpy_function` (the dedup sort of tables with many ids); False builds TensorFlow
        ops only, for graphs whose host ops run in another process (a remote worker of a cluster).
      deduplicate: True (the default): each table's ids unique and ascending, as an update needs them. False, for
        lookups only (evaluation, prediction): every id kept in feature order, no sort; the activations are the
        same to the bit (each output row adds the same gain-weighted rows in the same order), without the
        per-table dedup ops, and the batches cannot be applied (`TableBatch.deduplicated` is False).

    Returns:
      `{table_name: TableBatch}` in table order (see `table_names`), covering every table of the config.

    Raises:
      ValueError: missing or unexpected features, wrong rank or shape, weights for dense ids, weight type
        mismatching the ids, bad combiner.
      TypeError: ids not int32/int64 (e.g. strings), non-numeric weights.
    """
    flat = config_lib.flatten_features(feature_config)
    tables = config_lib.table_names(feature_config)
    name_of = {id(t): n for n, t in tables.items()}
    _check_no_extra_keys(feature_config, features, "features")
    if weights is not None:
        _check_no_extra_keys(feature_config, weights, "weights")
    per_table: Dict[str, List[Tuple[str, _Coo]]] = collections.OrderedDict((n, []) for n in tables)
    converted: List[Tuple[str, str, _Coo, List[Any], bool]] = []
    in_range: List[Tuple[str, int, tf.Tensor]] = []
    with tf.name_scope(name or "embedding_preprocess"), graph_constants.sharing():
        for path, feature in flat:
            table = feature.table
            table_name = name_of[id(table)]
            key = config_lib.feature_key(path, feature)
            combiner = getattr(table, "combiner", "mean") or "mean"
            if combiner not in _COMBINERS:
                raise ValueError(f"Table {table_name!r}: combiner must be one of {_COMBINERS}, got {combiner!r}.")
            value = _lookup_path(features, path, "features", key, table_name) if path else features
            if value is None:
                raise ValueError(f"Feature {key!r} (table {table_name!r}) is missing from the features (got None).")
            weight = None
            if weights is not None:
                weight = _lookup_path(weights, path, "weights", key, table_name) if path else weights
            with tf.name_scope(config_lib.scope_name(key)):
                coo, checks = _feature_to_coo(value, weight, feature, key, table_name, validate)
            checked = validate and getattr(feature, "validate_weights_and_indices", True)
            converted.append((table_name, key, coo, checks, checked))
            if checked:
                in_range.append((f"Feature {key!r} (table {table_name!r})", int(table.vocabulary_size), coo.ids))
        range_check = [_ids_in_range_check(in_range)] if in_range else []
        range_check = [c for c in range_check if c is not None]  # None eagerly: it passed.
        for table_name, key, coo, checks, checked in converted:
            per_table[table_name].append((key, _checked(coo, checks + (range_check if checked else []))))
        if deduplicate:
            table_ids = _sorted_unique(
                [_all_ids(entries) for entries in per_table.values()],
                [_ids_bound(entries) for entries in per_table.values()],
                python_ops=python_ops,
            )
        else:
            table_ids = [_every_id(_all_ids(entries)) for entries in per_table.values()]
        out = collections.OrderedDict()
        for (table_name, entries), (unique_ids, index) in zip(per_table.items(), table_ids):
            with tf.name_scope(config_lib.scope_name(table_name)):
                out[table_name] = _table_batch(table_name, tables[table_name], entries, unique_ids, index, deduplicate)
    return out


# ----------------------------------------------------------------------------------------------------------
# Partitioning across shards.


def _check_partition_args(num_shards: int, vocabulary_size: Optional[int], strategy: str) -> None:
    if strategy not in _STRATEGIES:
        raise ValueError(f"partition strategy must be one of {_STRATEGIES}, got {strategy!r}.")
    if not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
        raise ValueError(f"num_shards must be a positive int, got {num_shards!r}.")
    if strategy == "div" and (vocabulary_size is None or vocabulary_size < 1):
        raise ValueError(f"'div' partitioning needs a positive vocabulary_size, got {vocabulary_size!r}.")


def shard_sizes(vocabulary_size: int, num_shards: int, strategy: str = "div") -> List[int]:
    """Rows held by each shard of a table of `vocabulary_size` rows.

    'div': contiguous ranges, the first `vocabulary_size % num_shards` shards one row larger (as TF's 'div'
    partition strategy of `embedding_lookup`). 'mod': shard `s` holds ids `s, s + n, s + 2n, ...`.
    """
    _check_partition_args(num_shards, vocabulary_size, strategy)
    base, extra = divmod(int(vocabulary_size), int(num_shards))
    if strategy == "div":
        return [base + 1 if s < extra else base for s in range(num_shards)]
    return [len(range(s, int(vocabulary_size), int(num_shards))) for s in range(num_shards)]


@_do_not_convert
def partition_ids(
    ids: tf.Tensor, num_shards: int, vocabulary_size: Optional[int] = None, strategy: str = "div"
) -> Tuple[tf.Tensor, tf.Tensor]:
    """Maps global ids to (shard index, row within the shard).

    Args:
      ids: integer ids in `[0, vocabulary_size)`.
      num_shards: number of shards.
      vocabulary_size: rows of the table (required for 'div').
      strategy: 'div' (contiguous ranges, first `vocab % num_shards` shards one row larger) or 'mod'
        (`id % num_shards`, local row `id // num_shards`).

    Returns:
      `(shard, local)`: int32 shard index and local row (same dtype as `ids`).
    """
    _check_partition_args(num_shards, vocabulary_size, strategy)
    ids = tf.convert_to_tensor(ids)
    n = tf.constant(num_shards, ids.dtype)
    if strategy == "mod":
        return tf.cast(ids % n, tf.int32), ids // n
    base, extra = divmod(int(vocabulary_size), int(num_shards))
    big = tf.constant(base + 1, ids.dtype)
    small = tf.constant(max(base, 1), ids.dtype)
    boundary = tf.constant(extra * (base + 1), ids.dtype)
    in_big = ids < boundary
    shard = tf.where(in_big, ids // big, extra + (ids - boundary) // small)
    local = tf.where(in_big, ids % big, (ids - boundary) % small)
    return tf.cast(shard, tf.int32), local


@_do_not_convert
def unpartition_ids(
    shard: tf.Tensor, local: tf.Tensor, num_shards: int, vocabulary_size: Optional[int] = None, strategy: str = "div"
) -> tf.Tensor:
    """Inverse of `partition_ids`: (shard index, local row) -> global id (dtype of `local`)."""
    _check_partition_args(num_shards, vocabulary_size, strategy)
    local = tf.convert_to_tensor(local)
    shard = tf.cast(shard, local.dtype)
    if strategy == "mod":
        return local * num_shards + shard
    base, extra = divmod(int(vocabulary_size), int(num_shards))
    return tf.where(shard < extra, shard * (base + 1) + local, extra * (base + 1) + (shard - extra) * base + local)


# ----------------------------------------------------------------------------------------------------------
# CSR export for the TPUEmbeddingV2 API.


@_do_not_convert
def to_partitioned_csr(
    batch: TableBatch, num_shards: int = 1, strategy: str = "mod", vocabulary_size: Optional[int] = None
) -> PartitionedCsrFormatTensor:
    """Converts a `TableBatch` to the CSR fields of upstream's `PartitionedCsrFormatTensor`.

    Args:
      batch: the table's preprocessed batch.
      num_shards: shards the table is partitioned over.
      strategy: 'mod' (SparseCore, the default) or 'div'.
      vocabulary_size: rows of the table; defaults to `batch.table.vocabulary_size`.

    Returns:
      A `PartitionedCsrFormatTensor` (see its docstring for the layout).
    """
    if vocabulary_size is None and batch.table is not None:
        vocabulary_size = int(batch.table.vocabulary_size)
    if vocabulary_size is not None and vocabulary_size > np.iinfo(np.int32).max:
        raise ValueError(
            f"Table {batch.table_name!r}: vocabulary_size {vocabulary_size} does not fit the int32 "
            f"token ids of the CSR format."
        )
    samples, tokens, gains = [], [], []
    offset = tf.constant(0, tf.int32)
    for segments in batch.features.values():
        samples.append(segments.segment_ids + offset)
        tokens.append(tf.gather(batch.unique_ids, segments.unique_index))
        gains.append(segments.gains)
        offset = offset + segments.num_segments
    sample_count = offset
    if samples:
        sample_ids, token_ids, gain_values = tf.concat(samples, 0), tf.concat(tokens, 0), tf.concat(gains, 0)
    else:
        sample_ids = tf.zeros([0], tf.int32)
        token_ids = tf.zeros([0], tf.int64)
        gain_values = tf.zeros([0], tf.float32)
    shard, _ = partition_ids(token_ids, num_shards, vocabulary_size, strategy)
    order = tf.argsort(token_ids, stable=True)
    bucket = shard * sample_count + sample_ids
    order = tf.gather(order, tf.argsort(tf.gather(bucket, order), stable=True))
    sorted_bucket, sorted_tokens = tf.gather(bucket, order), tf.gather(token_ids, order)
    # Entries are now ordered by (shard, sample, token): duplicates (same sample, same token) are neighbours and
    # merge into one entry whose gain is the sum.
    is_new = tf.logical_or(
        tf.not_equal(sorted_bucket, tf.concat([sorted_bucket[:1] - 1, sorted_bucket[:-1]], axis=0)),
        tf.not_equal(sorted_tokens, tf.concat([sorted_tokens[:1] - 1, sorted_tokens[:-1]], axis=0)),
    )
    merged_index = tf.cumsum(tf.cast(is_new, tf.int32)) - 1
    merged_gains = tf.math.unsorted_segment_sum(
        tf.gather(gain_values, order), merged_index, tf.reduce_sum(tf.cast(is_new, tf.int32))
    )
    merged_bucket = tf.boolean_mask(sorted_bucket, is_new)
    counts = tf.math.bincount(
        merged_bucket, minlength=num_shards * sample_count, maxlength=num_shards * sample_count, dtype=tf.int32
    )
    row_pointers = tf.concat([tf.zeros([1], tf.int32), tf.cumsum(counts)], axis=0)
    return PartitionedCsrFormatTensor(
        row_pointers=row_pointers,
        sorted_sample_ids=tf.boolean_mask(tf.gather(sample_ids, order), is_new),
        sorted_token_ids=tf.cast(tf.boolean_mask(sorted_tokens, is_new), tf.int32),
        sorted_gains=merged_gains,
        sample_count=sample_count,
        num_minibatches_per_physical_sparse_core=tf.constant(1, tf.int32),
    )
