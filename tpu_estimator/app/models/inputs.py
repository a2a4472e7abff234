"""Input functions of the built-in models: synthetic, TSV or TFRecord Criteo data from a `Config`.

`make_input_fn(config, mode)` returns `input_fn(params)` for `TPUEstimator`: batches of `params['batch_size']`
(per shard with PER_HOST_V2), static shapes (`drop_remainder`) for training and evaluation, and the files or
synthetic blocks shared between hosts by `params['context'].current_input_fn_deployment()`.

Synthetic data: training reads examples `[0, data.num_examples)` (repeated) or an endless stream; evaluation reads
`data.eval_num_examples` examples drawn after the training ones (from example `data.num_examples`, or from
`SYNTHETIC_EVAL_START` when training streams).
"""

import functools
import json
import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import tensorflow as tf

from tpu_estimator import estimator as tf_estimator
from tpu_estimator.app import config_file
from tpu_estimator.app.data import criteo, synthetic
from tpu_estimator.inputs import input_position

ModeKeys = tf_estimator.ModeKeys
# First synthetic evaluation example when training streams endlessly (far beyond any training run).
SYNTHETIC_EVAL_START = 2**49
FeatureTransform = Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]]


@functools.lru_cache(maxsize=8)
def _generator(seed: int, max_vocab: Optional[int]) -> synthetic.SyntheticCriteo:
    cardinalities = tuple(criteo.criteo_cardinalities(max_vocab=max_vocab))
    return synthetic.SyntheticCriteo(synthetic.SyntheticCriteoSpec(seed=seed, cardinalities=cardinalities))


def synthetic_generator(data: config_file.DataConfig) -> synthetic.SyntheticCriteo:
    """The generator of `data` (Criteo cardinalities capped at `data.max_vocab`)."""
    return _generator(data.seed, data.max_vocab)


def synthetic_eval_start(data: config_file.DataConfig) -> int:
    """Index of the first synthetic evaluation example."""
    return data.num_examples if data.num_examples is not None else SYNTHETIC_EVAL_START


def file_format(paths: Sequence[str], default: str) -> str:
    """'tsv' or 'tfrecord' from the file names (`.tsv`, `.txt`, `.tfrecord`, `.tfrecords`, optionally `.gz`)."""
    kinds = set()
    for path in paths:
        name = path[:-3] if path.endswith(".gz") else path
        if name.endswith((".tsv", ".txt")):
            kinds.add("tsv")
        elif name.endswith((".tfrecord", ".tfrecords")):
            kinds.add("tfrecord")
    if len(kinds) == 1:
        return kinds.pop()
    return default


def _pipeline(params: Dict[str, Any]) -> Tuple[int, int]:
    """`(input_pipeline_id, num_pipelines)` of this `input_fn` call (one pipeline off the shards)."""
    context = params.get("context")
    if context is None:
        return 0, 1
    _, index, total, _ = context.current_input_fn_deployment()
    return index, total


def file_dataset(
    paths: Sequence[str],
    source: str,
    batch_size: int,
    data: config_file.DataConfig,
    *,
    training: bool,
    drop_remainder: bool,
    pipeline: Tuple[int, int] = (0, 1),
    compression: Optional[str] = None,
    allow_unlabeled: bool = False,
) -> tf.data.Dataset:
    """`(features, label)` batches read from Criteo TSV or TFRecord files (label -1: none, with
    `allow_unlabeled`)."""
    kwargs = dict(
        vocab_sizes=data.resolved_vocab_sizes(),
        drop_remainder=drop_remainder,
        shuffle=training and data.shuffle,
        shuffle_buffer_size=data.shuffle_buffer_size,
        seed=data.seed,
        num_epochs=None if training else 1,
        input_pipeline_id=pipeline[0],
        num_pipelines=pipeline[1],
        compression_type=data.compression if compression is None else compression,
        allow_unlabeled=allow_unlabeled,
    )
    if source == "tsv":
        return criteo.criteo_tsv_dataset(paths, batch_size, skip_malformed=data.skip_malformed, **kwargs)
    if source == "tfrecord":
        return criteo.criteo_tfrecord_dataset(paths, batch_size, **kwargs)
    raise ValueError(f"unknown file format {source!r} (expected tsv or tfrecord)")


def synthetic_rows_dataset(
    data: config_file.DataConfig,
    start: int,
    num_examples: int,
    batch_size: int,
    *,
    drop_remainder: bool,
    pipeline: Tuple[int, int] = (0, 1),
) -> tf.data.Dataset:
    """`(features, label)` batches of synthetic examples `[start, start + num_examples)` (pipeline p: rows p::P)."""
    raw = synthetic_generator(data).generate(num_examples, start)
    index, total = pipeline
    columns = (
        raw.label[index::total],
        raw.dense[index::total],
        raw.dense_present[index::total],
        raw.categorical[index::total],
    )
    sizes = data.resolved_vocab_sizes()
    ds = tf.data.Dataset.from_tensor_slices(columns).batch(batch_size, drop_remainder=drop_remainder)
    return ds.map(
        lambda *cols: criteo.raw_to_features(*cols, sizes), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).prefetch(tf.data.AUTOTUNE)


