"""EVAL on shards runs `evaluate(steps=N)` in one loop, as upstream on a TPU: evaluation hooks see one
`Session.run` for the N steps, every step's rows reach the metrics, the loss is replica 0's mean over the steps,
and an input shorter than N steps is a clear error."""

import time

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te

ROWS, BATCH = 48, 8  # 6 global batches
X = np.linspace(-2.0, 3.0, ROWS, dtype=np.float32).reshape(-1, 1)
Y = (np.arange(ROWS) % 3).astype(np.float32)
W = 0.5


def input_fn(params):
    dataset = tf.data.Dataset.from_tensor_slices(({"x": X}, Y))
    return dataset.batch(params["batch_size"], drop_remainder=True)


def model_fn(features, labels, mode, params):
    w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.constant_initializer(W))
    prediction = tf.matmul(features["x"], w)[:, 0]
    loss = tf.reduce_mean(tf.square(prediction - labels))

    def metric_fn(prediction, labels):
        return {
            "mean_prediction": tf.compat.v1.metrics.mean(prediction),
            "mse": tf.compat.v1.metrics.mean_squared_error(labels, prediction),
            "rows": tf.compat.v1.metrics.mean(tf.ones_like(prediction) * tf.cast(tf.size(prediction), tf.float32)),
        }

    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, eval_metrics=(metric_fn, [prediction, labels]))


class CountRuns(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.runs = 0

    def after_run(self, run_context, run_values):
        self.runs += 1


def _estimator(model_dir, shards):
    config = te.RunConfig(model_dir=model_dir, tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=shards))
    return te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=BATCH, eval_batch_size=BATCH)


@pytest.mark.parametrize("shards", [1, 2])
def test_evaluate_runs_its_steps_in_one_session_run_with_every_row_in_the_metrics(tmp_path, shards):
    estimator = _estimator(str(tmp_path), shards)
    counter = CountRuns()
    steps = 5
    metrics = estimator.evaluate(input_fn, steps=steps, hooks=[counter])
    assert counter.runs == 1  # upstream on a TPU: one run for the N steps (iterations_per_loop does not cut it)
    rows = steps * BATCH
    prediction, labels = X[:rows, 0] * W, Y[:rows]
    np.testing.assert_allclose(metrics["mean_prediction"], prediction.mean(), rtol=1e-6)
    np.testing.assert_allclose(metrics["mse"], np.mean((prediction - labels) ** 2), rtol=1e-6)
    assert metrics["rows"] == BATCH  # each step's metric tensors hold the global batch (all replicas' rows)
    # The loss is replica 0's, averaged over the steps.
    per_replica = BATCH // shards
    replica0 = [
        np.mean((prediction[s * BATCH : s * BATCH + per_replica] - labels[s * BATCH : s * BATCH + per_replica]) ** 2)
        for s in range(steps)
    ]
    np.testing.assert_allclose(metrics["loss"], np.mean(replica0), rtol=1e-6)
    assert metrics["global_step"] == 0


def test_evaluate_twice_and_after_training_reads_the_trained_variables(tmp_path):
    estimator = _estimator(str(tmp_path), 2)
    estimator.train(input_fn, max_steps=4)
    w = estimator.get_variable_value("w")[0, 0]
    first = estimator.evaluate(input_fn, steps=3)
    second = estimator.evaluate(input_fn, steps=6)
    np.testing.assert_allclose(first["mean_prediction"], (X[: 3 * BATCH, 0] * w).mean(), rtol=1e-5)
    np.testing.assert_allclose(second["mean_prediction"], (X[:, 0] * w).mean(), rtol=1e-5)
    assert first["global_step"] == second["global_step"] == 4


def test_an_input_shorter_than_the_steps_is_a_clear_error(tmp_path):
    estimator = _estimator(str(tmp_path), 2)
    with pytest.raises(ValueError, match=r"The evaluation input ended after 6 step\(s\) of a loop: .* steps <= the"):
        estimator.evaluate(input_fn, steps=8)


