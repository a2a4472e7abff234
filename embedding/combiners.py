"""Combining looked-up embedding rows into activations, and the matching backward pass.

Both directions work from a `preprocessing.FeatureSegments` plan; each is one gather, one multiply by the gains
and one `unsorted_segment_sum`, so the cost follows the batch, never the vocabulary.
"""

from typing import Any, Mapping, Optional, Union

import tensorflow as tf

# Pure TensorFlow ops without data-dependent Python control flow: AutoGraph conversion would only cost
# seconds of tracing time in users' tf.functions.
_do_not_convert = tf.autograph.experimental.do_not_convert

__all__ = ['combine', 'combine_table', 'backprop', 'backprop_table', 'quantize']


@_do_not_convert
def quantize(rows: tf.Tensor, quantization_config: Any) -> tf.Tensor:
  """Simulated quantization of looked-up rows, as upstream's `QuantizationConfig`.

  `x = clip(x, lower, upper)`, `quantum = (upper - lower) / (num_buckets - 1)`,
  `x = floor((x - lower) / quantum + 0.5) * quantum + lower` (the grid has `num_buckets` points, both bounds on
  it). The gradient passes straight through (identity), as the engine applies gradients to the float32 rows.

  Args:
    rows: float rows `[U, dim]`.
    quantization_config: object with `num_buckets` (>= 2), `lower`, `upper`.

  Returns:
    The quantized rows, same shape and dtype.
  """
  num_buckets = int(quantization_config.num_buckets)
  if num_buckets < 2:
    raise ValueError(f'num_buckets is {num_buckets}, must be at least 2 for simulated quantization.')
  lower = tf.cast(quantization_config.lower, rows.dtype)
  upper = tf.cast(quantization_config.upper, rows.dtype)
  quantum = (upper - lower) / (num_buckets - 1)
  clipped = tf.clip_by_value(rows, lower, upper)
  quantized = tf.floor((clipped - lower) / quantum + 0.5) * quantum + lower
  return rows + tf.stop_gradient(quantized - rows)


def _dim(rows: tf.Tensor) -> Union[int, tf.Tensor]:
  static = rows.shape[-1] if rows.shape.rank is not None else None
  return int(static) if static is not None else tf.shape(rows)[-1]


@_do_not_convert
def combine(rows: tf.Tensor, segments: Any, quantization_config: Any = None) -> tf.Tensor:
  """Combines the looked-up unique rows of a table into one feature's activations.

  Args:
    rows: `[U, dim]` rows of `TableBatch.unique_ids` (in that order).
    segments: the feature's `FeatureSegments` (`unique_index`, `segment_ids`, `gains`, `num_segments`,
      `output_shape`).
    quantization_config: optional `QuantizationConfig`; rows are quantized (see `quantize`) before combining.

  Returns:
    Activations of shape `output_shape + [dim]`; output rows without ids are zeros.
  """
  rows = tf.convert_to_tensor(rows)
  if quantization_config is not None:
    rows = quantize(rows, quantization_config)
  dim = _dim(rows)
  gathered = tf.gather(rows, segments.unique_index) * tf.cast(segments.gains, rows.dtype)[:, tf.newaxis]
  if getattr(segments, 'sorted_segments', False):
    # Sorted segment sum is several times faster; it stops at the last non-empty row, so pad the rest.
    summed = tf.math.segment_sum(gathered, segments.segment_ids)
    summed = tf.pad(summed, [[0, segments.num_segments - tf.shape(summed)[0]], [0, 0]])
  else:
    summed = tf.math.unsorted_segment_sum(gathered, segments.segment_ids, segments.num_segments)
  return tf.reshape(summed, list(segments.output_shape) + [dim])


@_do_not_convert
def backprop(activation_grads: tf.Tensor, segments: Any,
             num_unique: Union[int, tf.Tensor]) -> tf.Tensor:
  """Gradient of `combine` w.r.t. the unique rows (quantization passes straight through).

  Args:
    activation_grads: gradient of the loss w.r.t. the activations, `output_shape + [dim]`.
    segments: the feature's `FeatureSegments`.
    num_unique: `U`, rows of the table batch (`TableBatch.num_unique`).

  Returns:
    `[U, dim]` gradient; add the results of all features sharing the table to get the table's gradient.
  """
  grads = tf.convert_to_tensor(activation_grads)
  dim = _dim(grads)
  flat = tf.reshape(grads, [-1, dim] if isinstance(dim, int) else tf.stack([-1, dim]))
  contributions = tf.gather(flat, segments.segment_ids) * tf.cast(segments.gains, flat.dtype)[:, tf.newaxis]
  return tf.math.unsorted_segment_sum(contributions, segments.unique_index, num_unique)


@_do_not_convert
def backprop_table(activation_grads: Mapping[str, Optional[tf.Tensor]], batch: Any) -> tf.Tensor:
  """Gradient w.r.t. the unique rows of a table from all its features: one segment sum instead of one each.

  Args:
    activation_grads: `{feature_key: gradient}` for (some of) `batch.features`; missing or None entries
      contribute nothing.
    batch: the `TableBatch`.

  Returns:
    `[U, dim]` gradient of the table's unique rows (`dim` taken from the gradients; `[U, 0]` when none given).
  """
  contributions, targets = [], []
  for key, segments in batch.features.items():
    grads = activation_grads.get(key)
    if grads is None:
      continue
    grads = tf.convert_to_tensor(grads)
    dim = _dim(grads)
    flat = tf.reshape(grads, [-1, dim] if isinstance(dim, int) else tf.stack([-1, dim]))
    contributions.append(tf.gather(flat, segments.segment_ids) * tf.cast(segments.gains, flat.dtype)[:, tf.newaxis])
    targets.append(segments.unique_index)
  if not contributions:
    return tf.zeros(tf.stack([batch.num_unique, 0]), tf.float32)
  return tf.math.unsorted_segment_sum(tf.concat(contributions, 0), tf.concat(targets, 0), batch.num_unique)


@_do_not_convert
def combine_table(rows: tf.Tensor, batch: Any, quantization_config: Optional[Any] = None) -> dict:
  """Combines every feature of a `TableBatch`: `{feature_key: activations}`.

  Args:
    rows: `[U, dim]` rows of `batch.unique_ids`.
    batch: a `TableBatch`.
    quantization_config: overrides `batch.table.quantization_config` when given.
  """
  if quantization_config is None and batch.table is not None:
    quantization_config = getattr(batch.table, 'quantization_config', None)
  rows = tf.convert_to_tensor(rows)
  if quantization_config is not None:
    rows = quantize(rows, quantization_config)  # Once per table, not once per feature.
  return {key: combine(rows, seg) for key, seg in batch.features.items()}
