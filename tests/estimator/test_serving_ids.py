"""Exported models treat out-of-range ids as training does: the same error, naming feature and table, for both
config paths (feature columns and config dicts), instead of silently dropping negative ids."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tests.estimator import test_embedding_columns as columns
from tests.estimator import test_embedding_estimator as dicts
from tpu_estimator import experimental as tex

ID_ERROR = r"Feature '(\w+)' \(table '(\w+)'\): ids must be in \[0, (\d+)\) \(vocabulary_size\)"


def unescaped(error):
    """The error text with the assert's string data unescaped (session errors print `\\'` for quotes)."""
    return str(error).replace("\\'", "'")


def training_error(estimator, input_fn):
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        estimator.train(input_fn, max_steps=estimator.get_variable_value("global_step") + 1)
    return re.search(ID_ERROR, unescaped(raised.value)).group(0)


def serving_error(signature, feed):
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        signature(**feed)
    return re.search(ID_ERROR, unescaped(raised.value)).group(0)


# ---------------------------------------------------------------------------------------------- feature columns


@pytest.fixture(scope="module")
def column_model(tmp_path_factory):
    base = tmp_path_factory.mktemp("column_ids")
    estimator = columns.ours(base / "model")
    estimator.train(columns.input_fn, max_steps=2)

    export_dir = estimator.export_saved_model(str(base / "export"), columns.serving_input_fn).decode()
    signature = tf.saved_model.load(export_dir, tags=["serve"]).signatures["serving_default"]
    return estimator, signature


def column_rows(**changes):
    rows = {k: v[:4].copy() for k, v in columns.FEATURES.items()}
    for key, (row, value) in changes.items():
        rows[key][row] = value
    return rows


def column_input_fn(rows):
    features = {k: np.concatenate([v] * 4) for k, v in rows.items()}
    labels = columns.Y[:16]
    return lambda params: tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(16, True)


@pytest.mark.parametrize("key, row, bad", [("a", 0, -5), ("c", (1, 1), -2), ("b", 2, 10)])
def test_feature_column_export_refuses_what_training_refuses(column_model, key, row, bad):
    estimator, signature = column_model
    rows = column_rows(**{key: (row, bad)})
    served = serving_error(signature, {k: tf.constant(v) for k, v in rows.items()})
    trained = training_error(estimator, column_input_fn(rows))
    assert served == trained
    assert served.startswith("Feature '{}' (table ".format(key))


def test_feature_column_export_serves_valid_ids_and_missing_dense_entries_as_training(column_model):
    """-1 in dense int inputs means "no id" for feature columns (dropped before the lookup) in training too."""
    estimator, signature = column_model
    rows = column_rows(a=(0, -1))
    served = signature(**{k: tf.constant(v) for k, v in rows.items()})["logit"].numpy()
    predicted = [
        p["logit"]
        for p in estimator.predict(lambda params: tf.data.Dataset.from_tensor_slices(rows).batch(params["batch_size"]))
    ]
    np.testing.assert_allclose(served, predicted, rtol=1e-5)
    before = estimator.get_variable_value("global_step")
    estimator.train(column_input_fn(rows), max_steps=before + 1)  # Training accepts it too.
    assert estimator.get_variable_value("global_step") == before + 1


# ---------------------------------------------------------------------------------------------- config dicts


@pytest.fixture(scope="module")
def dict_model(tmp_path_factory):
    base = tmp_path_factory.mktemp("dict_ids")
    estimator = dicts.train(base / "model", dicts.make_spec(tex.AdagradParameters(0.3)), steps=2)
    export_dir = estimator.export_saved_model(str(base / "export"), dicts._serving_input_fn).decode()
    signature = tf.saved_model.load(export_dir, tags=["serve"]).signatures["serving_default"]
    return estimator, signature


def dict_feed(a, b, c):
    rows, cols = np.meshgrid(np.arange(len(a)), np.arange(a.shape[1]), indexing="ij")
    return {
        "a_indices": tf.constant(np.stack([rows.ravel(), cols.ravel()], 1), tf.int64),
        "a_values": tf.constant(a.ravel()),
        "a_dense_shape": tf.constant([len(a), a.shape[1]], tf.int64),
        "b": tf.constant(b),
        "c": tf.constant(c),
    }


def dict_input_fn(a, b, c):
    n = dicts.G
    features = {"a": np.resize(a, (n, 3)), "b": np.resize(b, n), "c": np.resize(c, (n, 1))}
    return lambda params: tf.data.Dataset.from_tensor_slices((features, dicts.Y[:n])).repeat().batch(n, True)


def test_dict_config_export_without_bad_ids_matches_predict(dict_model):
    _, signature = dict_model
    a, b, c = dicts.A[:4].copy(), dicts.B[:4].copy(), dicts.C[:4].copy()
    served = signature(**dict_feed(a, b, c))["logit"].numpy()
    assert served.shape == (4,) and np.all(np.isfinite(served))


@pytest.mark.parametrize("key, bad", [("a", -1), ("b", -3), ("c", 10)])
def test_dict_config_export_refuses_what_training_refuses(dict_model, key, bad):
    """Before: a negative sparse id was silently dropped (the safe sparse lookup prunes it)."""
    estimator, signature = dict_model
    a, b, c = dicts.A[:4].copy(), dicts.B[:4].copy(), dicts.C[:4].copy()
    {"a": a, "b": b, "c": c}[key].reshape(-1)[1] = bad
    served = serving_error(signature, dict_feed(a, b, c))
    trained = training_error(estimator, dict_input_fn(a, b, c))
    assert served == trained
    assert served.startswith("Feature '{}' (table ".format(key))
