"""Built-in data: Criteo click logs (TSV and TFRecord readers) and a synthetic Criteo-like generator.

Modules: `schema` (feature names and cardinalities, no TensorFlow), `criteo` (feature transform, readers),
`synthetic` (generator), `convert` (TSV -> TFRecord; on the command line `tpu-estimator data`).

The names below are imported on first use, so that importing `schema` does not import TensorFlow.
"""

from tpu_estimator import _lazy_names

_EXPORTS = {
    "convert_tsv_to_tfrecord": "convert",
    "CATEGORICAL_FEATURE_NAMES": "schema",
    "CRITEO_KAGGLE_CARDINALITIES": "schema",
    "DENSE_FEATURE_NAME": "schema",
    "NUM_CATEGORICAL_FEATURES": "schema",
    "NUM_DENSE_FEATURES": "schema",
    "TFRECORD_CATEGORICAL_KEYS": "schema",
    "TFRECORD_DENSE_KEYS": "schema",
    "TFRECORD_LABEL_KEY": "schema",
    "criteo_cardinalities": "schema",
    "MalformedLineCounter": "criteo",
    "criteo_tfrecord_dataset": "criteo",
    "criteo_tsv_dataset": "criteo",
    "missing_categorical_id": "criteo",
    "RawBatch": "synthetic",
    "SyntheticCriteo": "synthetic",
    "SyntheticCriteoSpec": "synthetic",
    "synthetic_criteo_dataset": "synthetic",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy_names.lazy_names(__name__, _EXPORTS)
