"""`per_host_input_for_training=SLICED` is refused by `train()` (SLICED is an evaluation/prediction input
configuration; upstream silently trains it as PER_HOST_V1); evaluation and prediction with it still run SLICED."""

import os

import numpy as np
import pytest

import tpu_estimator as te
from tests.conformance import cases, programs

CASE = dict(cases.BASE_CASE, mode="train_eval", input_config="SLICED", optimizer="sgd")


def _estimator(model_dir, use_tpu=True):
    config = te.TPUConfig(num_shards=2, per_host_input_for_training=te.InputPipelineConfig.SLICED)
    return te.TPUEstimator(
        model_fn=programs.make_model_fn(CASE),
        config=te.RunConfig(model_dir=str(model_dir), tpu_config=config),
        use_tpu=use_tpu,
        train_batch_size=programs.G,
        eval_batch_size=programs.G,
        predict_batch_size=programs.PREDICT_BATCH,
    )


@pytest.mark.parametrize("use_tpu", [True, False])
def test_train_with_sliced_raises_before_calling_input_fn(tmp_path, use_tpu):
    calls = []

    def input_fn(params):
        calls.append(params)
        return programs.make_input_fn(CASE, "train")(params)

    expected = (
        r"per_host_input_for_training=InputPipelineConfig.SLICED \(5\) cannot be used for training.*"
        r"eval_training_input_configuration=InputPipelineConfig.SLICED"
    )
    with pytest.raises(ValueError, match=expected):
        _estimator(tmp_path, use_tpu).train(input_fn, max_steps=1)
    assert calls == []
    assert not os.path.exists(os.path.join(str(tmp_path), "checkpoint"))


def test_evaluate_and_predict_with_sliced_training_configuration_run_sliced(tmp_path):
    # Trained elsewhere (PER_HOST_V1 into the same model_dir), then evaluated/predicted with the SLICED config.
    trainer = programs.make_estimator(dict(CASE, input_config="PER_HOST_V1"), str(tmp_path))
    trainer.train(programs.make_input_fn(CASE, "train"), max_steps=programs.STEPS)
    state = programs.train_oracle(CASE)
    estimator = _estimator(tmp_path)
    metrics = estimator.evaluate(programs.make_input_fn(CASE, "eval"), steps=programs.EVAL_STEPS)
    want = programs.eval_oracle(CASE, state)  # replica 0's loss of a SLICED split
    np.testing.assert_allclose(metrics["loss"], want["loss"], rtol=1e-4)
    np.testing.assert_allclose(metrics["mean_logit"], want["mean_logit"], rtol=1e-4, atol=1e-6)
    predictions = [p["logit"] for p in estimator.predict(programs.make_input_fn(CASE, "predict"))]
    np.testing.assert_allclose(predictions, programs.forward(CASE, state, np.arange(programs.N_PRED))[0], atol=2e-5)
    assert cases.known_failure(CASE) is None
