"""Named regression tests: each failure (or surprise) the conformance generator found, as one plain test.

Strict xfails are findings not fixed yet: they turn into failures (XPASS) the moment the bug is fixed, so the
marker must then be removed. Fixed findings stay below as plain tests.
"""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.conformance import cases, programs

BASE = dict(cases.BASE_CASE, embedding="dict")


def case_of(**overrides):
    case = dict(BASE, **overrides)
    assert set(case) == set(cases.AXES)
    return case


@pytest.mark.quick
def test_per_host_v2_two_shards_with_sparse_first_embedding_feature_trains(tmp_path):
    case = case_of(input_config="PER_HOST_V2", shards=2, id_format="sparse", key_order="ids_first_sorted")
    assert cases.known_failure(case) is None
    cases.run_case(case, str(tmp_path))


def test_per_host_v2_two_shards_with_sparse_first_feature_without_embeddings_trains(tmp_path):
    case = case_of(input_config="PER_HOST_V2", shards=2, id_format="sparse", embedding="none")
    cases.run_case(case, str(tmp_path))


def test_per_host_v2_two_shards_with_dense_first_feature_and_sparse_ids_trains(tmp_path):
    # The same program with a dense feature first in sorted key order ('_x' < 'a') trains: bug 1 needs the sparse first.
    case = case_of(input_config="PER_HOST_V2", shards=2, id_format="sparse", key_order="dense_first_reversed")
    cases.run_case(case, str(tmp_path))


def test_features_only_dataset_with_embedding_config_and_model_fn_without_labels_trains(tmp_path):
    case = case_of(labels="none", signature="features_mode_params")
    cases.run_case(case, str(tmp_path))


def test_features_only_tensors_from_input_fn_train_without_embeddings(tmp_path):
    cases.run_case(case_of(returns="tensors", labels="none", embedding="none"), str(tmp_path))


def test_sparse_feature_from_tensors_input_fn_trains(tmp_path):
    cases.run_case(case_of(returns="tensors", id_format="sparse", embedding="none"), str(tmp_path))


def test_ragged_feature_from_tensors_input_fn_raises_the_static_shape_error(tmp_path):
    cases.run_case(case_of(returns="tensors", id_format="ragged", embedding="none"), str(tmp_path))


def test_broadcast_trains_from_tensors_input_fn(tmp_path):
    cases.run_case(case_of(returns="tensors", input_config="BROADCAST", embedding="none"), str(tmp_path))


def test_sliced_evaluation_from_tensors_input_fn(tmp_path):
    cases.run_case(
        case_of(mode="train_eval", returns="tensors", input_config="SLICED", embedding="none"), str(tmp_path)
    )


def test_predict_with_weighted_column_over_dense_ids_and_weights(tmp_path):
    cases.run_case(case_of(mode="predict", embedding="weighted_columns", shards=1), str(tmp_path))


def test_predict_with_dict_weight_key_over_dense_ids_and_weights(tmp_path):
    cases.run_case(case_of(mode="predict", embedding="dict_weighted", shards=1), str(tmp_path))


@pytest.mark.parametrize("embedding", ["dict", pytest.param("columns", marks=pytest.mark.quick)])
def test_export_to_tpu_with_embeddings_serves_the_predictions(tmp_path, embedding):
    # Found by the export cases: "AttributeError: 'function' object has no attribute 'rewrite'" once the package's
    # imports were sorted (fixed in tpu_estimator/__init__.py).
    cases.run_case(case_of(mode="export", embedding=embedding, id_format="sparse"), str(tmp_path))


@pytest.mark.parametrize("input_config", ["PER_HOST_V1", "SLICED"])
def test_eval_loss_is_replica_zero_loss_and_metrics_cover_every_row(tmp_path, input_config):
    # Upstream reports replica 0's loss (outputs_from_all_shards=False); on 4 shards that is not the global mean.
    case = case_of(mode="train_eval", input_config=input_config, shards=4, embedding="none")
    state = programs.train_oracle(case)
    estimator = programs.make_estimator(case, str(tmp_path))
    estimator.train(programs.make_input_fn(case, "train"), max_steps=programs.STEPS)
    metrics = estimator.evaluate(programs.make_input_fn(case, "eval"), steps=programs.EVAL_STEPS)
    want = programs.eval_oracle(case, state)
    np.testing.assert_allclose(metrics["loss"], want["loss"], rtol=1e-4)
    np.testing.assert_allclose(metrics["mean_logit"], want["mean_logit"], rtol=1e-4, atol=1e-6)
    global_loss = programs.eval_oracle(dict(case, input_config="BROADCAST"), state)["loss"]
    assert abs(global_loss - want["loss"]) > 0.1  # the two readings really differ on this data


