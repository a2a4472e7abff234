"""Built-in data: Criteo click logs (TSV and TFRecord readers) and a synthetic Criteo-like generator.

Modules: `criteo` (schema, feature transform, readers), `synthetic` (generator), `convert` (TSV -> TFRecord,
also `python -m tpu_estimator.app.data.convert`).
"""

from tpu_estimator.app.data.convert import convert_tsv_to_tfrecord
from tpu_estimator.app.data.criteo import (
    CATEGORICAL_FEATURE_NAMES,
    CRITEO_KAGGLE_CARDINALITIES,
    DENSE_FEATURE_NAME,
    NUM_CATEGORICAL_FEATURES,
    NUM_DENSE_FEATURES,
    TFRECORD_CATEGORICAL_KEYS,
    TFRECORD_DENSE_KEYS,
    TFRECORD_LABEL_KEY,
    MalformedLineCounter,
    criteo_cardinalities,
    criteo_tfrecord_dataset,
    criteo_tsv_dataset,
    missing_categorical_id,
)
from tpu_estimator.app.data.synthetic import RawBatch, SyntheticCriteo, SyntheticCriteoSpec, synthetic_criteo_dataset
