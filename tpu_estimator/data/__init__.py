"""Built-in data: Criteo click logs (TSV and TFRecord readers) and a synthetic Criteo-like generator."""

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
from tpu_estimator.data.synthetic import SyntheticCriteo
from tpu_estimator.data.synthetic import SyntheticCriteoSpec
from tpu_estimator.data.synthetic import synthetic_criteo_dataset
