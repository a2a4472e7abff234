"""Our Estimator on its own (every TensorFlow): checkpoints, summaries, evaluation, prediction, export, errors."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.estimator_core import helpers
from tests.estimator_core.cores import OURS


def _estimator(model_dir, **config_kwargs):
    config_kwargs.setdefault("save_checkpoints_steps", 10)
    config = OURS.RunConfig(model_dir=str(model_dir), **config_kwargs)
    return OURS.Estimator(helpers.linear_model_fn(OURS), config=config, params={"learning_rate": 0.1})


def _ckpt_steps(model_dir):
    return sorted(
        int(name[len("model.ckpt-") : -len(".index")]) for name in os.listdir(model_dir) if name.endswith(".index")
    )


def test_checkpoint_cadence_names_and_graph(tmp_path):
    estimator = _estimator(tmp_path, keep_checkpoint_max=3, log_step_count_steps=5, save_summary_steps=5)
    estimator.train(helpers.input_fn(), max_steps=35)
    # One at step 0 (session creation), every 10 steps, one at the end; the 3 newest kept.
    assert _ckpt_steps(tmp_path) == [20, 30, 35]
    assert estimator.latest_checkpoint() == str(tmp_path / "model.ckpt-35")
    assert {"checkpoint", "graph.pbtxt", "model.ckpt-35.meta", "model.ckpt-35.data-00000-of-00001"} <= set(
        os.listdir(tmp_path)
    )
    loss_steps = [step for step, _ in helpers.event_values(str(tmp_path), "loss")]
    # Every 5 steps from step 1 (which steps exactly depends on when the session reads the global step).
    assert (
        loss_steps[0] == 1
        and 6 <= len(loss_steps) <= 8
        and all(b - a in (4, 5, 6) for a, b in zip(loss_steps, loss_steps[1:-1]))
    )
    assert {"loss", "global_step/sec"} <= helpers.event_tags(str(tmp_path))
    assert sorted(estimator.get_variable_names()) == ["b", "global_step", "w"]
    assert estimator.get_variable_value("global_step") == 35


def test_steps_are_incremental_and_reached_max_steps_does_not_train(tmp_path):
    estimator = _estimator(tmp_path)
    estimator.train(helpers.input_fn(), steps=7)
    estimator.train(helpers.input_fn(), steps=7)
    assert estimator.get_variable_value("global_step") == 14
    w = estimator.get_variable_value("w")
    files = sorted(os.listdir(tmp_path))
    estimator.train(helpers.input_fn(), max_steps=14)  # Already reached: no graph, no session, no files.
    assert sorted(os.listdir(tmp_path)) == files
    np.testing.assert_array_equal(estimator.get_variable_value("w"), w)
    estimator.train(helpers.input_fn(repeat=False), steps=100)  # Stops when the input ends: 8 batches.
    assert estimator.get_variable_value("global_step") == 22


@pytest.mark.quick
def test_training_minimises_the_loss_to_the_known_solution(tmp_path):
    estimator = _estimator(tmp_path)
    estimator.train(helpers.input_fn(), max_steps=600)
    np.testing.assert_allclose(estimator.get_variable_value("w")[:, 0], [1.0, -2.0, 0.5], atol=0.05)
    np.testing.assert_allclose(estimator.get_variable_value("b"), [0.25], atol=0.05)
    metrics = estimator.evaluate(helpers.input_fn(repeat=False))
    assert set(metrics) == {"loss", "mae", "global_step"} and metrics["global_step"] == 600
    assert metrics["loss"] < 1e-3


def test_evaluate_results_and_summaries(tmp_path):
    estimator = _estimator(tmp_path)
    estimator.train(helpers.input_fn(), max_steps=5)
    w = estimator.get_variable_value("w")
    b = estimator.get_variable_value("b")
    metrics = estimator.evaluate(helpers.input_fn(), steps=2)
    batches = [(helpers.FEATURES[i : i + 8], helpers.LABELS[i : i + 8]) for i in (0, 8)]
    losses = [np.mean(np.square(x @ w + b - y)) for x, y in batches]
    np.testing.assert_allclose(metrics["loss"], np.mean(losses), rtol=1e-5)  # Mean of the per-batch losses.
    np.testing.assert_allclose(
        metrics["mae"], np.mean(np.abs(np.concatenate([x @ w + b - y for x, y in batches]))), rtol=1e-5
    )
    assert metrics["global_step"] == 5
    estimator.evaluate(helpers.input_fn(), steps=1, name="holdout")
    assert helpers.event_tags(estimator.eval_dir()) == {"loss", "mae", "checkpoint_path"}
    assert estimator.eval_dir("holdout") == os.path.join(str(tmp_path), "eval_holdout")
    assert [s for s, _ in helpers.event_values(estimator.eval_dir("holdout"), "loss")] == [5]
    # An explicit checkpoint, and none at all (fresh variables, global step 0).
    first = estimator.evaluate(helpers.input_fn(), steps=1, checkpoint_path=str(tmp_path / "model.ckpt-0"))
    assert first["global_step"] == 0
    fresh = _estimator(tmp_path / "fresh").evaluate(helpers.input_fn(), steps=1)
    assert fresh["global_step"] == 0


def test_predict(tmp_path):
    estimator = _estimator(tmp_path)
    estimator.train(helpers.input_fn(), max_steps=3)
    w, b = estimator.get_variable_value("w"), estimator.get_variable_value("b")
    expected = helpers.FEATURES[:5] @ w + b
    predictions = list(estimator.predict(helpers.predict_input_fn(5)))
    assert len(predictions) == 5 and set(predictions[0]) == {"y", "double"}
    np.testing.assert_allclose([p["y"][0] for p in predictions], expected[:, 0], rtol=1e-5)
    batches = list(estimator.predict(helpers.predict_input_fn(5), predict_keys=["y"], yield_single_examples=False))
    assert [b_["y"].shape for b_ in batches] == [(2, 1), (2, 1), (1, 1)]
    with pytest.raises(ValueError, match="Expected to run at least one output"):
        list(estimator.predict(helpers.predict_input_fn(), predict_keys=["nope"]))


@pytest.mark.quick
def test_export_saved_model_and_all_modes(tmp_path):
    estimator = _estimator(tmp_path / "model")
    serving_fn = OURS.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 3])})
    with pytest.raises(ValueError, match="Couldn't find trained model at"):
        estimator.export_saved_model(str(tmp_path / "export"), serving_fn)
    estimator.train(helpers.input_fn(), max_steps=4)
    extra = tmp_path / "vocab.txt"
    extra.write_text("a\nb\n")
    export_dir = estimator.export_saved_model(
        str(tmp_path / "export"), serving_fn, assets_extra={"data/vocab.txt": str(extra)}
    ).decode()
    assert os.path.dirname(export_dir) == str(tmp_path / "export") and os.path.basename(export_dir).isdigit()
    assert sorted(os.listdir(export_dir)) == ["assets.extra", "saved_model.pb", "variables"]
    assert (
        tmp_path / "export" / os.path.basename(export_dir) / "assets.extra" / "data" / "vocab.txt"
    ).read_text() == "a\nb\n"
    signatures = helpers.saved_model_signatures(export_dir)
    # The only export output is also the default signature.
    assert set(signatures[("serve",)]) == {"serving_default", "out"}
    served = helpers.run_signature(export_dir, {"x": helpers.FEATURES[:3]})
    expected = helpers.FEATURES[:3] @ estimator.get_variable_value("w") + estimator.get_variable_value("b")
    np.testing.assert_allclose(served["y"], expected, rtol=1e-5)
    np.testing.assert_allclose(served["double"], 2 * expected, rtol=1e-5)

    supervised = OURS.export.build_raw_supervised_input_receiver_fn(
        {"x": tf.zeros([1, 3])}, tf.zeros([1, 1]), default_batch_size=None
    )
    all_modes = estimator.experimental_export_all_saved_models(
        str(tmp_path / "all"),
        {OURS.ModeKeys.TRAIN: supervised, OURS.ModeKeys.EVAL: supervised, OURS.ModeKeys.PREDICT: serving_fn},
    ).decode()
    signatures = helpers.saved_model_signatures(all_modes)
    assert set(signatures) == {("train",), ("eval",), ("serve",)}
    assert set(signatures[("train",)]) == {"train"} and set(signatures[("eval",)]) == {"eval"}
    eval_outputs = helpers.run_signature(
        all_modes, {"x": helpers.FEATURES[:8], "label": helpers.LABELS[:8]}, "eval", tags=("eval",)
    )
    np.testing.assert_allclose(
        eval_outputs["loss"],
        np.mean(
            np.square(
                helpers.FEATURES[:8] @ estimator.get_variable_value("w")
                + estimator.get_variable_value("b")
                - helpers.LABELS[:8]
            )
        ),
        rtol=1e-5,
    )
    with pytest.raises(ValueError, match="No valid modes for exporting found"):
        estimator.experimental_export_all_saved_models(str(tmp_path / "none"), {"bogus": serving_fn})


def test_receivers_validate_their_tensors():
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3])
        receiver = OURS.export.ServingInputReceiver(x, x)
        assert set(receiver.features) == {"feature"} and set(receiver.receiver_tensors) == {"input"}
        tensor_receiver = OURS.export.TensorServingInputReceiver(x, {"x": x})
        assert tensor_receiver.features is x
        with pytest.raises(ValueError, match="feature bad must be a Tensor, SparseTensor, or RaggedTensor."):
            OURS.export.ServingInputReceiver({"bad": [1.0]}, x)
        with pytest.raises(ValueError, match="receiver_tensor keys must be strings: 1."):
            OURS.export.ServingInputReceiver(x, {1: x})
        with pytest.raises(ValueError, match="receiver_tensors_alternatives must be a dict"):
            OURS.export.ServingInputReceiver(x, x, receiver_tensors_alternatives=[x])
        parsing = OURS.export.build_parsing_serving_input_receiver_fn(
            {"x": tf.io.FixedLenFeature([3], tf.float32)}, default_batch_size=4
        )()
        assert parsing.receiver_tensors["examples"].shape.as_list() == [4]
        assert parsing.receiver_tensors["examples"].op.name == "input_example_tensor"
        assert parsing.features["x"].shape.as_list() == [4, 3]


def test_errors(tmp_path):
    estimator = _estimator(tmp_path)
    with pytest.raises(ValueError, match="Could not find trained model in model_dir"):
        estimator.get_variable_names()
    with pytest.raises(ValueError, match="Can not provide both steps and max_steps."):
        estimator.train(helpers.input_fn(), steps=1, max_steps=1)
    with pytest.raises(ValueError, match="Must specify steps > 0, given: 0"):
        estimator.train(helpers.input_fn(), steps=0)
    with pytest.raises(ValueError, match="Must specify steps > 0, given: -1"):
        estimator.evaluate(helpers.input_fn(), steps=-1)
    with pytest.raises(TypeError, match="Hooks must be a SessionRunHook"):
        estimator.train(helpers.input_fn(), steps=1, hooks=[object()])
    no_checkpoints = _estimator(tmp_path / "n", save_checkpoints_steps=None, save_checkpoints_secs=None)
    with pytest.raises(ValueError, match="There should be a CheckpointSaverHook to use saving_listeners"):
        no_checkpoints.train(
            helpers.input_fn(), steps=1, saving_listeners=[tf.compat.v1.train.CheckpointSaverListener()]
        )
    with pytest.raises(ValueError, match="model_fn should return an EstimatorSpec."):
        OURS.Estimator(lambda features, labels: None, model_dir=str(tmp_path / "m")).train(helpers.input_fn(), steps=1)
    with pytest.raises(ValueError, match="does not include params argument, but params"):
        OURS.Estimator(lambda features: None, params={"a": 1})
    with pytest.raises(ValueError, match="`model_dir` are set both in constructor and `RunConfig`"):
        OURS.Estimator(helpers.linear_model_fn(OURS), model_dir="/a", config=OURS.RunConfig(model_dir="/b"))

    class Overriding(OURS.Estimator):
        def train(self, *args, **kwargs):
            return None

    with pytest.raises(ValueError, match="Subclasses of Estimator cannot override members of Estimator"):
        Overriding(helpers.linear_model_fn(OURS))


def test_estimator_spec_validation():
    ModeKeys, EstimatorSpec = OURS.ModeKeys, OURS.EstimatorSpec
    with tf.Graph().as_default():
        loss = tf.constant(1.0)
        with pytest.raises(ValueError, match="Missing train_op."):
            EstimatorSpec(ModeKeys.TRAIN, loss=loss)
        with pytest.raises(ValueError, match="Missing loss."):
            EstimatorSpec(ModeKeys.EVAL)
        with pytest.raises(ValueError, match="Missing predictions."):
            EstimatorSpec(ModeKeys.PREDICT)
        with pytest.raises(ValueError, match="Loss must be scalar"):
            EstimatorSpec(ModeKeys.EVAL, loss=tf.constant([1.0, 2.0]))
        with pytest.raises(TypeError, match="Values of eval_metric_ops must be \\(metric_value, update_op\\) tuples"):
            EstimatorSpec(ModeKeys.EVAL, loss=loss, eval_metric_ops={"m": loss})
        spec = EstimatorSpec(ModeKeys.EVAL, loss=tf.constant([3.0]))
        assert spec.loss.shape.as_list() == [] and spec.predictions == {} and spec.eval_metric_ops == {}
        assert isinstance(spec.scaffold, tf.compat.v1.train.Scaffold)
        predict = EstimatorSpec(ModeKeys.PREDICT, predictions={"y": loss})
        assert list(predict.export_outputs) == ["serving_default"]
        with pytest.raises(ValueError, match="mode of EstimatorSpec cannot be changed."):
            predict._replace(mode=ModeKeys.EVAL)
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="must be from the default graph"):
            EstimatorSpec(ModeKeys.EVAL, loss=loss)


def test_keras_metric_objects_as_eval_metric_ops(tmp_path):
    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable("w", [3, 1], initializer=tf.compat.v1.constant_initializer(0.5))
        pred = tf.matmul(features["x"], w)
        loss = tf.reduce_mean(tf.square(pred - labels))
        mean_prediction = tf.keras.metrics.Mean(name="mean_prediction")
        mean_prediction.update_state(pred)
        train_op = tf.compat.v1.assign_add(tf.compat.v1.train.get_global_step(), 1)
        return OURS.EstimatorSpec(
            mode, loss=loss, train_op=train_op, eval_metric_ops={"mean_prediction": mean_prediction}
        )

    estimator = OURS.Estimator(model_fn, model_dir=str(tmp_path))
    metrics = estimator.evaluate(helpers.input_fn(), steps=3)
    np.testing.assert_allclose(
        metrics["mean_prediction"], np.mean(helpers.FEATURES[:24] @ np.full([3, 1], 0.5)), rtol=1e-5
    )
    assert metrics["global_step"] == 0