@pytest.mark.parametrize("embedding", ["none", "dict", "columns"])
def test_ragged_features_raise_the_static_shape_error(tmp_path, embedding):
    with pytest.raises(ValueError, match="must have static shape"):
        cases.run_supported(case_of(id_format="ragged", embedding=embedding), str(tmp_path))


@pytest.mark.parametrize("input_config", ["PER_SHARD_V1", "BROADCAST"])
def test_embeddings_with_per_shard_v1_or_broadcast_are_refused(tmp_path, input_config):
    # Upstream's text, then the configuration given and what to set.
    with pytest.raises(ValueError) as raised:
        programs.make_estimator(case_of(input_config=input_config), str(tmp_path))
    message = str(raised.value)
    assert message.startswith("Only PER_HOST_V1 and PER_HOST_V2 is supported when using TPU Embedding; got ")
    value = getattr(te.InputPipelineConfig, input_config)
    assert "got InputPipelineConfig.{} ({}). Set TPUConfig(".format(input_config, value) in message


def test_sliced_is_refused_as_training_input_configuration(tmp_path):
    case = case_of(embedding="none")
    config = te.TPUConfig(num_shards=2, per_host_input_for_training=te.InputPipelineConfig.SLICED)
    estimator = te.TPUEstimator(
        model_fn=programs.make_model_fn(case),
        config=te.RunConfig(model_dir=str(tmp_path), tpu_config=config),
        train_batch_size=programs.G,
    )
    with pytest.raises(ValueError, match="SLICED"):
        estimator.train(programs.make_input_fn(case, "train"), max_steps=1)


@pytest.mark.parametrize(
    "input_config,shards", [("PER_HOST_V1", 1), ("PER_HOST_V2", 1), ("PER_HOST_V2", 2), ("SLICED", 2)]
)
def test_predict_ends_on_an_input_with_a_static_batch(tmp_path, input_config, shards):
    # `.batch(4, drop_remainder=True)` gives the batch a static size; PER_HOST_V2 PREDICT then hung after the last
    # batch: Grappler folded the end-of-input read `size(next) < 0` to a constant and pruned the read.
    rows, table = 12, np.arange(14, dtype=np.float32).reshape(7, 2)
    ids = (np.arange(rows) * 3 % 7).astype(np.int64)
    x = np.linspace(-1.0, 1.0, rows, dtype=np.float32)

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices({"a": ids.reshape(-1, 1), "x": x.reshape(-1, 1)})
        return dataset.batch(params["batch_size"], drop_remainder=True)

    def model_fn(features, mode, params):
        activation = features["a"]  # one id per row: the table's row, [rows, 2]
        prediction = activation[:, 0] - 2.0 * activation[:, 1] + features["x"][:, 0]
        return te.TPUEstimatorSpec(mode, predictions={"p": prediction})

    spec = te.experimental.EmbeddingConfigSpec(
        table_to_config_dict={"t": te.experimental.TableConfig(7, 2, initializer=tf.constant_initializer(table))},
        feature_to_config_dict={"a": te.experimental.FeatureConfig("t")},
        optimization_parameters=te.experimental.AdagradParameters(0.1),
    )
    config = te.RunConfig(
        model_dir=str(tmp_path),
        tpu_config=te.TPUConfig(
            num_shards=shards, per_host_input_for_training=getattr(te.InputPipelineConfig, input_config)
        ),
    )
    if input_config == "SLICED":
        spec = None  # SLICED is an evaluation/prediction mode without embeddings: the dense model alone
    estimator = te.TPUEstimator(
        model_fn=model_fn if spec else _dense_model_fn(table),
        config=config,
        train_batch_size=8,
        predict_batch_size=4,
        embedding_config_spec=spec,
    )
    predictions = np.array([p["p"] for p in estimator.predict(input_fn)])
    want = table[ids, 0] - 2.0 * table[ids, 1] + x
    np.testing.assert_allclose(predictions, want, rtol=1e-6)


def _dense_model_fn(table):
    def model_fn(features, mode, params):
        activation = tf.gather(tf.constant(table), features["a"][:, 0])
        prediction = activation[:, 0] - 2.0 * activation[:, 1] + features["x"][:, 0]
        return te.TPUEstimatorSpec(mode, predictions={"p": prediction})

    return model_fn