def _recording_model_fn(updates, fail_update_at=None, fail_step_at=None):
    """`model_fn` above, whose metric update appends to `updates` each time it runs and fails at the
    `fail_update_at`-th update, and whose step fails on the row `fail_step_at`."""

    def recording_model_fn(features, labels, mode, params):
        x = features["x"]
        if fail_step_at is not None:
            check = tf.debugging.assert_none_equal(x, X[fail_step_at, 0], message="the step check failed")
            with tf.control_dependencies([check]):
                x = tf.identity(x)
        spec = model_fn(dict(features, x=x), labels, mode, params)

        def record(prediction):
            updates.append(len(prediction))
            if len(updates) == fail_update_at:
                raise ValueError("the metric update failed")
            return prediction

        def metric_fn(prediction, labels):
            recorded = tf.numpy_function(record, [prediction], tf.float32, stateful=True)
            return {"mean_prediction": tf.compat.v1.metrics.mean(recorded)}

        return te.TPUEstimatorSpec(mode, loss=spec.loss, eval_metrics=(metric_fn, [spec.eval_metrics[1][0], labels]))

    return recording_model_fn


def _two_shard_estimator(model_dir, model_fn):
    config = te.RunConfig(model_dir=model_dir, tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=2))
    return te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=BATCH, eval_batch_size=BATCH)


def test_the_metric_update_runs_once_per_step(tmp_path):
    updates = []
    estimator = _two_shard_estimator(str(tmp_path), _recording_model_fn(updates))
    metrics = estimator.evaluate(input_fn, steps=5)
    assert updates == [BATCH] * 5  # Once per step, with the rows of both replicas.
    np.testing.assert_allclose(metrics["mean_prediction"], (X[: 5 * BATCH, 0] * W).mean(), rtol=1e-6)


def test_a_failed_metric_update_reaches_the_caller(tmp_path):
    estimator = _two_shard_estimator(str(tmp_path), _recording_model_fn([], fail_update_at=3))
    start = time.perf_counter()
    with pytest.raises(tf.errors.InvalidArgumentError, match="the metric update failed"):
        estimator.evaluate(input_fn, steps=5)
    assert time.perf_counter() - start < 60


def test_a_failed_step_reaches_the_caller(tmp_path):
    updates = []
    # Row 3 * BATCH is the first row of step 4 (2 shards: replica 0's first row).
    estimator = _two_shard_estimator(str(tmp_path), _recording_model_fn(updates, fail_step_at=3 * BATCH))
    start = time.perf_counter()
    with pytest.raises(tf.errors.InvalidArgumentError, match="the step check failed"):
        estimator.evaluate(input_fn, steps=5)
    assert time.perf_counter() - start < 60
    # The metrics update in the loop, as upstream's outfeed thread updates them beside a TPU's loop: the three steps
    # before the failed one reached them, and the evaluation reports nothing.
    assert updates == [BATCH] * 3


def _model_fn_with_metric_fn(metric_fn):
    def fn(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params)
        return te.TPUEstimatorSpec(
            mode, loss=spec.loss, train_op=spec.train_op, eval_metrics=(metric_fn, spec.eval_metrics[1])
        )

    return fn


def test_a_metric_function_that_creates_other_variables_on_its_second_call_is_a_clear_error(tmp_path):
    calls = []

    def metric_fn(prediction, labels):
        calls.append(1)
        metrics = {"mean_prediction": tf.compat.v1.metrics.mean(prediction)}
        if len(calls) == 2:  # the call after the loop, for the values, creates one more metric
            metrics["mse"] = tf.compat.v1.metrics.mean_squared_error(labels, prediction)
        return metrics

    estimator = _two_shard_estimator(str(tmp_path), _model_fn_with_metric_fn(metric_fn))
    with pytest.raises(ValueError, match=r"eval_metrics' function created more variables on its second call than on"):
        estimator.evaluate(input_fn, steps=2)