def dataset(
    config: config_file.Config, mode: str, batch_size: int, pipeline: Tuple[int, int] = (0, 1)
) -> tf.data.Dataset:
    """`(features, label)` batches of the config's training (TRAIN) or evaluation (EVAL, PREDICT) data."""
    data = config.data
    training = mode == ModeKeys.TRAIN
    drop_remainder = mode != ModeKeys.PREDICT
    if data.source == "synthetic":
        if training:
            return synthetic_generator(data).dataset(
                batch_size,
                data.num_examples,
                data.resolved_vocab_sizes(),
                drop_remainder=True,
                num_epochs=None,
                input_pipeline_id=pipeline[0],
                num_pipelines=pipeline[1],
            )
        return synthetic_rows_dataset(
            data,
            synthetic_eval_start(data),
            data.eval_num_examples,
            batch_size,
            drop_remainder=drop_remainder,
            pipeline=pipeline,
        )
    paths = data.train_paths if training else (data.eval_paths or data.train_paths)
    return file_dataset(
        paths, data.source, batch_size, data, training=training, drop_remainder=drop_remainder, pipeline=pipeline
    )


def make_input_fn(
    config: config_file.Config,
    mode: str,
    transform: Optional[FeatureTransform] = None,
    checkpoint_position: bool = True,
) -> Callable[[Dict[str, Any]], tf.data.Dataset]:
    """`input_fn(params)` of the config's data for `mode` (PREDICT: evaluation data without labels).

    Args:
      config: the run configuration.
      mode: a `tf.estimator.ModeKeys` value.
      transform: applied to the features of every batch (the model's `prepare_features`).
      checkpoint_position: TRAIN: checkpoints hold the input's position, and a run resumes reading there
        (`input_position.checkpoint_position`); not with one process per host (`TF_CONFIG` naming several tasks),
        where only the chief writes checkpoints.
    """

    def input_fn(params):
        ds = dataset(config, mode, params["batch_size"], _pipeline(params))
        ds = _finish(ds, transform, with_labels=mode != ModeKeys.PREDICT)
        # Eagerly (the input_fn called by hand to look at its batches) there is no graph and no checkpoint to mark.
        if checkpoint_position and mode == ModeKeys.TRAIN and not one_process_per_host() and not tf.executing_eagerly():
            # Checkpoints hold the training input's position: a resumed run reads on where the checkpoint stood.
            ds = input_position.checkpoint_position(ds)
        return ds

    return input_fn


def one_process_per_host() -> bool:
    """Whether `TF_CONFIG` makes this process one of several hosts each building its own graph (then only the
    chief writes checkpoints, and the other hosts' input positions could not be saved in them)."""
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}
    except ValueError:
        return False
    return sum(len(tasks) for job, tasks in cluster.items() if job != "ps") > 1


def make_file_input_fn(
    paths: Sequence[str],
    source: str,
    data: config_file.DataConfig,
    transform: Optional[FeatureTransform] = None,
    with_labels: bool = False,
    max_rows: Optional[int] = None,
    allow_unlabeled: bool = False,
) -> Callable[[Dict[str, Any]], tf.data.Dataset]:
    """`input_fn(params)` reading `paths` once, in order (for `predict`; `allow_unlabeled`: rows without a label
    are read, label -1)."""
    compression = "GZIP" if all(p.endswith(".gz") for p in paths) else ""

    def input_fn(params):
        ds = file_dataset(
            paths,
            source,
            params["batch_size"],
            data,
            training=False,
            drop_remainder=False,
            compression=compression,
            allow_unlabeled=allow_unlabeled,
        )
        if max_rows is not None:
            ds = ds.unbatch().take(max_rows).batch(params["batch_size"])
        return _finish(ds, transform, with_labels)

    return input_fn


def _finish(ds: tf.data.Dataset, transform: Optional[FeatureTransform], with_labels: bool) -> tf.data.Dataset:
    if transform is None:
        return ds if with_labels else ds.map(lambda features, label: features)
    if with_labels:
        return ds.map(lambda features, label: (transform(features), label))
    return ds.map(lambda features, label: transform(features))


def count_records(paths: Sequence[str], source: str, compression: str = "") -> int:
    """Number of examples in Criteo TSV or TFRecord files (reads them once)."""
    files = criteo.list_files(paths)
    if source == "tsv":
        ds = tf.data.TextLineDataset(files, compression_type=compression)
    else:
        ds = tf.data.TFRecordDataset(files, compression_type=compression)
    return int(ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())


def eval_steps(config: config_file.Config) -> int:
    """`eval.steps`, or the full batches in the evaluation data when it is None."""
    if config.eval.steps is not None:
        return config.eval.steps
    data = config.data
    if data.source == "synthetic":
        examples = data.eval_num_examples
    else:
        examples = count_records(data.eval_paths or data.train_paths, data.source, data.compression)
    steps = examples // config.eval.batch_size
    if steps < 1:
        raise ValueError(f"eval.batch_size: {config.eval.batch_size} is larger than the {examples} evaluation examples")
    return steps


def serving_input_receiver_fn(transform: Optional[FeatureTransform] = None) -> Callable[[], Any]:
    """The serving input: `dense` float32 `[B, 13]` (log-transformed) and `cat_0..cat_25` int64 `[B]` ids.

    The inputs are what the readers produce (`tpu_estimator.app.data.criteo`): hashing and `log1p` happen before.
    """

    def receiver_fn():
        inputs = {
            criteo.DENSE_FEATURE_NAME: tf.compat.v1.placeholder(
                tf.float32, [None, criteo.NUM_DENSE_FEATURES], name=criteo.DENSE_FEATURE_NAME
            )
        }
        for name in criteo.CATEGORICAL_FEATURE_NAMES:
            inputs[name] = tf.compat.v1.placeholder(tf.int64, [None], name=name)
        features = transform(inputs) if transform else dict(inputs)
        return tf_estimator.export.ServingInputReceiver(features, inputs)

    return receiver_fn
