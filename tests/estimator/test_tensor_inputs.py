"""`input_fn`s that return tensors (not a `Dataset`): features-only, SparseTensor features, every input mode that
accepts them (issue 14's conformance findings). Each case trains to the NumPy oracle's variables
(`tests/conformance/programs.py`), as the same program fed by a `Dataset` does."""

import pytest
import tensorflow as tf

from tests.conformance import cases, programs

BASE = dict(cases.BASE_CASE, returns="tensors")


def case_of(**overrides):
    return cases.working_case(BASE, **overrides)


@pytest.mark.parametrize("embedding", ["none", "dict", "columns"])
@pytest.mark.parametrize("id_format", ["dense", "sparse"])
def test_features_only_tensors_train_to_the_oracle(tmp_path, embedding, id_format):
    # Labels inside the features (input_fn returns a features dict): no labels to queue.
    case = case_of(labels="none", signature="features_mode_params", embedding=embedding, id_format=id_format)
    cases.run_case(case, str(tmp_path))


@pytest.mark.parametrize(
    "input_config,embedding,iterations_per_loop",
    [
        ("PER_HOST_V1", "none", 3),
        ("PER_HOST_V1", "dict_weighted", 1),
        ("PER_HOST_V1", "sequence_columns", 3),
        ("PER_SHARD_V1", "none", 1),
    ],
)
def test_sparse_feature_tensors_train_to_the_oracle(tmp_path, input_config, embedding, iterations_per_loop):
    case = case_of(
        input_config=input_config, embedding=embedding, id_format="sparse", iterations_per_loop=iterations_per_loop
    )
    cases.run_case(case, str(tmp_path))


def test_sparse_feature_tensors_with_labels_dict_evaluate_to_the_oracle(tmp_path):
    case = case_of(mode="train_eval", id_format="sparse", labels="dict", embedding="dict")
    cases.run_case(case, str(tmp_path))


@pytest.mark.parametrize("id_format", ["dense", "sparse"])
def test_broadcast_training_from_tensors_trains_to_the_oracle(tmp_path, id_format):
    # Every replica gets the whole batch (upstream's broadcast enqueue accepts tensors outside PREDICT).
    case = case_of(input_config="BROADCAST", id_format=id_format, iterations_per_loop=3)
    cases.run_case(case, str(tmp_path))


@pytest.mark.parametrize("id_format", ["dense", "sparse"])
def test_sliced_evaluation_from_tensors_evaluates_to_the_oracle(tmp_path, id_format):
    case = case_of(mode="train_eval", input_config="SLICED", id_format=id_format, shards=4)
    cases.run_case(case, str(tmp_path))


def test_broadcast_evaluation_from_tensors_evaluates_to_the_oracle(tmp_path):
    cases.run_case(case_of(mode="train_eval", input_config="BROADCAST", shards=2), str(tmp_path))


@pytest.mark.parametrize("mode,returns", [("train", "dataset"), ("train", "tensors"), ("predict", "dataset")])
def test_ragged_feature_error_names_the_feature_and_the_conversion(tmp_path, returns, mode):
    case = dict(BASE, returns=returns, id_format="ragged", embedding="dict", mode=mode)
    estimator = programs.make_estimator(case, str(tmp_path))
    message = r"must have static shape\. features\['a'\] is a RaggedTensor; .*`\.to_sparse\(\)`"
    with pytest.raises(ValueError, match=message):
        if mode == "train":
            estimator.train(programs.make_input_fn(case, "train"), max_steps=1)
        else:
            list(estimator.predict(programs.make_input_fn(case, "predict")))


def test_ragged_label_error_names_the_label(tmp_path):
    case = dict(BASE, returns="tensors", labels="dict")
    base_input_fn = programs.make_input_fn(case, "train")

    def input_fn(params):
        features, labels = base_input_fn(params)
        return features, {"y": tf.RaggedTensor.from_tensor(tf.expand_dims(labels["y"], 1))}

    estimator = programs.make_estimator(case, str(tmp_path))
    with pytest.raises(ValueError, match=r"The labels .* static shape\. labels\['y'\] is a RaggedTensor"):
        estimator.train(input_fn, max_steps=1)


def test_unknown_dense_shape_error_names_the_feature(tmp_path):
    case = dict(BASE)
    base_input_fn = programs.make_input_fn(case, "train")

    def input_fn(params):
        features, labels = base_input_fn(params)
        features["x"] = tf.compat.v1.placeholder_with_default(features["x"], [None, 2])
        return features, labels

    estimator = programs.make_estimator(case, str(tmp_path))
    with pytest.raises(ValueError, match=r"The features .* static shape\. features\['x'\]: Tensor"):
        estimator.train(input_fn, max_steps=1)