def test_get_variable_in_the_metric_function_is_a_clear_error(tmp_path):
    def metric_fn(prediction, labels):
        total = tf.compat.v1.get_variable(
            "total", [], initializer=tf.zeros_initializer(), collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES]
        )
        update = tf.compat.v1.assign_add(total, tf.reduce_sum(prediction))
        return {"total": (tf.identity(total), update)}

    estimator = _two_shard_estimator(str(tmp_path), _model_fn_with_metric_fn(metric_fn))
    with pytest.raises(ValueError, match=r"second call, after the evaluation loop: .*not tf.compat.v1.get_variable"):
        estimator.evaluate(input_fn, steps=2)


def test_v1_metrics_and_a_tf_variable_in_the_loop_equal_a_numpy_model_after_training(tmp_path):
    """AUC (thresholded counts), a mean and a sum in a `tf.Variable` (a global variable as created, restored from no
    checkpoint): every step's rows once, in the loop, after training wrote a checkpoint."""

    def metric_fn(prediction, labels):
        total = tf.Variable(0.0)
        return {
            "auc": tf.compat.v1.metrics.auc(tf.cast(labels > 0, tf.float32), tf.sigmoid(prediction)),
            "mean_prediction": tf.compat.v1.metrics.mean(prediction),
            "sum_prediction": (tf.identity(total), tf.compat.v1.assign_add(total, tf.reduce_sum(prediction))),
        }

    estimator = _two_shard_estimator(str(tmp_path), _model_fn_with_metric_fn(metric_fn))
    estimator.train(input_fn, max_steps=2)
    w = estimator.get_variable_value("w")[0, 0]
    steps = 4
    metrics = estimator.evaluate(input_fn, steps=steps)
    prediction, labels = X[: steps * BATCH, 0] * w, (Y[: steps * BATCH] > 0).astype(np.float64)
    np.testing.assert_allclose(metrics["sum_prediction"], prediction.sum(), rtol=1e-5)
    np.testing.assert_allclose(metrics["mean_prediction"], prediction.mean(), rtol=1e-6)
    # AUC by tf.compat.v1.metrics.auc's formula: 200 thresholds, trapezoidal ROC of the counts at each threshold.
    scores = 1.0 / (1.0 + np.exp(-prediction))
    epsilon = 1e-7
    thresholds = np.concatenate([[-epsilon], (np.arange(1, 199) / 199.0), [1.0 + epsilon]])
    above = scores[None, :] > thresholds[:, None]
    tp = (above & (labels[None, :] == 1)).sum(1)
    fp = (above & (labels[None, :] == 0)).sum(1)
    fn = (~above & (labels[None, :] == 1)).sum(1)
    tn = (~above & (labels[None, :] == 0)).sum(1)
    tpr = (tp + epsilon) / (tp + fn + epsilon)
    fpr = fp / (fp + tn + epsilon)
    expected = np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2.0)
    np.testing.assert_allclose(metrics["auc"], expected, rtol=1e-5)


def test_an_input_shorter_than_the_steps_names_the_steps_read_without_eval_metrics(tmp_path):
    def no_metrics_model_fn(features, labels, mode, params):
        return te.TPUEstimatorSpec(mode, loss=model_fn(features, labels, mode, params).loss)

    estimator = _two_shard_estimator(str(tmp_path), no_metrics_model_fn)
    with pytest.raises(ValueError, match=r"The evaluation input ended after 6 step\(s\) of a loop"):
        estimator.evaluate(input_fn, steps=9)


