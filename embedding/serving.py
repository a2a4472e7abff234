"""CPU serving lookups on full (logical) tables: `serving_embedding_lookup` and `TPUEmbeddingForServing`.

Plain TensorFlow ops only (gathers and `tf.nn.safe_embedding_lookup_sparse`), so exported SavedModels run on any
TensorFlow runtime. Results have the shapes of the training path (`TPUEmbedding.dequeue`):

- dense ids `[B]` or `[B, ..., 1]`: `[B, ..., dim]` (upstream's CPU path returns `[B, 1, dim]` for `[B, 1]`);
  dense `[B, L']` ids of a sequence feature: `[B, L, dim]`, truncated or zero-padded (as training accepts them);
- sparse ids: safe sparse lookup with the table's combiner (empty rows give zeros; ids < 0 and weights <= 0 are
  pruned); rank-2 sparse ids of a sequence feature: `[B, L, dim]`;
- ragged ids: combined `[B, dim]`, or a sequence `[B, L, dim]` (`max_sequence_length`, or an `output_shape` that is
  a multiple of the batch);
- weights of sequence features scale their rows, as in training (upstream's CPU path rejects them);
- an `output_shape` in the FeatureConfig reshapes the result to `output_shape + [dim]`.

Ids outside `[0, vocabulary_size)`: by default as upstream's CPU lookups (the safe sparse lookup drops negative
ids; gathers fail on them). With `check_ids=True`, every lookup first checks its ids exactly as training does
(`check_ids_in_range`): an `InvalidArgumentError` names the feature and the table. `TPUEstimator` exports and CPU-path
modes use `check_ids=True`, so a model never serves ids that it would refuse to train on.
"""

from typing import Any, Dict, Optional

import numpy as np
import tensorflow as tf

from embedding import config as config_lib
from embedding.engine import EmbeddingEngine
from embedding.sparsecore_checkpoint import RestoresSparseCoreCheckpoints, check_restore_info

__all__ = ["check_ids_in_range", "serving_embedding_lookup", "TPUEmbeddingForServing"]


def _id_values(ids: Any) -> tf.Tensor:
    if isinstance(ids, tf.SparseTensor):
        return ids.values
    if isinstance(ids, tf.RaggedTensor):
        return ids.flat_values
    return tf.convert_to_tensor(ids)


def _id_range_check(values: tf.Tensor, vocabulary_size: int, feature: str, table: str) -> Optional[tf.Operation]:
    """Training's id validation (`embedding.preprocessing`): an assert op, or None eagerly (then it has run)."""
    vocab = int(vocabulary_size)
    return tf.debugging.Assert(
        tf.reduce_all(tf.logical_and(values >= 0, values < tf.cast(vocab, values.dtype))),
        [
            f"Feature {feature!r} (table {table!r}): ids must be in [0, {vocab}) (vocabulary_size); "
            "smallest and largest id:",
            tf.reduce_min(values),
            tf.reduce_max(values),
        ],
    )


def read_after(value: Any, dependency: Any) -> Any:
    """`value` (dense, sparse or ragged) read only after `dependency` (an op or tensor) has run.

    Args:
      value: a `Tensor`, `SparseTensor` or `RaggedTensor`.
      dependency: what must run first (e.g. an id check).

    Returns:
      `value`'s equal, its values read under a control dependency on `dependency`.
    """
    with tf.control_dependencies([dependency]):
        if isinstance(value, tf.SparseTensor):
            return tf.SparseTensor(value.indices, tf.identity(value.values), value.dense_shape)
        if isinstance(value, tf.RaggedTensor):
            return value.with_flat_values(tf.identity(value.flat_values))
        return tf.identity(value)


def _gated(ids: Any, check: Optional[tf.Operation]) -> Any:
    """`ids` (dense, sparse or ragged) read only after `check` has passed."""
    return ids if check is None else read_after(ids, check)


def check_ids_in_range(ids: Any, vocabulary_size: int, feature: str, table: str) -> Any:
    """`ids` (dense, sparse or ragged), checked as training checks them: every id in `[0, vocabulary_size)`.

    Args:
      ids: int ids: a `tf.Tensor`, `tf.SparseTensor` or `tf.RaggedTensor`.
      vocabulary_size: rows of the table.
      feature: the feature's name (in the error).
      table: the table's name (in the error).

    Returns:
      `ids`, gated by the check in graphs (eagerly the check has run).

    Raises:
      tf.errors.InvalidArgumentError: (at run time, or at once eagerly) an id outside the range; the message names
        the feature, the table, the range and the smallest and largest id.
    """
    return _gated(ids, _id_range_check(_id_values(ids), vocabulary_size, feature, table))


