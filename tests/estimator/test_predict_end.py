"""The end of `predict()`'s input ends it cleanly (`predict_step.EndOfPredictionInput`): every row predicted once,
nothing of the all-padding step yielded, user hooks never see that step, and TensorFlow's runtime logs no aborted
run (a process with its warnings shown)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import experimental as tex

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = np.arange(40, dtype=np.float32).reshape(10, 4) / 10.0
READOUT = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
ROWS = 13  # predict batch 4 on 2 shards: 3 full batches and a partial one
IDS = (np.arange(ROWS) * 7 % 10).astype(np.int64)


class _CountingHook(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.runs = 0

    def after_run(self, run_context, run_values):
        self.runs += 1


def _estimator(model_dir, input_mode, embeddings, hook):
    def model_fn(features, labels, mode, params):
        if embeddings:
            rows = features["ids"]  # the embedding activations, [B, 4]
        else:
            rows = tf.gather(tf.constant(TABLE), features["ids"])
        score = tf.reduce_sum(rows * READOUT, axis=1)
        return te.TPUEstimatorSpec(mode, predictions={"score": score, "row": features["row"]}, prediction_hooks=[hook])

    embedding_spec = None
    if embeddings:
        table = tex.TableConfig(vocabulary_size=10, dimension=4, initializer=tf.constant_initializer(TABLE))
        embedding_spec = tex.EmbeddingConfigSpec(
            table_to_config_dict={"t": table},
            feature_to_config_dict={"ids": tex.FeatureConfig(table_id="t")},
            optimization_parameters=tex.AdagradParameters(learning_rate=0.1),
        )
    return te.TPUEstimator(
        model_fn=model_fn,
        config=te.RunConfig(
            model_dir=model_dir,
            tpu_config=te.TPUConfig(num_shards=2, per_host_input_for_training=input_mode),
        ),
        train_batch_size=4,
        predict_batch_size=4,
        embedding_config_spec=embedding_spec,
    )


def _input_fn(params):
    features = {"ids": IDS, "row": np.arange(ROWS, dtype=np.int64)}
    return tf.data.Dataset.from_tensor_slices(features).batch(params["batch_size"])


@pytest.mark.parametrize("embeddings", [True, False], ids=["embeddings", "dense"])
@pytest.mark.parametrize(
    "input_mode", [te.InputPipelineConfig.PER_HOST_V1, te.InputPipelineConfig.PER_HOST_V2], ids=["v1", "v2"]
)
@pytest.mark.parametrize("single", [True, False], ids=["rows", "batches"])
def test_every_row_is_predicted_once_and_no_hook_sees_the_padding_step(tmp_path, embeddings, input_mode, single):
    hook = _CountingHook()
    estimator = _estimator(str(tmp_path), input_mode, embeddings, hook)
    predictions = list(estimator.predict(_input_fn, yield_single_examples=single))
    if single:
        rows = [int(p["row"]) for p in predictions]
        scores = [float(p["score"]) for p in predictions]
    else:
        assert [len(batch["row"]) for batch in predictions] == [4, 4, 4, 1]  # no empty batch at the end
        rows = [int(r) for batch in predictions for r in batch["row"]]
        scores = [float(s) for batch in predictions for s in batch["score"]]
    assert sorted(rows) == list(range(ROWS))
    np.testing.assert_allclose(scores, (TABLE[IDS] @ READOUT)[rows], rtol=1e-6)
    assert hook.runs == 4  # the batches, not the all-padding step after them


def test_an_empty_prediction_input_yields_nothing(tmp_path):
    hook = _CountingHook()
    estimator = _estimator(str(tmp_path), te.InputPipelineConfig.PER_HOST_V2, True, hook)
    assert list(estimator.predict(lambda params: _input_fn(params).take(0))) == []
    assert hook.runs == 0


@pytest.mark.timeout(300)
def test_predict_logs_no_aborted_run(tmp_path):
    program = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {REPO!r})
        import tensorflow as tf
        import tpu_estimator as te
        from tests.estimator import test_predict_end as t
        out = {{}}
        for embeddings in (True, False):
            estimator = t._estimator({str(tmp_path)!r} + str(embeddings), te.InputPipelineConfig.PER_HOST_V1,
                                     embeddings, t._CountingHook())
            out[str(embeddings)] = len(list(estimator.predict(t._input_fn)))
        print("RESULT", json.dumps(out))
        """
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert result == {"True": ROWS, "False": ROWS}
    assert "rendezvous" not in proc.stderr and "ABORTED" not in proc.stderr, proc.stderr[-3000:]
