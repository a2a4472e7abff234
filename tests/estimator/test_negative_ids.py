"""Negative ids (issue 36 item 7): in a dense integer input of a feature column, -1 means "missing" and is dropped,
as upstream's feature columns do (`_to_sparse_input_and_drop_ignore_values`: "-1 has a special meaning of missing
feature"); any other negative id, and -1 given to `feature_to_config_dict` features, is an error naming the feature,
the table and the valid range (README, Troubleshooting)."""

import numpy as np
import pytest
import tensorflow as tf

from tests.estimator import test_embedding_columns as columns
from tests.estimator import test_embedding_estimator as emb
from tpu_estimator import experimental as tex


def features_with(a_value, c_value):
    features = {key: value.copy() for key, value in columns.FEATURES.items()}
    features["a"][1] = a_value
    features["c"][2, 0] = c_value
    return features


def input_fn_of(features):
    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices((features, columns.Y))
        return dataset.repeat().batch(params["batch_size"], True)

    return input_fn


@pytest.mark.upstream
def test_minus_one_in_a_feature_column_is_missing_as_upstream(tmp_path):
    input_fn = input_fn_of(features_with(-1, -1))
    ours = columns.ours(tmp_path / "ours")
    ours.train(input_fn, max_steps=4)
    theirs = columns.upstream(tmp_path / "upstream")
    theirs.train(input_fn, max_steps=4)
    names = set(theirs.get_variable_names())
    assert {"a_b_shared_embedding", "dense_features/c_embedding/embedding_weights"} <= names
    for name in names:
        np.testing.assert_allclose(
            ours.get_variable_value(name), theirs.get_variable_value(name), atol=1e-5, err_msg=name
        )


def test_minus_one_in_a_feature_column_trains_and_minus_two_is_an_error(tmp_path):
    columns.ours(tmp_path / "minus_one").train(input_fn_of(features_with(-1, -1)), max_steps=2)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        columns.ours(tmp_path / "minus_two").train(input_fn_of(features_with(-2, 3)), max_steps=2)
    assert str(raised.value).splitlines()[0] == (
        "Feature 'a' (table 'tbl_a_b_shared_embedding'): ids must be in [0, 10) (vocabulary_size); smallest and "
        "largest id: -2, 9"
    )


def test_minus_one_given_to_feature_to_config_dict_is_an_error(tmp_path, monkeypatch):
    ids = emb.A.copy()
    ids[3, 1] = -1

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices(({"a": ids, "b": emb.B, "c": emb.C}, emb.Y))
        return dataset.repeat().batch(params["batch_size"], drop_remainder=True)

    monkeypatch.setattr(emb, "input_fn", input_fn)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        emb.train(tmp_path, emb.make_spec(tex.AdagradParameters(0.1)), steps=1)
    assert (
        str(raised.value)
        .splitlines()[0]
        .startswith("Feature 'a' (table 't1'): ids must be in [0, 10) (vocabulary_size); smallest and largest id: -1, ")
    )
