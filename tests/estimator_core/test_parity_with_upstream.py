"""Our Estimator core against upstream's tf.estimator (the oracle): same model_fn and input_fn, same outputs.

Variables after training, evaluation results, event tags (training and eval directories), checkpoint files,
SavedModel signatures and served predictions are compared, for a dense model and a feature-column model.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.estimator_core import helpers
from tests.estimator_core.cores import OURS, upstream

pytestmark = pytest.mark.upstream


def _seeded(seed):
    # Keras' default initializers draw an unseeded stateless seed: runs would differ for reasons unrelated to us.
    return tf.compat.v1.glorot_uniform_initializer(seed=seed)


def dense_model_fn(estimator_lib):
    """Two dense layers (Keras 2 `tf.compat.v1.layers`), Adam, an accuracy-style metric and a summary."""

    def model_fn(features, labels, mode, params):
        hidden = tf.compat.v1.layers.dense(
            features["x"], 4, activation=tf.nn.tanh, kernel_initializer=_seeded(1), name="hidden"
        )
        out = tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=_seeded(2), name="out")
        if mode == estimator_lib.ModeKeys.PREDICT:
            return estimator_lib.EstimatorSpec(
                mode,
                predictions={"y": out, "hidden": hidden},
                export_outputs={
                    "serving_default": estimator_lib.export.PredictOutput({"y": out}),
                    "regress": estimator_lib.export.RegressionOutput(out),
                },
            )
        loss = tf.reduce_mean(tf.square(out - labels))
        tf.compat.v1.summary.scalar("mean_prediction", tf.reduce_mean(out))
        train_op = tf.compat.v1.train.AdamOptimizer(params["learning_rate"]).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step()
        )
        metrics = {
            "mae": tf.compat.v1.metrics.mean_absolute_error(labels, out),
            "rmse": tf.compat.v1.metrics.root_mean_squared_error(labels, out),
        }
        return estimator_lib.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)

    return model_fn


def _columns():
    bucket = tf.feature_column.categorical_column_with_identity("bucket", num_buckets=5)
    return [
        tf.feature_column.numeric_column("x", shape=[3]),
        tf.feature_column.embedding_column(
            bucket, dimension=2, initializer=tf.compat.v1.truncated_normal_initializer(seed=3)
        ),
    ]


def feature_column_model_fn(estimator_lib):
    """`input_layer` of a numeric and an embedding column, then a dense layer; Adagrad."""

    def model_fn(features, labels, mode):
        net = tf.compat.v1.feature_column.input_layer(features, _columns())
        logits = tf.compat.v1.layers.dense(net, 1, kernel_initializer=_seeded(4), name="logits")
        if mode == estimator_lib.ModeKeys.PREDICT:
            return estimator_lib.EstimatorSpec(mode, predictions={"logits": logits})
        loss = tf.reduce_mean(tf.square(logits - labels))
        train_op = tf.compat.v1.train.AdagradOptimizer(0.1).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step()
        )
        return estimator_lib.EstimatorSpec(
            mode,
            loss=loss,
            train_op=train_op,
            eval_metric_ops={"mae": tf.compat.v1.metrics.mean_absolute_error(labels, logits)},
        )

    return model_fn


BUCKETS = (np.arange(64) % 5).astype("int64")


def feature_column_input_fn():
    features = {"x": helpers.FEATURES, "bucket": BUCKETS}
    return tf.data.Dataset.from_tensor_slices((features, helpers.LABELS)).batch(8).repeat()


def _run(estimator_lib, model_fn, input_fn, root, serving_input_receiver_fn, params=None):
    """Trains 25 steps (checkpoints every 10), evaluates twice (default and named), predicts, exports."""
    config = estimator_lib.RunConfig(
        model_dir=os.path.join(root, estimator_lib.name),
        tf_random_seed=7,
        save_checkpoints_steps=10,
        save_summary_steps=5,
        log_step_count_steps=5,
        keep_checkpoint_max=2,
    )
    estimator = estimator_lib.Estimator(model_fn, config=config, params=params)
    estimator.train(input_fn, steps=20)
    estimator.train(input_fn, max_steps=25)
    estimator.train(input_fn, max_steps=25)  # Already there: no training.
    result = {
        "variables": {name: estimator.get_variable_value(name) for name in estimator.get_variable_names()},
        "eval": estimator.evaluate(input_fn, steps=3),
        "eval_named": estimator.evaluate(input_fn, steps=2, name="second"),
        "files": helpers.model_dir_files(estimator.model_dir),
        "train_tags": helpers.event_tags(estimator.model_dir),
        "loss_steps": [step for step, _ in helpers.event_values(estimator.model_dir, "loss")],
        "eval_tags": helpers.event_tags(estimator.eval_dir()),
        "eval_named_tags": helpers.event_tags(os.path.join(estimator.model_dir, "eval_second")),
        "latest": os.path.basename(estimator.latest_checkpoint()),
    }
    export_dir = estimator.export_saved_model(
        os.path.join(root, estimator_lib.name + "_export"), serving_input_receiver_fn
    )
    result["export_dir"] = export_dir.decode()
    result["export_files"] = sorted(
        os.path.relpath(os.path.join(d, f), result["export_dir"])
        for d, _, fs in os.walk(result["export_dir"])
        for f in fs
    )
    result["signatures"] = helpers.saved_model_signatures(result["export_dir"])
    return estimator, result


def _assert_same(ours, theirs):
    assert ours["files"] == theirs["files"]
    assert ours["latest"] == theirs["latest"] == "model.ckpt-25"
    assert sorted(ours["variables"]) == sorted(theirs["variables"])
    for name, value in theirs["variables"].items():
        np.testing.assert_allclose(ours["variables"][name], value, rtol=1e-5, atol=1e-7, err_msg=name)
    for key in ("eval", "eval_named"):
        assert set(ours[key]) == set(theirs[key])
        for metric, value in theirs[key].items():
            np.testing.assert_allclose(ours[key][metric], value, rtol=1e-5, err_msg=metric)
            assert type(ours[key][metric]) is type(value), metric
    assert ours["eval"]["global_step"] == 25
    assert ours["train_tags"] == theirs["train_tags"]
    assert {"loss", "global_step/sec"} <= ours["train_tags"]
    assert ours["loss_steps"] == theirs["loss_steps"]
    assert ours["eval_tags"] == theirs["eval_tags"] and ours["eval_named_tags"] == theirs["eval_named_tags"]
    assert {"loss", "checkpoint_path"} <= ours["eval_tags"]
    assert ours["export_files"] == theirs["export_files"]
    assert ours["signatures"] == theirs["signatures"]


def test_dense_model_matches_upstream(tmp_path):
    theirs_lib = upstream()
    serving_fn = lambda lib: lib.export.build_raw_serving_input_receiver_fn(  # noqa: E731
        {"x": tf.zeros([1, 3], tf.float32)}
    )
    results = {}
    for lib in (OURS, theirs_lib):
        estimator, result = _run(
            lib, dense_model_fn(lib), helpers.input_fn(), str(tmp_path), serving_fn(lib), params={"learning_rate": 0.05}
        )
        result["predictions"] = list(estimator.predict(helpers.predict_input_fn()))
        result["batches"] = list(
            estimator.predict(helpers.predict_input_fn(), predict_keys=["y"], yield_single_examples=False)
        )
        result["served"] = helpers.run_signature(result["export_dir"], {"x": helpers.FEATURES[:5]})
        results[lib.name] = result
    ours, theirs = results["ours"], results["upstream"]
    _assert_same(ours, theirs)
    # RegressionOutput needs one string input (serialized examples): with raw float inputs it is left out.
    assert set(ours["signatures"][("serve",)]) == {"serving_default"}
    assert len(ours["predictions"]) == 5 and set(ours["predictions"][0]) == {"y", "hidden"}
    for mine, upstream_prediction in zip(ours["predictions"], theirs["predictions"]):
        for key in upstream_prediction:
            np.testing.assert_allclose(mine[key], upstream_prediction[key], rtol=1e-5)
    assert [set(b) for b in ours["batches"]] == [{"y"}] * 3
    np.testing.assert_allclose(ours["served"]["y"], theirs["served"]["y"], rtol=1e-5)
    np.testing.assert_allclose(ours["served"]["y"][:, 0], [p["y"][0] for p in ours["predictions"]], rtol=1e-5)


def test_feature_column_model_matches_upstream(tmp_path):
    theirs_lib = upstream()
    feature_spec = tf.compat.v1.feature_column.make_parse_example_spec(_columns())
    results = {}
    for lib in (OURS, theirs_lib):
        estimator, result = _run(
            lib,
            feature_column_model_fn(lib),
            feature_column_input_fn,
            str(tmp_path),
            lib.export.build_parsing_serving_input_receiver_fn(feature_spec),
        )
        examples = [
            tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=helpers.FEATURES[i])),
                        "bucket": tf.train.Feature(int64_list=tf.train.Int64List(value=[BUCKETS[i]])),
                    }
                )
            ).SerializeToString()
            for i in range(4)
        ]
        result["served"] = helpers.run_signature(result["export_dir"], {"examples": examples})
        results[lib.name] = result
    ours, theirs = results["ours"], results["upstream"]
    _assert_same(ours, theirs)
    assert "input_layer/bucket_embedding/embedding_weights" in ours["variables"]
    assert set(ours["signatures"][("serve",)]) == {"serving_default"}
    np.testing.assert_allclose(ours["served"]["logits"], theirs["served"]["logits"], rtol=1e-5)
