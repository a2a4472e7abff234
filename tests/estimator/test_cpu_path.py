"""use_tpu=False behaves as upstream's CPU path (upstream TPUEstimator is the oracle)."""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import models


def _model_fn_for(spec_cls, optimizer_wrapper):
    record = []

    def model_fn(features, labels, mode, params):
        record.append((params["batch_size"], params.get("use_tpu"), "context" in params))
        hidden = tf.compat.v1.layers.dense(
            features, 4, activation=tf.nn.tanh, kernel_initializer=tf.compat.v1.constant_initializer(0.1)
        )
        out = tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_mean(tf.square(out - labels))
        opt = optimizer_wrapper(tf.compat.v1.train.AdamOptimizer(0.01))
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        metric_fn = lambda labels, out: {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, out)}
        return spec_cls(mode, loss=loss, train_op=train_op, eval_metrics=(metric_fn, [labels, out]))

    return model_fn, record


@pytest.mark.upstream
def test_use_tpu_false_matches_upstream(tmp_path):
    upstream = tf.compat.v1.estimator.tpu
    ours_fn, ours_record = _model_fn_for(te.TPUEstimatorSpec, te.CrossShardOptimizer)
    # Upstream's CrossShardOptimizer has no CPU kernel: upstream programs wrap only when params["use_tpu"].
    theirs_fn, theirs_record = _model_fn_for(upstream.TPUEstimatorSpec, lambda opt: opt)
    ours, theirs = (
        lib.TPUEstimator(
            model_fn=model_fn,
            config=lib.RunConfig(model_dir=str(tmp_path / name)),
            use_tpu=False,
            train_batch_size=32,
            eval_batch_size=32,
        )
        for lib, model_fn, name in ((te, ours_fn, "ours"), (upstream, theirs_fn, "theirs"))
    )
    for estimator in (ours, theirs):
        estimator.train(models.dataset_input_fn, max_steps=7)
    ours_metrics = ours.evaluate(models.dataset_input_fn, steps=3)
    theirs_metrics = theirs.evaluate(models.dataset_input_fn, steps=3)
    assert sorted(ours.get_variable_names()) == sorted(theirs.get_variable_names())
    for name in theirs.get_variable_names():
        np.testing.assert_allclose(
            ours.get_variable_value(name), theirs.get_variable_value(name), rtol=1e-6, err_msg=name
        )
    assert set(ours_metrics) == set(theirs_metrics) == {"loss", "mae", "global_step"}
    for key in theirs_metrics:
        np.testing.assert_allclose(ours_metrics[key], theirs_metrics[key], rtol=1e-6)
    # The CPU path gives model_fn the global batch, use_tpu=False and no context, like upstream.
    assert ours_record[0] == theirs_record[0] == (32, False, False)
