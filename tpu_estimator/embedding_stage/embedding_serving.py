"""Embedding lookups off the shards: the CPU path and the exported serving graph.

Dict-configured embeddings become plain TensorFlow lookups on full tables (`serving_features`); feature-column
models look up their own variables with upstream's column code, after their ids passed training's range check
(`checked_column_features`). Neither touches the per-step bridge of the shards (`embedding_bridge.py`).
"""

import collections
from typing import Any

import tensorflow as tf

import embedding.serving
from tpu_estimator import _tf_internal
from tpu_estimator.embedding_stage import engine_inputs
from tpu_estimator.specs.embedding_spec import SEQUENCE_LENGTH_SUFFIX, EmbeddingConfigSpec, resolve_embedding_config

# Off the shards, model_fn's features come from input_fn (CPU path) or from the serving input receiver (export).
_SOURCE = "the features (of input_fn, or of the serving input receiver when exporting)"


def serving_features(spec: EmbeddingConfigSpec, features: Any) -> dict:
    """Features with the embedding activations computed by plain TensorFlow lookups on full tables.

    Used for the CPU path and export of dict-configured embeddings: one variable `[vocabulary, dim]` per table,
    named as the table's checkpoint key, so the export restores the logical tables of training checkpoints and any
    TensorFlow runtime serves the model. Ids are checked as training checks them (in `[0, vocabulary_size)`; an
    `InvalidArgumentError` names the feature and table), instead of the plain lookups' dropping of negative ids.

    Raises:
      ValueError: features is not a dict, or an embedding feature is missing.
    """
    resolved = resolve_embedding_config(spec)
    engine_inputs.check_embedding_features(resolved, features, _SOURCE)
    tables = {}
    for name, table in resolved.tables.items():
        tables[name] = tf.compat.v1.get_variable(
            name,
            shape=[table.vocabulary_size, table.dim],
            dtype=tf.float32,
            initializer=tf.compat.v1.zeros_initializer(),
            trainable=False,
        )
    inputs, weights = collections.OrderedDict(), collections.OrderedDict()
    for feature in resolved.features:
        sequence = feature.max_sequence_length > 0
        inputs[feature.key] = engine_inputs.as_engine_input(features[feature.key], sequence)
        weight = features.get(feature.weight_key) if feature.weight_key else None
        weights[feature.key] = engine_inputs.as_engine_input(weight, sequence) if weight is not None else None
    activations = embedding.serving.serving_embedding_lookup(
        inputs, weights, tables, resolved.feature_config, check_ids=True
    )
    result = {k: v for k, v in features.items() if k not in resolved.raw_keys}
    for feature in resolved.features:
        result[feature.key] = activations[feature.key]
        if feature.max_sequence_length:
            batch = tf.shape(activations[feature.key])[0]
            result[feature.key + SEQUENCE_LENGTH_SUFFIX] = engine_inputs.sequence_lengths(
                inputs[feature.key], feature.max_sequence_length, batch
            )
    return result


def checked_column_features(spec: EmbeddingConfigSpec, features: Any) -> Any:
    """`features` whose embedding columns' inputs are read only after their ids passed training's check.

    Off the shards, TPU embedding columns look up their own variables with upstream's CPU code, which silently
    drops negative ids; training on the shards refuses them. The ids each column produces from `features` (after
    its own transformation: e.g. the `-1` "missing" entries of dense int inputs are dropped, as in training) must be
    in `[0, vocabulary_size)`, or running the graph raises `InvalidArgumentError` naming the feature and table,
    with the message of training's check.

    Raises:
      ValueError: features is not a dict, or an input of an embedding column is missing.
    """
    resolved = resolve_embedding_config(spec)
    engine_inputs.check_embedding_features(resolved, features, _SOURCE)
    checked = dict(features)
    for feature in resolved.features:
        keys = _tf_internal.categorical_input_keys(feature.column.categorical_column)
        ids, _ = _tf_internal.categorical_ids(feature.column.categorical_column, features)
        vocabulary_size = resolved.tables[feature.table_name].vocabulary_size
        gate = embedding.serving.check_ids_in_range(ids, vocabulary_size, feature.key, feature.table_name)
        if gate is ids:  # Eager: checked already.
            continue
        for key in keys:
            checked[key] = _read_after(checked[key], gate)
    return checked


def _read_after(value: Any, gate: Any) -> Any:
    """`value` (dense, sparse or ragged) read after the ops producing `gate` have run."""
    return embedding.serving.read_after(value, gate.values if isinstance(gate, tf.SparseTensor) else gate)