def _ids_to_check(inp: Any, feature: Any) -> Any:
    """The ids training validates: a dense sequence feature's ids are cut to `max_sequence_length` first."""
    seq_len = int(getattr(feature, "max_sequence_length", 0) or 0)
    if isinstance(inp, tf.Tensor) and seq_len > 0 and _output_shape(feature) is None and inp.shape.rank == 2:
        return inp[:, :seq_len]
    return inp


def _shards(table: Any) -> Any:
    """A lookup-able params object: a list of 'div' shards, or the table itself."""
    if isinstance(table, (list, tuple)):
        return list(table)
    variables = getattr(table, "variables", None)
    if type(table).__name__ == "ShardedVariable" and variables:
        return list(variables)
    return table


def _gather(table: Any, ids: Any) -> tf.Tensor:
    params = _shards(table)
    if isinstance(params, list):
        return tf.nn.embedding_lookup(params, ids)  # TF2: 'div' partitioning, the layout of our shards.
    return tf.gather(params, ids)


def _find_table(tables: Dict[Any, Any], feature: Any, path: str) -> Any:
    table = feature.table
    candidates = [table, getattr(table, "source", None), getattr(table, "name", None)]
    ours = config_lib.as_table_config(table) if not isinstance(table, config_lib.TableConfig) else table
    candidates += [ours, ours.name]
    for key in candidates:
        if key is None:
            continue
        try:
            if key in tables:
                return tables[key]
        except TypeError:
            continue
    raise ValueError(f"No table for feature {path} (table {getattr(table, 'name', None)!r}) in `tables`.")


def _paths(feature_config: Any):
    pairs = config_lib.feature_paths(feature_config)
    return [key for key, _ in pairs], [f for _, f in pairs]


def _output_shape(feature: Any) -> Optional[list]:
    shape = tf.TensorShape(getattr(feature, "output_shape", None))
    if shape.rank is None or shape.rank == 0:
        return None
    return shape.as_list()


def _reshape(result: tf.Tensor, out_shape: Optional[list], dim: int) -> tf.Tensor:
    if out_shape is None:
        return result
    return tf.reshape(result, out_shape + [dim])


def _dense_lookup(inp: tf.Tensor, table: Any, feature: Any, dim: int, path: str) -> tf.Tensor:
    rank = inp.shape.rank
    seq_len = int(feature.max_sequence_length or 0)
    out_shape = _output_shape(feature)
    if rank == 0:
        raise ValueError(f"Feature {path}: only rank 1 and above dense tensors are supported.")
    if seq_len > 0 and out_shape is None and rank == 2:
        ids = inp[:, :seq_len]
        rows = _gather(table, ids)
        pad = seq_len - tf.shape(ids)[1]
        return tf.pad(rows, [[0, 0], [0, pad], [0, 0]])
    if rank is not None and rank >= 2:
        if inp.shape[-1] != 1:
            raise ValueError(
                f"Feature {path}: rank 2 or above dense tensor should have last dimension as 1, got shape {inp.shape}."
            )
        inp = tf.squeeze(inp, axis=-1)
    return _reshape(_gather(table, inp), out_shape, dim)


def _sparse_lookup(
    inp: tf.SparseTensor, weight: Optional[tf.SparseTensor], table: Any, feature: Any, dim: int
) -> tf.Tensor:
    seq_len = int(feature.max_sequence_length or 0)
    out_shape = _output_shape(feature)
    if out_shape is None and seq_len > 0 and inp.shape.rank in (None, 2):
        batch = tf.shape(inp, out_type=tf.int64)[0]
        keep = inp.indices[:, 1] < seq_len
        indices = tf.boolean_mask(inp.indices, keep)
        rows = _gather(table, tf.boolean_mask(inp.values, keep))
        if weight is not None:
            rows = rows * tf.cast(tf.boolean_mask(weight.values, keep), rows.dtype)[:, None]
        return tf.scatter_nd(indices, rows, tf.stack([batch, seq_len, dim]))
    combined = tf.nn.safe_embedding_lookup_sparse(
        _shards(table), inp, sparse_weights=weight, combiner=feature.table.combiner
    )
    return _reshape(combined, out_shape, dim)


