"""`predict` of the command line: rows in, predictions out (from a SavedModel or the estimator checkpoint)."""

import csv
import json
import os
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from tpu_estimator.app import config_file, models
from tpu_estimator.app.data import criteo
from tpu_estimator.app.models import inputs

CONFIG_ASSET = "tpu_estimator_config.yaml"


def export_config_path(export_dir: str) -> str:
    """Where the `export` command saves the config in a SavedModel (`assets.extra/tpu_estimator_config.yaml`)."""
    return os.path.join(export_dir, "assets.extra", CONFIG_ASSET)


def rows_dataset(
    config: config_file.Config,
    batch_size: int,
    paths: Optional[Sequence[str]] = None,
    input_format: Optional[str] = None,
    max_rows: Optional[int] = None,
) -> tf.data.Dataset:
    """`(features, label)` batches of `paths` (read once, in order), or of the config's evaluation data."""
    if paths:
        try:
            paths = criteo.list_files(paths)
        except ValueError as e:
            raise FileNotFoundError(f"--input: {e}") from None
        source = globals()["input_format"](paths, input_format, config)
        ds = inputs.make_file_input_fn(paths, source, config.data, with_labels=True, allow_unlabeled=True)(
            {"batch_size": batch_size}
        )
    elif config.data.source == "synthetic":
        n = min(max_rows, config.data.eval_num_examples) if max_rows else config.data.eval_num_examples
        ds = inputs.synthetic_rows_dataset(
            config.data, inputs.synthetic_eval_start(config.data), n, batch_size, drop_remainder=False
        )
    else:
        ds = inputs.file_dataset(
            config.data.eval_paths or config.data.train_paths,
            config.data.source,
            batch_size,
            config.data,
            training=False,
            drop_remainder=False,
        )
    if max_rows is not None:
        ds = ds.unbatch().take(max_rows).batch(batch_size)
    return ds


def input_format(paths: Sequence[str], flag_format: Optional[str], config: config_file.Config) -> str:
    """The format of predict's `--input`: `--input_format`, else from the file names, else the config's source."""
    return flag_format or inputs.file_format(paths, config.data.source if config.data.source != "synthetic" else "tsv")


def check_input(patterns: Sequence[str], flag_format: Optional[str], config: config_file.Config) -> None:
    """`--input` names existing files in the format predict will read them as (empty files are fine).

    Raises:
      CliError: naming the file.
    """
    from tpu_estimator.app.data import files

    paths = files.expand(patterns, "--input")
    files.check_files(paths, input_format(paths, flag_format, config), "--input", config.data.compression, True)


def labels_of(ds: tf.data.Dataset) -> np.ndarray:
    """The labels of every batch of `ds`, concatenated."""
    labels = [label.numpy() for _, label in ds] if ds is not None else []
    return np.concatenate(labels) if labels else np.zeros([0])


def predict_from_export(export_dir: str, ds: tf.data.Dataset) -> Dict[str, np.ndarray]:
    """Serves the rows of `ds` with the SavedModel's `serving_default` signature (`tf.saved_model.load`)."""
    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures[tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
    outputs: Dict[str, List[np.ndarray]] = {}
    for features, _ in ds:
        for key, value in serve(**features).items():
            outputs.setdefault(key, []).append(value.numpy())
    return {key: np.concatenate(values) for key, values in outputs.items()}


def predict_from_checkpoint(config: config_file.Config, model_dir: str, ds_fn) -> Dict[str, np.ndarray]:
    """`TPUEstimator.predict` from the latest checkpoint in `model_dir` on the rows of `ds_fn(batch_size)`."""
    estimator = models.make_estimator(config, model_dir)
    transform = models.model_module(config).prepare_features

    def input_fn(params):
        return ds_fn(params["batch_size"]).map(lambda features, label: transform(features) if transform else features)

    rows = list(estimator.predict(input_fn, yield_single_examples=True))
    return {key: np.array([r[key] for r in rows]) for key in (rows[0] if rows else {})}


def write_predictions(path: str, predictions: Dict[str, np.ndarray], labels: np.ndarray) -> None:
    """Writes one row per example: CSV (`.csv`, with a header) or JSON lines (anything else)."""
    keys = sorted(predictions)
    rows = iter_rows(predictions, labels)
    tf.io.gfile.makedirs(os.path.dirname(os.path.abspath(path)))
    with open(path, "w", newline="", encoding="utf-8") as f:
        if path.endswith(".csv"):
            writer = csv.writer(f)
            writer.writerow(["row", "label"] + keys)
            for row in rows:
                label = "" if row["label"] is None else row["label"]
                writer.writerow([row["row"], label] + [repr(row[k]) for k in keys])
        else:
            for row in rows:
                f.write(json.dumps(row) + "\n")


def iter_rows(predictions: Dict[str, np.ndarray], labels: np.ndarray) -> Iterator[dict]:
    """`{row, label, logit, probability}` per example (plain Python values)."""
    keys = sorted(predictions)
    n = len(predictions[keys[0]]) if keys else 0
    for i in range(n):
        row = {"row": i, "label": int(labels[i]) if i < len(labels) and labels[i] >= 0 else None}
        row.update({k: float(predictions[k][i]) for k in keys})
        yield row
