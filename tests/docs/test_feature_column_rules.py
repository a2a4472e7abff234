"""docs/SEMANTICS.md quotes the errors of two feature-column rules as programs see them, and the README agrees.

The messages are produced here, live: TensorFlow's `input_layer` on `shared_embedding_columns`, and our refusal of
a TPU embedding column over `categorical_column_with_vocabulary_list`.
"""

import re

import pytest
import tensorflow as tf

import tpu_estimator  # noqa: F401  (Keras 2 for the feature columns)
from tests.docs.test_readme import REPO
from tpu_estimator import _tf_internal

pytestmark = pytest.mark.quick


def _flat(path: str) -> str:
    """The file's text with runs of whitespace (line breaks of the Markdown) as one space."""
    return re.sub(r"\s+", " ", (REPO / path).read_text(encoding="utf-8"))


def _shared_columns_input_layer_error() -> str:
    with tf.Graph().as_default():
        ids = [tf.feature_column.categorical_column_with_identity(key, 10) for key in ("a", "b")]
        columns = tf.compat.v1.tpu.experimental.shared_embedding_columns(ids, dimension=4)
        features = {"a": tf.constant([[1]], tf.int64), "b": tf.constant([[2]], tf.int64)}
        with pytest.raises(ValueError) as error:
            tf.compat.v1.feature_column.input_layer(features, columns)
        tf.compat.v1.keras.layers.DenseFeatures(columns)(features)  # what the docs say to use instead
    return str(error.value)


def _vocabulary_column_error() -> str:
    with tf.Graph().as_default():
        country = tf.feature_column.categorical_column_with_vocabulary_list("country", ["us", "fr"])
        tf.compat.v1.tpu.experimental.embedding_column(country, dimension=4)  # TensorFlow accepts the column
        with pytest.raises(ValueError) as error:
            _tf_internal.categorical_ids(country, {"country": tf.constant([["us"]])})
    return str(error.value)


def test_semantics_quotes_the_shared_columns_rule():
    message = _shared_columns_input_layer_error()
    assert "Please use `DenseFeatures`" in message
    assert "ValueError: " + message in _flat("docs/SEMANTICS.md")


def test_semantics_quotes_the_vocabulary_refusal():
    message = _vocabulary_column_error()
    assert message.startswith("TPU embedding column over country (VocabularyListCategoricalColumn)")
    assert "ValueError: " + message in _flat("docs/SEMANTICS.md")


def test_readme_says_shared_columns_need_dense_features():
    readme = _flat("README.md")
    assert "`shared_embedding_columns`: `DenseFeatures` only" in readme
    assert "Vocabulary columns under an embedding column are refused" in readme
