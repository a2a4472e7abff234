"""Built-in data: Criteo click logs (TSV and TFRecord readers) and a synthetic Criteo-like generator.

Modules: `criteo` (schema, feature transform, readers), `synthetic` (generator), `convert` (TSV -> TFRecord,
also `python -m tpu_estimator.data.convert`).
"""

from tpu_estimator.data.convert import convert_tsv_to_tfrecord
from tpu_estimator.data.criteo import CATEGORICAL_FEATURE_NAMES
from tpu_estimator.data.criteo import CRITEO_KAGGLE_CARDINALITIES
from tpu_estimator.data.criteo import criteo_cardinalities
from tpu_estimator.data.criteo import criteo_tfrecord_dataset
from tpu_estimator.data.criteo import criteo_tsv_dataset
from tpu_estimator.data.criteo import DENSE_FEATURE_NAME
from tpu_estimator.data.criteo import MalformedLineCounter
from tpu_estimator.data.criteo import missing_categorical_id
from tpu_estimator.data.criteo import NUM_CATEGORICAL_FEATURES
from tpu_estimator.data.criteo import NUM_DENSE_FEATURES
from tpu_estimator.data.criteo import TFRECORD_CATEGORICAL_KEYS
from tpu_estimator.data.criteo import TFRECORD_DENSE_KEYS
from tpu_estimator.data.criteo import TFRECORD_LABEL_KEY
from tpu_estimator.data.synthetic import RawBatch
from tpu_estimator.data.synthetic import SyntheticCriteo
from tpu_estimator.data.synthetic import SyntheticCriteoSpec
from tpu_estimator.data.synthetic import synthetic_criteo_dataset
