"""Criteo click-log schema, feature transform and `tf.data` readers.

The Criteo Kaggle / Terabyte click logs are tab-separated text, one example per line with 40 fields::

    label \\t I1 ... I13 \\t C1 ... C26

`label` is `0` or `1`; `I1..I13` are integer counts (may be empty = missing); `C1..C26` are categorical values
written as 8 lower-case hex characters (may be empty = missing).

Every reader here yields `(features, label)` batches with

* `features['dense']`: float32 `[B, 13]`, `log(1 + max(x, 0))`; a missing value gives 0.
* `features['cat_0']` .. `features['cat_25']`: int64 `[B]`, the raw string hashed into `[0, vocab_sizes[i])` with
  `tf.strings.to_hash_bucket_fast` (FarmHash Fingerprint64, stable across runs, machines and versions).
  A missing categorical value is hashed as the empty string, so it has one fixed id per feature
  (`missing_categorical_id(vocab_size)`); it is not a reserved id and may collide with a real value.
* `label`: float32 `[B]` (0.0 or 1.0).

TFRecord files hold one `tf.train.Example` per line of the TSV format, with the raw (untransformed) values:
`label` (int64, one value), `I1`..`I13` (int64, one value, the key absent when missing) and `C1`..`C26` (bytes,
one value, the key absent when missing). `tpu_estimator.app.data.convert` writes them from TSV files.

Malformed TSV lines (wrong field count, a label other than 0/1, a dense value that is not a decimal integer of
at most 18 digits) stop iteration with `tf.errors.InvalidArgumentError` whose message names the file and the
1-based line number (`path:17: ...`); with `skip_malformed=True` they are dropped, counted in a
`MalformedLineCounter` and the first few are logged.
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
from absl import logging

from tpu_estimator.app.data.schema import (  # noqa: F401 (re-exported)
    CATEGORICAL_FEATURE_NAMES,
    CRITEO_KAGGLE_CARDINALITIES,
    DENSE_FEATURE_NAME,
    NUM_CATEGORICAL_FEATURES,
    NUM_DENSE_FEATURES,
    TFRECORD_CATEGORICAL_KEYS,
    TFRECORD_DENSE_KEYS,
    TFRECORD_LABEL_KEY,
    TSV_NUM_FIELDS,
    criteo_cardinalities,
)
from tpu_estimator.app.data.tsv_lines import (  # noqa: F401 (re-exported; no TensorFlow there)
    _DENSE_REGEX,
    _MAX_DENSE_DIGITS,
    malformed_reason,
)

# Sentinel for a missing dense value when parsing tf.train.Example (TSV values never reach it).
_MISSING_DENSE = np.iinfo(np.int64).min

# Dataset functions here have no Python control flow on tensors: skip AutoGraph (it costs seconds per reader).
no_autograph = tf.autograph.experimental.do_not_convert

VocabSizes = Union[int, Sequence[int]]
FilePatterns = Union[str, Sequence[str]]


def resolve_vocab_sizes(vocab_sizes: Optional[VocabSizes]) -> List[int]:
    """Normalizes `vocab_sizes` (None = Kaggle cardinalities, an int = same for all) to a list of 26 ints."""
    if vocab_sizes is None:
        return list(CRITEO_KAGGLE_CARDINALITIES)
    if isinstance(vocab_sizes, (int, np.integer)):
        sizes = [int(vocab_sizes)] * NUM_CATEGORICAL_FEATURES
    else:
        sizes = [int(v) for v in vocab_sizes]
    if len(sizes) != NUM_CATEGORICAL_FEATURES:
        raise ValueError(f"vocab_sizes must have {NUM_CATEGORICAL_FEATURES} entries, got {len(sizes)}")
    for i, v in enumerate(sizes):
        if v < 1:
            raise ValueError(f"vocab_sizes[{i}] ({CATEGORICAL_FEATURE_NAMES[i]}) must be positive, got {v}")
    return sizes


def missing_categorical_id(vocab_size: int) -> int:
    """The id a missing categorical value gets in a feature of `vocab_size` ids (the hashed empty string)."""
    return int(tf.strings.to_hash_bucket_fast(tf.constant([""]), vocab_size).numpy()[0])


def raw_to_features(
    label: tf.Tensor, dense: tf.Tensor, dense_present: tf.Tensor, categorical: tf.Tensor, vocab_sizes: Sequence[int]
) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
    """Turns raw Criteo columns into model features (the transform every reader applies).

    Args:
      label: int `[B]`, 0 or 1.
      dense: int64 `[B, 13]` raw counts (any value where missing).
      dense_present: bool `[B, 13]`, False where the value is missing.
      categorical: string `[B, 26]` raw values, empty where missing.
      vocab_sizes: 26 hash bucket counts.

    Returns:
      `(features, label)` as described in the module docstring.
    """
    x = tf.cast(tf.maximum(dense, 0), tf.float32)
    dense_out = tf.where(dense_present, tf.math.log1p(x), tf.zeros_like(x))
    features = {DENSE_FEATURE_NAME: dense_out}
    columns = tf.unstack(categorical, num=NUM_CATEGORICAL_FEATURES, axis=1)
    for name, column, size in zip(CATEGORICAL_FEATURE_NAMES, columns, vocab_sizes):
        features[name] = tf.strings.to_hash_bucket_fast(column, size)
    return features, tf.cast(label, tf.float32)


class MalformedLineCounter:
    """Counts (and remembers the first few of) the malformed lines a reader skipped.

    Thread-safe. A dataset that is iterated several times (or repeated) counts a bad line each time it is read.
    """

    def __init__(self, max_logged: int = 10):
        self._lock = threading.Lock()
        self._count = 0
        self._messages: List[str] = []
        self._max_logged = max_logged

    @property
    def count(self) -> int:
        """Number of malformed lines skipped so far."""
        with self._lock:
            return self._count

    @property
    def messages(self) -> List[str]:
        """`path:line: reason` for `max_logged` of the skipped lines (batches are parsed in parallel, so these are
        the first ones seen, not necessarily the first in file order)."""
        with self._lock:
            return list(self._messages)

    def reset(self) -> None:
        with self._lock:
            self._count = 0
            self._messages = []

    def _record(self, messages: np.ndarray) -> np.int64:
        with self._lock:
            self._count += len(messages)
            room = self._max_logged - len(self._messages)
            new = [m.decode("utf-8", "replace") for m in messages[: max(room, 0)]]
            self._messages.extend(new)
        for m in new:
            logging.warning("Skipping malformed Criteo line %s", m)
        return np.int64(len(messages))


def _bad_line_messages(
    lines: np.ndarray, filenames: np.ndarray, linenos: np.ndarray, allow_unlabeled: bool = False
) -> np.ndarray:
    """`path:line: reason` for malformed lines (runs in Python, only for batches that have some)."""
    out = []
    for line, filename, lineno in zip(lines, filenames, linenos):
        reason = malformed_reason(line.decode("utf-8", "replace"), allow_unlabeled) or "malformed line"
        out.append(f"{filename.decode('utf-8', 'replace')}:{lineno}: {reason}".encode("utf-8"))
    return np.array(out, dtype=object)


def parse_tsv_lines(
    lines: tf.Tensor,
    filenames: tf.Tensor,
    linenos: tf.Tensor,
    skip_malformed: bool = False,
    counter: Optional[MalformedLineCounter] = None,
    allow_unlabeled: bool = False,
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Parses a batch of Criteo TSV lines into raw columns.

    Args:
      lines: string `[B]`, lines without the line terminator.
      filenames: string `[B]`, the file each line came from (for error messages).
      linenos: int64 `[B]`, 1-based line numbers (for error messages).
      skip_malformed: drop malformed lines instead of failing.
      counter: where skipped lines are counted (only with `skip_malformed`).
      allow_unlabeled: accept lines without a label (39 fields) or with an empty one; their label is -1.

    Returns:
      `(label int64 [N] (-1 = no label), dense int64 [N, 13], dense_present bool [N, 13], categorical string [N, 26])` where
      N = B, or the number of well-formed lines with `skip_malformed`.

    Raises:
      tf.errors.InvalidArgumentError (when the tensors are evaluated): a malformed line without `skip_malformed`.
    """
    split = tf.strings.split(lines, "\t")
    num_fields = split.row_lengths()
    if allow_unlabeled:  # a missing label becomes an empty first field
        unlabeled = tf.equal(num_fields, TSV_NUM_FIELDS - 1)
        split = tf.strings.split(tf.where(unlabeled, tf.strings.join(["", lines], "\t"), lines), "\t")
        num_fields = split.row_lengths()
    fields = split.to_tensor(default_value="", shape=[None, TSV_NUM_FIELDS])
    label_s = fields[:, 0]
    label_ok = tf.logical_or(tf.equal(label_s, "0"), tf.equal(label_s, "1"))
    if allow_unlabeled:
        label_ok = tf.logical_or(label_ok, tf.equal(label_s, ""))
    dense_s = fields[:, 1 : 1 + NUM_DENSE_FEATURES]
    dense_present = tf.not_equal(dense_s, "")
    dense_ok = tf.logical_or(tf.logical_not(dense_present), tf.strings.regex_full_match(dense_s, _DENSE_REGEX))
    ok = tf.logical_and(tf.logical_and(tf.equal(num_fields, TSV_NUM_FIELDS), label_ok), tf.reduce_all(dense_ok, axis=1))
    all_ok = tf.reduce_all(ok)

    def messages():
        bad = tf.logical_not(ok)
        return tf.numpy_function(
            lambda *args: _bad_line_messages(*args, allow_unlabeled=allow_unlabeled),
            [tf.boolean_mask(lines, bad), tf.boolean_mask(filenames, bad), tf.boolean_mask(linenos, bad)],
            tf.string,
            stateful=False,
        )

    if skip_malformed:
        counter = counter if counter is not None else _DEFAULT_COUNTER

        def report():
            return tf.numpy_function(counter._record, [messages()], tf.int64, stateful=True)

        reported = tf.cond(all_ok, lambda: tf.constant(0, tf.int64), report)
        with tf.control_dependencies([reported]):
            fields = tf.boolean_mask(fields, ok)
            dense_present = tf.boolean_mask(dense_present, ok)
    else:

        def fail():
            with tf.control_dependencies([tf.debugging.Assert(False, [messages()[0]])]):
                return tf.constant(False)

        checked = tf.cond(all_ok, lambda: tf.constant(True), fail)
        with tf.control_dependencies([checked]):
            fields = tf.identity(fields)
        fields.set_shape([lines.shape[0], TSV_NUM_FIELDS])
        dense_present.set_shape([lines.shape[0], NUM_DENSE_FEATURES])
    label = tf.cast(tf.equal(fields[:, 0], "1"), tf.int64)
    if allow_unlabeled:
        label = tf.where(tf.equal(fields[:, 0], ""), tf.constant(-1, tf.int64), label)
    dense_s = fields[:, 1 : 1 + NUM_DENSE_FEATURES]
    dense = tf.strings.to_number(tf.where(dense_present, dense_s, "0"), out_type=tf.int64)
    categorical = fields[:, 1 + NUM_DENSE_FEATURES :]
    return label, dense, dense_present, categorical


