"""Embedding inputs as the engine reads them: the features checked for them, ids reshaped per feature kind, and the
lengths of sequence features.

Used by the per-step bridge (`embedding_bridge.py`) and by the serving lookups (`embedding_serving.py`).
"""

from typing import Any

import tensorflow as tf

from tpu_estimator import _tf_internal


def check_embedding_features(resolved: Any, features: Any, source: str) -> None:
    """Checks that `features` is a dict holding the inputs of every embedding feature: its ids (dict-configured) or
    the input features its column reads (feature columns). Weights are the caller's to check.

    Args:
      resolved: the `ResolvedEmbeddingConfig` of the `EmbeddingConfigSpec`.
      features: the features `model_fn` would get.
      source: where the features come from, for the messages (e.g. "the features returned by input_fn").

    Raises:
      ValueError: naming the embedding feature, its table and the missing input.
    """
    if not isinstance(features, dict):
        raise ValueError("With an embedding_config_spec, {} must be a dict; got {}.".format(source, type(features)))
    for feature in resolved.features:
        if feature.column is not None:
            keys = _tf_internal.categorical_input_keys(feature.column.categorical_column)
            missing = [k for k in keys if k not in features]
            if missing:
                raise ValueError(
                    "Embedding feature {!r} (table {!r}) needs input features {} missing from {}.".format(
                        feature.key, feature.table_name, missing, source
                    )
                )
        elif feature.key not in features:
            raise ValueError(
                "Embedding feature {!r} (table {!r}) is missing from {}.".format(
                    feature.key, feature.table_name, source
                )
            )


def as_engine_input(ids: Any, sequence: bool) -> Any:
    """Ids as the engine reads them.

    Dense multi-id rows `[B, k]` (k > 1) of a combined feature become ragged rows (all ids kept); the `[B, T, 1]`
    sparse ids of sequence categorical columns become `[B, T]`.
    """
    if isinstance(ids, tf.SparseTensor):
        if sequence and ids.shape.rank == 3:
            return tf.sparse.reshape(ids, ids.dense_shape[:2])
        return ids
    if isinstance(ids, tf.RaggedTensor):
        return ids
    ids = tf.convert_to_tensor(ids)
    if not sequence and ids.shape.rank == 2 and ids.shape[1] != 1:
        return tf.RaggedTensor.from_tensor(ids)
    return ids


def sequence_lengths(ids: Any, max_sequence_length: int, batch_size: int) -> tf.Tensor:
    """Per row of a sequence feature's ids, how many ids it has, at most `max_sequence_length`.

    Args:
      ids: `[batch_size, T]` ids: sparse, ragged or dense (every row full).
      max_sequence_length: the feature's `max_sequence_length`.
      batch_size: the rows of `ids`.

    Returns:
      An int64 `[batch_size]` tensor.
    """
    if isinstance(ids, tf.SparseTensor):
        rows = ids.indices[:, 0]
        lengths = tf.math.bincount(tf.cast(rows, tf.int32), minlength=batch_size, maxlength=batch_size, dtype=tf.int64)
    elif isinstance(ids, tf.RaggedTensor):
        lengths = tf.cast(ids.row_lengths(), tf.int64)
    else:
        lengths = tf.fill([batch_size], tf.cast(tf.shape(ids)[1], tf.int64))
    return tf.minimum(lengths, max_sequence_length)