def test_a_metric_function_that_creates_fewer_variables_or_another_dtype_on_its_second_call_is_a_clear_error(
    tmp_path,
):
    calls = {"fewer": 0, "dtype": 0}

    def fewer(prediction, labels):
        calls["fewer"] += 1
        metrics = {"mean_prediction": tf.compat.v1.metrics.mean(prediction)}
        if calls["fewer"] == 1:
            metrics["mse"] = tf.compat.v1.metrics.mean_squared_error(labels, prediction)
        return metrics

    def other_dtype(prediction, labels):
        calls["dtype"] += 1
        dtype = tf.float32 if calls["dtype"] == 1 else tf.float64
        total = tf.Variable(0, dtype=dtype)
        return {
            "total": (tf.identity(total), tf.compat.v1.assign_add(total, tf.cast(tf.reduce_sum(prediction), dtype)))
        }

    with pytest.raises(ValueError, match=r"created 2 variables on its second call and 4 on its first"):
        _two_shard_estimator(str(tmp_path / "fewer"), _model_fn_with_metric_fn(fewer)).evaluate(input_fn, steps=2)
    with pytest.raises(ValueError, match=r"created variable .* as float32 \(\) on its first call and as .*float64"):
        _two_shard_estimator(str(tmp_path / "dtype"), _model_fn_with_metric_fn(other_dtype)).evaluate(input_fn, steps=2)


def test_a_metric_value_that_reads_the_inputs_is_a_clear_error(tmp_path):
    def metric_fn(prediction, labels):
        return {
            "mean_prediction": tf.compat.v1.metrics.mean(prediction),
            "last_batch_mean": (tf.reduce_mean(prediction), tf.no_op()),
        }

    estimator = _two_shard_estimator(str(tmp_path), _model_fn_with_metric_fn(metric_fn))
    with pytest.raises(ValueError, match=r"metric 'last_batch_mean': its value reads the function's input tensors"):
        estimator.evaluate(input_fn, steps=2)


def test_a_keras_metric_object_or_a_result_that_is_not_a_dict_is_a_clear_error(tmp_path):
    def keras_metric_fn(prediction, labels):
        mean = tf.keras.metrics.Mean(name="mean_prediction")
        mean.update_state(prediction)
        return {"mse": tf.compat.v1.metrics.mean_squared_error(labels, prediction), "mean_prediction": mean}

    estimator = _two_shard_estimator(str(tmp_path / "keras"), _model_fn_with_metric_fn(keras_metric_fn))
    with pytest.raises(TypeError, match=r"metric 'mean_prediction' is a Mean, not a \(value, update_op\) pair"):
        estimator.evaluate(input_fn, steps=2)

    def list_metric_fn(prediction, labels):
        return [tf.compat.v1.metrics.mean(prediction)]

    estimator = _two_shard_estimator(str(tmp_path / "list"), _model_fn_with_metric_fn(list_metric_fn))
    with pytest.raises(TypeError, match=r"must return a dict of metric name -> \(value, update_op\); got list"):
        estimator.evaluate(input_fn, steps=2)


def test_a_step_whose_second_replica_finds_no_batch_is_not_counted_as_read(tmp_path):
    # PER_HOST_V2: each replica reads its own batch of the one dataset, replica 1 after replica 0. Five
    # per-replica batches give two whole steps; in the third, replica 0 reads the fifth and replica 1 finds none.
    config = te.RunConfig(
        model_dir=str(tmp_path),
        tpu_config=te.TPUConfig(
            iterations_per_loop=2, num_shards=2, per_host_input_for_training=te.InputPipelineConfig.PER_HOST_V2
        ),
    )
    estimator = te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=BATCH, eval_batch_size=BATCH)

    def five_replica_batches(params):
        rows = 5 * params["batch_size"]
        return tf.data.Dataset.from_tensor_slices(({"x": X[:rows]}, Y[:rows])).batch(params["batch_size"], True)

    with pytest.raises(ValueError, match=r"The evaluation input ended after 2 step\(s\) of a loop") as raised:
        estimator.evaluate(five_replica_batches, steps=4)
    assert raised.value.steps_read == 2