# Used when skip_malformed is set and no counter is passed: skipped lines are still logged.
_DEFAULT_COUNTER = MalformedLineCounter()


def list_files(file_patterns: FilePatterns) -> List[str]:
    """Expands glob patterns (or plain paths) into a sorted, de-duplicated list of files.

    Raises:
      ValueError: a pattern matches nothing.
    """
    if isinstance(file_patterns, (str, bytes)):
        file_patterns = [file_patterns]
    files = []
    for pattern in file_patterns:
        pattern = pattern.decode() if isinstance(pattern, bytes) else str(pattern)
        matched = tf.io.gfile.glob(pattern)
        if not matched:
            raise ValueError(f"No files match {pattern!r}")
        files.extend(matched)
    return sorted(set(files))


def check_sharding(input_pipeline_id: int, num_pipelines: int) -> None:
    """Raises ValueError unless `0 <= input_pipeline_id < num_pipelines` (an input pipeline's shard of the files)."""
    if num_pipelines < 1 or not 0 <= input_pipeline_id < num_pipelines:
        raise ValueError(
            f"Need 0 <= input_pipeline_id < num_pipelines, got input_pipeline_id={input_pipeline_id}, "
            f"num_pipelines={num_pipelines}"
        )


# A numbered record's position: its file's index in the sorted list above the low bits, its 1-based line below.
_POSITION_LINE_BITS = 40


