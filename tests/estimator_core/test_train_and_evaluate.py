"""train_and_evaluate (local), exporters, and warm starting, on our core (upstream's as oracle where marked)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.estimator_core import helpers
from tests.estimator_core.cores import OURS, upstream


def _estimator(lib, model_dir, warm_start_from=None, learning_rate=0.1, **config_kwargs):
    config_kwargs.setdefault("save_checkpoints_steps", 10)
    return lib.Estimator(
        helpers.linear_model_fn(lib),
        config=lib.RunConfig(model_dir=str(model_dir), **config_kwargs),
        params={"learning_rate": learning_rate},
        warm_start_from=warm_start_from,
    )


def _train_and_evaluate(lib, model_dir, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    estimator = _estimator(lib, model_dir)
    serving_fn = lib.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 3])})
    exporters = [lib.FinalExporter("final", serving_fn), lib.LatestExporter("latest", serving_fn, exports_to_keep=2)]
    train_spec = lib.TrainSpec(helpers.input_fn(), max_steps=25)
    eval_spec = lib.EvalSpec(helpers.input_fn(), steps=2, exporters=exporters, throttle_secs=0)
    metrics, export_results = lib.train_and_evaluate(estimator, train_spec, eval_spec)
    return estimator, metrics, export_results


def test_train_and_evaluate_evaluates_after_each_checkpoint_and_exports(tmp_path, monkeypatch):
    estimator, metrics, export_results = _train_and_evaluate(OURS, tmp_path, monkeypatch)
    assert set(metrics) == {"loss", "mae", "global_step"} and metrics["global_step"] == 25
    np.testing.assert_allclose(metrics["loss"], estimator.evaluate(helpers.input_fn(), steps=2)["loss"], rtol=1e-6)
    # Evaluated after the checkpoints at 10, 20 and the final one at 25 (not the one at step 0).
    assert [step for step, _ in helpers.event_values(estimator.eval_dir(), "loss")][:3] == [10, 20, 25]
    # The final exporter exported once, at the end; the latest exporter after each evaluation, keeping 2.
    assert len(os.listdir(tmp_path / "export" / "final")) == 1
    assert len(os.listdir(tmp_path / "export" / "latest")) == 2
    final, latest = export_results
    assert os.path.dirname(final.decode()) == str(tmp_path / "export" / "final")
    assert os.path.dirname(latest.decode()) == str(tmp_path / "export" / "latest")
    # Nothing left to train: no new evaluation, and no results (as upstream).
    again = OURS.train_and_evaluate(
        estimator, OURS.TrainSpec(helpers.input_fn(), max_steps=25), OURS.EvalSpec(helpers.input_fn(), steps=1)
    )
    assert again == (None, None)


@pytest.mark.upstream
def test_train_and_evaluate_matches_upstream(tmp_path, monkeypatch):
    results = {}
    for lib in (OURS, upstream()):
        model_dir = tmp_path / lib.name
        estimator, metrics, export_results = _train_and_evaluate(lib, model_dir, monkeypatch)
        results[lib.name] = (
            metrics,
            helpers.event_values(estimator.eval_dir(), "loss"),
            helpers.model_dir_files(str(model_dir)),
            [len(os.listdir(model_dir / "export" / name)) for name in ("final", "latest")],
        )
    ours, theirs = results["ours"], results["upstream"]
    assert ours[0].keys() == theirs[0].keys()
    for key in theirs[0]:
        np.testing.assert_allclose(ours[0][key], theirs[0][key], rtol=1e-5)
    assert [s for s, _ in ours[1]] == [s for s, _ in theirs[1]]
    np.testing.assert_allclose([v for _, v in ours[1]], [v for _, v in theirs[1]], rtol=1e-5)
    assert ours[2:] == theirs[2:]


def _set_tf_config(monkeypatch, task_type, index=0, cluster=None, **extra):
    cluster = cluster or {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps(dict(cluster=cluster, task={"type": task_type, "index": index}, **extra))
    )


def _specs():
    return OURS.TrainSpec(helpers.input_fn(), max_steps=1), OURS.EvalSpec(helpers.input_fn())


def test_distributed_task_errors(tmp_path, monkeypatch):
    _set_tf_config(monkeypatch, "evaluator", index=1)
    with pytest.raises(ValueError, match="only be one `evaluator` task .*Given task id 1"):
        OURS.train_and_evaluate(_estimator(OURS, tmp_path), *_specs())
    _set_tf_config(monkeypatch, "other", cluster={"chief": ["127.0.0.1:1"], "other": ["127.0.0.1:2"]})
    with pytest.raises(ValueError, match=r"Task type other is not supported. Supported task types are \['chief', "):
        OURS.train_and_evaluate(_estimator(OURS, tmp_path), *_specs())


def test_worker_start_delay_and_std_server_of_a_one_task_cluster(monkeypatch):
    from tpu_estimator.estimator_core import distributed_training

    delays = {}
    for task_type, index, max_delay in (
        ("chief", 0, None),
        ("worker", 0, None),
        ("worker", 2, None),
        ("worker", 20, None),
        ("worker", 2, 7),
    ):
        _set_tf_config(
            monkeypatch, task_type, index, cluster={"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"] * 21}
        )
        config = OURS.RunConfig(experimental_max_worker_delay_secs=max_delay)
        delays[(task_type, index, max_delay)] = distributed_training.worker_start_delay_secs(config)
    assert list(delays.values()) == [0, 5, 15, 60, 7]
    # A cluster of one chief: no server (its session is in-process), as upstream.
    _set_tf_config(monkeypatch, "chief", cluster={"chief": ["127.0.0.1:1"]})
    config = OURS.RunConfig()
    assert config.master == "" and distributed_training.start_std_server(config) is None


def test_spec_validation():
    with pytest.raises(TypeError, match="`input_fn` must be callable"):
        OURS.TrainSpec(input_fn=1)
    with pytest.raises(ValueError, match="Must specify max_steps > 0, given: 0"):
        OURS.TrainSpec(helpers.input_fn(), max_steps=0)
    with pytest.raises(ValueError, match="Must specify steps > 0, given: 0"):
        OURS.EvalSpec(helpers.input_fn(), steps=0)
    with pytest.raises(ValueError, match="Must specify throttle_secs >= 0"):
        OURS.EvalSpec(helpers.input_fn(), throttle_secs=-1)
    with pytest.raises(TypeError, match="`exporters` must be an Exporter"):
        OURS.EvalSpec(helpers.input_fn(), exporters=[object()])
    serving_fn = OURS.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 3])})
    with pytest.raises(ValueError, match="`exporters` must have unique names"):
        OURS.EvalSpec(helpers.input_fn(), exporters=[OURS.FinalExporter("a", serving_fn)] * 2)
    with pytest.raises(ValueError, match="`exports_to_keep`, if provided, must be positive"):
        OURS.LatestExporter("a", serving_fn, exports_to_keep=0)
    spec = OURS.EvalSpec(helpers.input_fn())
    assert (spec.steps, spec.start_delay_secs, spec.throttle_secs, spec.exporters) == (100, 120, 600, ())


def test_warm_start_from_a_checkpoint_dir_a_saved_model_and_settings(tmp_path):
    source = _estimator(OURS, tmp_path / "source")
    source.train(helpers.input_fn(), max_steps=30)
    w, b = source.get_variable_value("w"), source.get_variable_value("b")
    export_dir = source.export_saved_model(
        str(tmp_path / "export"), OURS.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 3])})
    ).decode()

    # A path warm-starts every variable; learning_rate 0 keeps the warm-started values.
    for name, warm_start_from in (("dir", str(tmp_path / "source")), ("saved_model", export_dir)):
        target = _estimator(OURS, tmp_path / name, warm_start_from=warm_start_from, learning_rate=0.0)
        target.train(helpers.input_fn(), steps=2)
        np.testing.assert_allclose(target.get_variable_value("w"), w, err_msg=name)
        np.testing.assert_allclose(target.get_variable_value("b"), b, err_msg=name)
        assert target.get_variable_value("global_step") == 2  # Not warm-started: trainable variables only.

    # WarmStartSettings: only `w`; `b` keeps its initial value.
    settings = OURS.WarmStartSettings(str(tmp_path / "source"), vars_to_warm_start="w")
    partial = _estimator(OURS, tmp_path / "partial", warm_start_from=settings, learning_rate=0.0)
    partial.train(helpers.input_fn(), steps=1)
    np.testing.assert_allclose(partial.get_variable_value("w"), w)
    np.testing.assert_allclose(partial.get_variable_value("b"), [0.0])

    # Predict and evaluate without a checkpoint of their own also warm start.
    fresh = _estimator(OURS, tmp_path / "fresh", warm_start_from=str(tmp_path / "source"))
    prediction = next(fresh.predict(helpers.predict_input_fn(1)))
    np.testing.assert_allclose(prediction["y"], helpers.FEATURES[0] @ w + b, rtol=1e-5)
    # Once the target has a checkpoint, training resumes from it instead.
    target = _estimator(OURS, tmp_path / "dir", warm_start_from=str(tmp_path / "elsewhere"), learning_rate=0.0)
    target.train(helpers.input_fn(), steps=1)
    np.testing.assert_allclose(target.get_variable_value("w"), w)

    with pytest.raises(ValueError, match="`ckpt_to_initialize_from` MUST be set in WarmStartSettings"):
        OURS.WarmStartSettings("")
    with pytest.raises(ValueError, match="warm_start_from must be a string or a WarmStartSettings"):
        _estimator(OURS, tmp_path / "bad", warm_start_from=3)