def _ragged_combine(table: Any, inp: tf.RaggedTensor, weight: Optional[tf.RaggedTensor], combiner: str):
    w = tf.ones_like(inp, dtype=tf.float32) if weight is None else tf.cast(weight, tf.float32)
    w = tf.expand_dims(w, axis=2)
    rows = tf.ragged.map_flat_values(lambda ids: _gather(table, ids), inp)
    total = tf.reduce_sum(rows * w, axis=1)
    if combiner == "mean":
        total = tf.math.divide_no_nan(total, tf.reduce_sum(w, axis=1))
    elif combiner == "sqrtn":
        total = tf.math.divide_no_nan(total, tf.sqrt(tf.reduce_sum(w * w, axis=1)))
    return total


def _ragged_sequence(
    table: Any, inp: tf.RaggedTensor, weight: Optional[tf.RaggedTensor], batch: Any, seq_len: int, dim: int
) -> tf.Tensor:
    rows = tf.ragged.map_flat_values(lambda ids: _gather(table, ids), inp)
    if weight is not None:
        rows = rows * tf.expand_dims(tf.cast(weight, rows.dtype), 2)
    return rows.to_tensor(shape=[batch, seq_len, dim])


def _ragged_lookup(
    inp: tf.RaggedTensor, weight: Optional[tf.RaggedTensor], table: Any, feature: Any, dim: int, path: str
) -> tf.Tensor:
    if inp.shape.rank != 2:
        raise ValueError(f"Only rank 2 ragged tensor is supported, but got rank {inp.shape.rank} (feature {path}).")
    batch = inp.shape[0]
    out_shape = _output_shape(feature)
    combiner = feature.table.combiner
    if out_shape is not None:
        total = int(np.prod(out_shape))
        if total == batch:
            return tf.reshape(_ragged_combine(table, inp, weight, combiner), out_shape + [dim])
        if batch and total > batch and total % batch == 0:
            seq = _ragged_sequence(table, inp, weight, batch, total // batch, dim)
            return tf.reshape(seq, out_shape + [dim])
        raise ValueError(
            f"Output shape set in the FeatureConfig should be the factor of the input data batch size. "
            f"But instead got output shape {out_shape}, input data batch size {batch}"
        )
    if feature.max_sequence_length > 0:
        return _ragged_sequence(
            table, inp, weight, batch if batch is not None else inp.nrows(), int(feature.max_sequence_length), dim
        )
    return _ragged_combine(table, inp, weight, combiner)


@tf.autograph.experimental.do_not_convert
def serving_embedding_lookup(
    inputs: Any, weights: Optional[Any], tables: Dict[Any, Any], feature_config: Any, check_ids: bool = False
) -> Any:
    """Embedding lookups with plain TensorFlow ops on full tables (for CPU serving and export).

    Args:
      inputs: A nest like `feature_config` of dense / sparse / ragged int ids.
      weights: None, or a matching nest of weights (None entries allowed; not for dense ids).
      tables: `{TableConfig (or table name): table}`; a table is a `tf.Variable`/tensor `[vocab, dim]`, a
        `ShardedVariable`, or a list of 'div' shards (e.g. `TPUEmbedding.embedding_tables`).
      feature_config: A nest of `FeatureConfig` (ours or upstream's).
      check_ids: Check that every id is in `[0, vocabulary_size)`, as training does (`check_ids_in_range`),
        instead of upstream's CPU behaviour (negative sparse ids dropped).

    Returns:
      A nest like `inputs` of float32 activations (shapes: see the module docstring).

    Raises:
      ValueError: structure mismatch, weights for dense ids, weight type mismatch, bad ranks, missing tables.
      tf.errors.InvalidArgumentError: with `check_ids`, an id out of range (at run time in graphs).
    """
    tf.nest.assert_same_structure(inputs, feature_config)
    flat_inputs = tf.nest.flatten(inputs)
    flat_weights = [None] * len(flat_inputs)
    if weights is not None:
        tf.nest.assert_same_structure(inputs, weights)
        flat_weights = tf.nest.flatten(weights)
    paths, flat_features = _paths(feature_config)
    outputs = []
    for inp, weight, path, feature in zip(flat_inputs, flat_weights, paths, flat_features):
        table = _find_table(tables, feature, path)
        dim = int(feature.table.dim)
        if isinstance(inp, (np.ndarray, list, int)):
            inp = tf.convert_to_tensor(inp)
        if weight is not None:
            if isinstance(inp, tf.Tensor):
                raise ValueError(f"Weight specified for {path}, but input is dense.")
            if type(weight) is not type(inp):
                raise ValueError(
                    f"Weight for {path} is of type {type(weight)} but it does not match type of the "
                    f"input which is {type(inp)}."
                )
        if check_ids and isinstance(inp, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
            values = _id_values(_ids_to_check(inp, feature))
            inp = _gated(inp, _id_range_check(values, feature.table.vocabulary_size, path, feature.table.name))
        if isinstance(inp, tf.Tensor):
            outputs.append(_dense_lookup(inp, table, feature, dim, path))
        elif isinstance(inp, tf.SparseTensor):
            outputs.append(_sparse_lookup(inp, weight, table, feature, dim))
        elif isinstance(inp, tf.RaggedTensor):
            outputs.append(_ragged_lookup(inp, weight, table, feature, dim, path))
        else:
            raise ValueError(f"Input {path} is type {type(inp)}. Tensor, SparseTensor or RaggedTensor expected.")
    return tf.nest.pack_sequence_as(feature_config, outputs)


class TPUEmbeddingForServing(RestoresSparseCoreCheckpoints, tf.Module):
    """Full (unsharded) tables for CPU serving, restorable from any `TPUEmbedding`/`TPUEmbeddingV2` checkpoint.

    The checkpoint layout is the logical one (`{table}`, `{table}/{slot}`), so checkpoints written with any number
    of replicas or shards restore here; so do the SparseCore-layout checkpoints of a TPU's `TPUEmbeddingV2`, read
    through the layouts they carry (`embedding.sparsecore_checkpoint`), parameters and slots.

    Args:
      feature_config: A nest of `FeatureConfig` (ours or upstream's).
      optimizer: Global optimizer (creates slot variables, so full training checkpoints restore without
        warnings about unused values) or None (tables only).
      experimental_sparsecore_restore_info: TF 2.15's `{"num_tpu_devices": int, "num_sc_chips_per_tpu": int}`:
        checkpoints without SparseCore layouts then hold each table (and slot) alone under its key, its rows
        shuffled over `num_tpu_devices * num_sc_chips_per_tpu` SparseCores without rotation and padded; they are
        unshuffled and unpadded on restore (eagerly). A checkpoint with layouts is read through them (the number
        of SparseCores must agree).

    Raises:
      ValueError: `experimental_sparsecore_restore_info` lacks a key, has others, or a value is not a positive int.
    """

    def __init__(
        self,
        feature_config: Any,
        optimizer: Any = None,
        experimental_sparsecore_restore_info: Optional[Dict[str, Any]] = None,
    ):
        num_sparse_cores = check_restore_info(experimental_sparsecore_restore_info)
        super().__init__(name=None)
        with tf.init_scope():
            self._engine = EmbeddingEngine(feature_config, optimizer, num_shards=1, devices=None)
        object.__setattr__(self, "_feature_config", feature_config)
        self._init_sparsecore_restore(self._engine.tables, num_sparse_cores)

    def build(self) -> None:
        """No-op: the tables exist from construction (kept for upstream compatibility)."""

    @property
    def embedding_tables(self) -> Dict[Any, tf.Variable]:
        """`{TableConfig: tf.Variable [vocab, dim]}`, keyed by the user's table objects."""
        return {_user_table(t.table_config): t.shards[0] for t in self._engine.tables.values()}

    def embedding_lookup(self, features: Any, weights: Optional[Any] = None) -> Any:
        """`serving_embedding_lookup(features, weights, self.embedding_tables, feature_config)`."""
        return serving_embedding_lookup(features, weights, self.embedding_tables, self._feature_config)

    def __call__(self, features: Any, weights: Optional[Any] = None) -> Any:
        return self.embedding_lookup(features, weights)

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        del kwargs
        if str(getattr(save_type, "value", save_type)).lower() == "savedmodel":
            out = {}
            for name, table in self._engine.tables.items():
                out[name] = table.shards[0]
                for slot in table.slot_names:
                    out[f"{name}/{slot}"] = table.slot_shards(slot)[0]
            return out
        return self._engine.logical_tensors()


def _user_table(table: Any) -> Any:
    source = getattr(table, "source", None)
    return source if source is not None else table