def _record_dataset(
    file_patterns: FilePatterns,
    make_reader,
    *,
    numbered: bool,
    shuffle: bool,
    seed: Optional[int],
    input_pipeline_id: int,
    num_pipelines: int,
) -> Tuple[tf.data.Dataset, List[str]]:
    """This pipeline's share of the records of the files, and the sorted list of the files.

    Elements are records, or with `numbered` `(position, record)`, where `position` (int64) holds the file's index in
    the returned list above `_POSITION_LINE_BITS` bits and the 1-based record number below them (`record_origin`
    decodes a batch of them). So a numbered reader takes fewer than 2^23 files, and reads at most 2^40 - 1 records of
    a file. Records pass through no function of their own: a per-record `map` that dropped the numbers again made
    the TFRecord reader 9x slower (about 25k against 230k examples/s, TF 2.15, 1024-record batches).

    Without `shuffle`, files are read one after the other in sorted order, records in file order.
    With at least `num_pipelines` files each pipeline reads files `input_pipeline_id::num_pipelines`; with fewer
    files every pipeline reads all of them and keeps every `num_pipelines`-th record (file order then not
    shuffled, so the pipelines split the records exactly).
    """
    check_sharding(input_pipeline_id, num_pipelines)
    all_files = list_files(file_patterns)
    if numbered and len(all_files) >= 1 << (63 - _POSITION_LINE_BITS):
        raise ValueError(
            f"{len(all_files)} files match {file_patterns!r}: a numbered reader takes fewer than "
            f"{1 << (63 - _POSITION_LINE_BITS)}; concatenate files"
        )
    shard_files = len(all_files) >= num_pipelines
    indices = list(range(len(all_files)))
    if shard_files:
        indices = indices[input_pipeline_id::num_pipelines]
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.constant([all_files[i] for i in indices], tf.string), tf.constant(indices, tf.int64))
    )
    if shuffle and shard_files and len(indices) > 1:
        ds = ds.shuffle(len(indices), seed=seed, reshuffle_each_iteration=True)

    def read(filename, index):
        records = make_reader(filename)
        if not numbered:
            return records
        first = tf.bitwise.left_shift(index, _POSITION_LINE_BITS) + 1
        positions = tf.data.Dataset.range(first, first + (1 << _POSITION_LINE_BITS) - 1)
        return tf.data.Dataset.zip((positions, records))

    if shuffle and len(indices) > 1:
        # Mix examples of several files (deterministically, so line sharding stays exact).
        ds = ds.interleave(
            no_autograph(read),
            cycle_length=min(len(indices), 8),
            block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    else:
        ds = ds.flat_map(no_autograph(read))  # files one after the other, in sorted order
    if not shard_files and num_pipelines > 1:
        ds = ds.shard(num_pipelines, input_pipeline_id)
    return ds, all_files


def record_origin(positions: tf.Tensor, files: Sequence[str]) -> Tuple[tf.Tensor, tf.Tensor]:
    """`(filenames string [B], 1-based line numbers int64 [B])` of numbered records' `positions` (see
    `_record_dataset`)."""
    file_index = tf.bitwise.right_shift(positions, _POSITION_LINE_BITS)
    line = tf.bitwise.bitwise_and(positions, (1 << _POSITION_LINE_BITS) - 1)
    return tf.gather(tf.constant(list(files), tf.string), file_index), line


def _finish(
    ds: tf.data.Dataset, *, shuffle: bool, shuffle_buffer_size: int, seed: Optional[int], num_epochs: Optional[int]
) -> tf.data.Dataset:
    if shuffle:
        ds = ds.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    return _repeat(ds, num_epochs)


def _repeat(ds: tf.data.Dataset, num_epochs: Optional[int]) -> tf.data.Dataset:
    if num_epochs is None:
        ds = ds.repeat()
    elif num_epochs != 1:
        if num_epochs < 1:
            raise ValueError(f"num_epochs must be positive or None, got {num_epochs}")
        ds = ds.repeat(num_epochs)
    return ds


def tsv_raw_dataset(
    file_patterns: FilePatterns,
    batch_size: int,
    *,
    skip_malformed: bool = False,
    malformed_counter: Optional[MalformedLineCounter] = None,
    shuffle: bool = False,
    shuffle_buffer_size: int = 10000,
    seed: Optional[int] = None,
    num_epochs: Optional[int] = 1,
    input_pipeline_id: int = 0,
    num_pipelines: int = 1,
    compression_type: Optional[str] = None,
    drop_remainder: bool = False,
    allow_unlabeled: bool = False,
) -> tf.data.Dataset:
    """Batches of raw columns `(label, dense, dense_present, categorical)` (see `parse_tsv_lines`).

    Batches are at most `batch_size` long: shorter where malformed lines were skipped, and at the end unless
    `drop_remainder` (which drops the last partial batch of lines, before skipping). With `skip_malformed` the
    passes over the data are repeated after the skipping, batches left empty are dropped, and each pass ends with
    its partial batch: a pass without a well-formed line gives nothing, so repeating ends instead of reading the
    files forever.
    """
    ds, files = _record_dataset(
        file_patterns,
        lambda f: tf.data.TextLineDataset(f, compression_type=compression_type),
        numbered=True,
        shuffle=shuffle,
        seed=seed,
        input_pipeline_id=input_pipeline_id,
        num_pipelines=num_pipelines,
    )
    parse = no_autograph(
        lambda position, line: parse_tsv_lines(
            line, *record_origin(position, files), skip_malformed, malformed_counter, allow_unlabeled
        )
    )
    if not skip_malformed:
        ds = _finish(ds, shuffle=shuffle, shuffle_buffer_size=shuffle_buffer_size, seed=seed, num_epochs=num_epochs)
        ds = ds.batch(batch_size, drop_remainder=drop_remainder)
        return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = _finish(ds, shuffle=shuffle, shuffle_buffer_size=shuffle_buffer_size, seed=seed, num_epochs=1)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.filter(lambda label, *columns: tf.size(label) > 0)
    return _repeat(ds, num_epochs)


def criteo_tsv_dataset(
    file_patterns: FilePatterns,
    batch_size: int,
    vocab_sizes: Optional[VocabSizes] = None,
    *,
    drop_remainder: bool = False,
    shuffle: bool = False,
    shuffle_buffer_size: int = 10000,
    seed: Optional[int] = None,
    num_epochs: Optional[int] = 1,
    input_pipeline_id: int = 0,
    num_pipelines: int = 1,
    skip_malformed: bool = False,
    malformed_counter: Optional[MalformedLineCounter] = None,
    compression_type: Optional[str] = None,
    allow_unlabeled: bool = False,
) -> tf.data.Dataset:
    """Reads Criteo TSV files into `(features, label)` batches.

    Args:
      file_patterns: a path or glob pattern, or a list of them.
      batch_size: examples per batch.
      vocab_sizes: hash buckets per categorical feature: 26 ints, one int for all, or None for the Kaggle
        cardinalities.
      drop_remainder: drop a last partial batch (gives static batch shapes, needed on shards).
      shuffle: shuffle file order and examples (through a `shuffle_buffer_size` buffer).
      shuffle_buffer_size: examples in the shuffle buffer.
      seed: shuffle seed.
      num_epochs: passes over the data; None repeats forever.
      input_pipeline_id: this pipeline's index (e.g. `params['context'].current_input_fn_deployment()[1]`).
      num_pipelines: number of pipelines (hosts) reading the same files; each reads a disjoint share.
      skip_malformed: skip malformed lines (counted in `malformed_counter`, first ones logged) instead of failing.
      malformed_counter: counter for skipped lines.
      compression_type: None, '', 'GZIP' or 'ZLIB'.
      allow_unlabeled: accept lines without a label (39 fields, as Criteo's `test.txt`); their label is -1.

    Returns:
      A `tf.data.Dataset` of `(features, label)`; see the module docstring.
    """
    sizes = resolve_vocab_sizes(vocab_sizes)
    ds = tsv_raw_dataset(
        file_patterns,
        batch_size,
        skip_malformed=skip_malformed,
        malformed_counter=malformed_counter,
        shuffle=shuffle,
        shuffle_buffer_size=shuffle_buffer_size,
        seed=seed,
        num_epochs=num_epochs,
        input_pipeline_id=input_pipeline_id,
        num_pipelines=num_pipelines,
        compression_type=compression_type,
        drop_remainder=drop_remainder and not skip_malformed,
        allow_unlabeled=allow_unlabeled,
    )
    if skip_malformed:
        # Skipped lines make batches short: regroup into full batches.
        ds = ds.rebatch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(
        no_autograph(lambda *raw: raw_to_features(*raw, sizes)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def _example_spec(allow_unlabeled: bool = False) -> Dict[str, tf.io.FixedLenFeature]:
    label_default = -1 if allow_unlabeled else None
    spec = {TFRECORD_LABEL_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=label_default)}
    for key in TFRECORD_DENSE_KEYS:
        spec[key] = tf.io.FixedLenFeature([], tf.int64, default_value=_MISSING_DENSE)
    for key in TFRECORD_CATEGORICAL_KEYS:
        spec[key] = tf.io.FixedLenFeature([], tf.string, default_value="")
    return spec


def parse_examples(
    serialized: tf.Tensor, allow_unlabeled: bool = False
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Parses serialized Criteo `tf.train.Example`s into raw columns (as `parse_tsv_lines` returns); with
    `allow_unlabeled` an example without `label` gets -1."""
    parsed = tf.io.parse_example(serialized, _example_spec(allow_unlabeled))
    dense = tf.stack([parsed[k] for k in TFRECORD_DENSE_KEYS], axis=1)
    present = tf.not_equal(dense, _MISSING_DENSE)
    categorical = tf.stack([parsed[k] for k in TFRECORD_CATEGORICAL_KEYS], axis=1)
    return parsed[TFRECORD_LABEL_KEY], tf.where(present, dense, tf.zeros_like(dense)), present, categorical


def criteo_tfrecord_dataset(
    file_patterns: FilePatterns,
    batch_size: int,
    vocab_sizes: Optional[VocabSizes] = None,
    *,
    drop_remainder: bool = False,
    shuffle: bool = False,
    shuffle_buffer_size: int = 10000,
    seed: Optional[int] = None,
    num_epochs: Optional[int] = 1,
    input_pipeline_id: int = 0,
    num_pipelines: int = 1,
    compression_type: Optional[str] = None,
    allow_unlabeled: bool = False,
) -> tf.data.Dataset:
    """Reads Criteo `tf.train.Example` TFRecord files into `(features, label)` batches.

    Arguments as for `criteo_tsv_dataset`. The record keys are listed in the module docstring.
    """
    sizes = resolve_vocab_sizes(vocab_sizes)
    ds, _ = _record_dataset(
        file_patterns,
        lambda f: tf.data.TFRecordDataset(f, compression_type=compression_type),
        numbered=False,
        shuffle=shuffle,
        seed=seed,
        input_pipeline_id=input_pipeline_id,
        num_pipelines=num_pipelines,
    )
    ds = _finish(ds, shuffle=shuffle, shuffle_buffer_size=shuffle_buffer_size, seed=seed, num_epochs=num_epochs)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(
        no_autograph(lambda rec: raw_to_features(*parse_examples(rec, allow_unlabeled), sizes)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def raw_to_example(
    label: int, dense: Sequence[int], dense_present: Sequence[bool], categorical: Sequence[bytes]
) -> tf.train.Example:
    """Builds the `tf.train.Example` of one raw Criteo row (missing values leave their key out)."""
    feature = {TFRECORD_LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}
    for key, value, present in zip(TFRECORD_DENSE_KEYS, dense, dense_present):
        if present:
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))
    for key, value in zip(TFRECORD_CATEGORICAL_KEYS, categorical):
        if value:
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(value)]))
    return tf.train.Example(features=tf.train.Features(feature=feature))
