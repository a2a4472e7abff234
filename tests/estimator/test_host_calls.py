"""host_call, eval_metrics over all shards, scaffold_fn and hooks (docs/SEMANTICS.md 5)."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import models
from tpu_estimator import estimator as tf_estimator


def _scalar_events(model_dir, tag):
    """(step, value) of every scalar event `tag` under model_dir."""
    events = []
    for path in glob.glob(os.path.join(model_dir, "**", "events.out.tfevents.*"), recursive=True):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    if value.HasField("simple_value"):
                        events.append((event.step, value.simple_value))
                    else:
                        events.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(events)


def _host_call_model_fn(model_dir, record_rows=None):
    def model_fn(features, labels, mode, params):
        out = tf.keras.layers.Dense(1, kernel_initializer="zeros")(features)
        per_example = tf.reduce_mean(tf.square(out - labels), axis=1)
        loss = tf.reduce_mean(per_example)
        opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.05))
        global_step = tf.compat.v1.train.get_global_step()
        train_op = opt.minimize(loss, global_step=global_step)

        def host_call(step, per_example):
            if record_rows is not None:
                record_rows.append(per_example.shape.as_list())
            with tf.compat.v2.summary.create_file_writer(model_dir).as_default():
                with tf.compat.v2.summary.record_if(True):
                    tf.compat.v2.summary.scalar("host_loss", tf.reduce_mean(per_example), step=step[0])
                    tf.compat.v2.summary.scalar("host_step", tf.cast(step[0], tf.float32), step=step[0])
                    return tf.compat.v1.summary.all_v2_summary_ops()

        return te.TPUEstimatorSpec(
            mode, loss=loss, train_op=train_op, host_call=(host_call, [tf.reshape(global_step, [1]), per_example])
        )

    return model_fn


@pytest.mark.parametrize(
    "ipl,every_n,expected_steps",
    [
        (1, 1, list(range(10))),
        (5, 1, list(range(10))),
        (5, 2, [0, 2, 4, 5, 7, 9]),  # every 2nd step of each loop: loop-relative steps 0, 2, 4
    ],
)
def test_host_call_runs_every_n_steps_of_each_loop(tmp_path, ipl, every_n, expected_steps):
    rows = []
    config = te.RunConfig(
        model_dir=str(tmp_path),
        tpu_config=te.TPUConfig(iterations_per_loop=ipl, num_shards=2, experimental_host_call_every_n_steps=every_n),
    )
    estimator = te.TPUEstimator(model_fn=_host_call_model_fn(str(tmp_path), rows), config=config, train_batch_size=32)
    estimator.train(models.dataset_input_fn, max_steps=10)
    steps = [step for step, _ in _scalar_events(str(tmp_path), "host_step")]
    assert steps == expected_steps
    assert [value for _, value in _scalar_events(str(tmp_path), "host_step")] == expected_steps
    # host_fn ran once on the concatenation of both shards' rows (16 + 16).
    assert rows == [[32]]


def test_host_call_values_are_the_global_batch_loss(tmp_path):
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=3, num_shards=2))
    estimator = te.TPUEstimator(model_fn=_host_call_model_fn(str(tmp_path)), config=config, train_batch_size=32)
    estimator.train(models.dataset_input_fn, max_steps=3)
    # Step 0: weights are zero, so the per-example loss is y^2; the mean over the first global batch.
    first = _scalar_events(str(tmp_path), "host_loss")[0]
    assert first[0] == 0
    np.testing.assert_allclose(first[1], np.mean(models.Y[:32] ** 2), rtol=1e-5)


def test_host_call_on_cpu_path(tmp_path):
    config = te.RunConfig(model_dir=str(tmp_path))
    estimator = te.TPUEstimator(
        model_fn=_host_call_model_fn(str(tmp_path)), config=config, use_tpu=False, train_batch_size=32
    )
    estimator.train(models.dataset_input_fn, max_steps=4)
    assert [s for s, _ in _scalar_events(str(tmp_path), "host_step")] == [0, 1, 2, 3]


def test_scalar_host_call_tensor_is_rejected(tmp_path):
    def model_fn(features, labels, mode, params):
        spec = _host_call_model_fn(str(tmp_path))(features, labels, mode, params)
        return spec._replace(host_call=(lambda loss: [], [spec.loss]))

    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(num_shards=2))
    estimator = te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=32)
    with pytest.raises(ValueError, match="should preserve batch size dimension"):
        estimator.train(models.dataset_input_fn, max_steps=1)


def test_eval_metrics_cover_the_rows_of_all_shards(tmp_path):
    estimator = models.make_estimator(tmp_path, num_shards=2)
    estimator.train(models.dataset_input_fn, max_steps=5)
    variables = models.variables_of(estimator)
    metrics = estimator.evaluate(models.dataset_input_fn, steps=3)
    predictions = models.numpy_forward(variables, models.X[:96])
    np.testing.assert_allclose(metrics["mse"], np.mean((predictions - models.Y[:96]) ** 2), rtol=1e-5)
    np.testing.assert_allclose(metrics["mean_prediction"], np.mean(predictions), rtol=1e-5, atol=1e-6)
    # Loss: replica 0's loss (its 16 rows of each batch), averaged over the 3 steps, as upstream reports it.
    shard0 = np.concatenate([np.arange(s * 32, s * 32 + 16) for s in range(3)])
    per_step = [np.mean((predictions[rows] - models.Y[rows]) ** 2) for rows in np.split(shard0, 3)]
    np.testing.assert_allclose(metrics["loss"], np.mean(per_step), rtol=1e-5)
    assert metrics["global_step"] == 5


def test_eval_on_tpu_false_runs_the_cpu_path(tmp_path):
    record = []
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(num_shards=2))
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(record=record),
        config=config,
        train_batch_size=32,
        eval_batch_size=32,
        eval_on_tpu=False,
    )
    estimator.train(models.dataset_input_fn, max_steps=2)
    del record[:]
    metrics = estimator.evaluate(models.dataset_input_fn, steps=2)
    assert [(r[0], r[1], r[3]) for r in record] == [("eval", 32, False)]
    predictions = models.numpy_forward(models.variables_of(estimator), models.X[:64])
    np.testing.assert_allclose(metrics["loss"], np.mean((predictions - models.Y[:64]) ** 2), rtol=1e-5)


class _CountingHook(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.runs = 0

    def after_run(self, run_context, run_values):
        self.runs += 1


def test_ema_scaffold_and_hooks(tmp_path):
    """scaffold_fn restoring exponential moving averages gives EMA weights at eval; hooks run per mode."""
    training_hook, evaluation_hook = _CountingHook(), _CountingHook()

    def model_fn(features, labels, mode, params):
        dense = tf.keras.layers.Dense(1, kernel_initializer="zeros", use_bias=False)
        out = dense(features)
        loss = tf.reduce_mean(tf.square(out - labels))
        ema = tf.train.ExponentialMovingAverage(decay=0.5)
        if mode == tf_estimator.ModeKeys.TRAIN:
            opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
            step = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
            with tf.control_dependencies([step]):
                train_op = ema.apply(dense.trainable_weights)
            return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[training_hook])

        def scaffold_fn():
            saver = tf.compat.v1.train.Saver(ema.variables_to_restore())
            return tf.compat.v1.train.Scaffold(saver=saver)

        metric_fn = lambda out: {"mean_out": tf.compat.v1.metrics.mean(out)}
        return te.TPUEstimatorSpec(
            mode,
            loss=loss,
            eval_metrics=(metric_fn, [out]),
            scaffold_fn=scaffold_fn,
            evaluation_hooks=[evaluation_hook],
        )

    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=2))
    estimator = te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=32, eval_batch_size=32)
    estimator.train(models.dataset_input_fn, max_steps=6)
    assert training_hook.runs == 3  # one run per loop of 2 steps
    names = estimator.get_variable_names()
    ema_name = [n for n in names if "ExponentialMovingAverage" in n][0]
    ema_kernel = estimator.get_variable_value(ema_name)
    raw_kernel = estimator.get_variable_value(ema_name.replace("/ExponentialMovingAverage", ""))
    assert np.abs(ema_kernel - raw_kernel).max() > 1e-4
    metrics = estimator.evaluate(models.dataset_input_fn, steps=1)
    assert evaluation_hook.runs == 1
    np.testing.assert_allclose(metrics["mean_out"], np.mean(models.X[:32] @ ema_kernel), rtol=1e-5)


def test_scaffold_fn_returning_none_is_an_error(tmp_path):
    def model_fn(features, labels, mode, params):
        spec = models.make_model_fn()(features, labels, mode, params)
        return spec._replace(scaffold_fn=lambda: None)

    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(num_shards=2))
    estimator = te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=32)
    with pytest.raises(ValueError, match="scaffold_fn returns None"):
        estimator.train(models.dataset_input_fn, max_steps=1)


def test_spec_validation_messages():
    mode = tf_estimator.ModeKeys.TRAIN
    with pytest.raises(ValueError, match="eval_metrics should be tuple or list"):
        te.TPUEstimatorSpec(mode, eval_metrics="x")
    with pytest.raises(ValueError, match="host_call should have two elements."):
        te.TPUEstimatorSpec(mode, host_call=(lambda: None,))
    with pytest.raises(TypeError, match=r"host_call\[0\] should be callable."):
        te.TPUEstimatorSpec(mode, host_call=(1, []))
    with pytest.raises(ValueError, match=r"eval_metrics\[1\] should be tuple or list, or dict."):
        te.TPUEstimatorSpec(mode, eval_metrics=(lambda: None, 3))
    with pytest.raises(TypeError, match="All hooks must be SessionRunHook instances, given: 3"):
        te.TPUEstimatorSpec(mode, training_hooks=[3])


def test_rewrite_and_outside_compilation_inside_model_fn(tmp_path):
    devices = []

    def model_fn(features, labels, mode, params):
        def host_fn(x):
            result = tf.reduce_sum(x, axis=1, keepdims=True)
            devices.append(result.device)
            return result

        def computation(x):
            return te.outside_compilation(host_fn, x) * 2.0

        (out,) = te.rewrite(computation, [features])
        weight = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(weight * out - labels))
        opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01))
        return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))

    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=2))
    estimator = te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=32)
    estimator.train(models.dataset_input_fn, max_steps=1)
    assert devices == ["/device:CPU:0"]  # model_fn is traced once; replica 1's copy stays on the host
    s = 2.0 * models.X[:32].sum(axis=1, keepdims=True)
    expected = -0.01 * np.mean(2 * (0.0 * s - models.Y[:32]) * s)
    np.testing.assert_allclose(estimator.get_variable_value("w"), expected, rtol=1e-5)
