"""The model every spelling program trains, given the API objects the program looked up its own way.

A linear regression y = x.w + b on 8 fixed rows, trained with TPUEstimator(use_tpu=True) on 2 shards: every step
uses all 8 rows (global batch 8), so the trained values do not depend on how rows are split across shards and
tests/compat/test_spellings.py can compare them with a NumPy model of gradient descent. The program's results
(weights, evaluation loss, predictions, classes of the objects it used, and the training losses that a host_call
wrote with the program's summary API, if it has one) go to the JSON file named by `--results`.
"""

import argparse
import json
import os

import numpy as np
import tensorflow.compat.v1 as tf

X = np.array(
    [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0], [-1.0, 0.5], [0.5, 2.0], [-2.0, -1.0], [1.5, 0.5]],
    dtype=np.float32,
)
Y = (X @ np.array([2.0, -1.0], dtype=np.float32) + 0.5).reshape(-1, 1)
LEARNING_RATE = 0.1
TRAIN_STEPS = 3


def _flags():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--tpu", default=None)
    return parser.parse_known_args()[0]


def _name(cls):
    return "{}.{}".format(cls.__module__, cls.__qualname__)


def api_of(estimators, configs=None, **others):
    """The `api` dict of `run` from the namespaces a program imported, as it spells them.

    Args:
      estimators: where the program takes `TPUEstimator` and `TPUEstimatorSpec` from.
      configs: where it takes `RunConfig`, `TPUConfig` and `InputPipelineConfig` from (default `estimators`).
      **others: the other names (`CrossShardOptimizer`, `ModeKeys`, `TPUClusterResolver`, ...).
    """
    configs = configs or estimators
    api = dict(
        TPUEstimator=estimators.TPUEstimator,
        TPUEstimatorSpec=estimators.TPUEstimatorSpec,
        RunConfig=configs.RunConfig,
        TPUConfig=configs.TPUConfig,
        PER_HOST_V2=configs.InputPipelineConfig.PER_HOST_V2,
    )
    api.update(others)
    return api


def run(api, summary=None):
    """Trains, evaluates and predicts with the objects in `api`; writes the results.

    Args:
      api: dict with TPUEstimator, TPUEstimatorSpec, RunConfig, TPUConfig, CrossShardOptimizer, ModeKeys,
        TPUClusterResolver, and optionally Estimator and BaseRunConfig (the Estimator core's, for isinstance checks)
        and PER_HOST_V2 (an InputPipelineConfig value).
      summary: a TF1 `tf.contrib.summary` module: a host_call writes the training loss with it.
    """
    flags = _flags()
    ModeKeys = api["ModeKeys"]

    def model_fn(features, labels, mode, params):
        del params
        w = tf.get_variable("w", [2, 1], initializer=tf.zeros_initializer())
        b = tf.get_variable("b", [1], initializer=tf.zeros_initializer())
        prediction = tf.matmul(features["x"], w) + b
        if mode == ModeKeys.PREDICT:
            return api["TPUEstimatorSpec"](mode, predictions={"y": prediction})
        loss = tf.reduce_mean(tf.square(prediction - labels))
        if mode == ModeKeys.EVAL:
            return api["TPUEstimatorSpec"](
                mode,
                loss=loss,
                eval_metrics=(lambda y, t: {"mse": tf.metrics.mean_squared_error(t, y)}, [prediction, labels]),
            )
        optimizer = api["CrossShardOptimizer"](tf.train.GradientDescentOptimizer(LEARNING_RATE))
        global_step = tf.train.get_global_step()
        train_op = optimizer.minimize(loss, global_step=global_step)
        host_call = None
        if summary is not None:

            def host_call_fn(step, losses):
                with summary.create_file_writer(flags.model_dir).as_default():
                    with summary.always_record_summaries():
                        summary.scalar("train_loss", tf.reduce_mean(losses), step=step[0])
                        return summary.all_summary_ops()

            host_call = (host_call_fn, [tf.reshape(global_step, [1]), tf.reshape(loss, [1])])
        return api["TPUEstimatorSpec"](mode, loss=loss, train_op=train_op, host_call=host_call)

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices(({"x": X}, Y))
        return dataset.repeat().batch(params["batch_size"], drop_remainder=True)

    def predict_input_fn(params):
        return tf.data.Dataset.from_tensor_slices({"x": X}).batch(params["batch_size"], drop_remainder=True)

    resolver = api["TPUClusterResolver"](tpu=flags.tpu)
    tpu_config_args = dict(iterations_per_loop=TRAIN_STEPS, num_shards=2)
    if "PER_HOST_V2" in api:
        tpu_config_args["per_host_input_for_training"] = api["PER_HOST_V2"]
    config = api["RunConfig"](
        cluster=resolver, model_dir=flags.model_dir, tpu_config=api["TPUConfig"](**tpu_config_args)
    )
    estimator = api["TPUEstimator"](
        model_fn=model_fn,
        config=config,
        use_tpu=True,
        train_batch_size=8,
        eval_batch_size=8,
        predict_batch_size=8,
    )
    estimator.train(input_fn, max_steps=TRAIN_STEPS)
    metrics = estimator.evaluate(input_fn, steps=1)
    predictions = [float(p["y"][0]) for p in estimator.predict(predict_input_fn)]
    checks = {}
    if "Estimator" in api:
        checks["isinstance_Estimator"] = isinstance(estimator, api["Estimator"])
    if "BaseRunConfig" in api:
        checks["isinstance_RunConfig"] = isinstance(config, api["BaseRunConfig"])
    results = {
        "classes": {key: _name(api[key]) for key in ("TPUEstimator", "RunConfig", "TPUConfig", "TPUClusterResolver")},
        "estimator_class": _name(type(estimator)),
        "checks": checks,
        "weights": estimator.get_variable_value("w")[:, 0].tolist(),
        "bias": float(estimator.get_variable_value("b")[0]),
        "eval_loss": float(metrics["loss"]),
        "eval_mse": float(metrics["mse"]),
        "global_step": int(metrics["global_step"]),
        "predictions": predictions,
    }
    if summary is not None:
        losses = {}
        for path in tf.io.gfile.glob(os.path.join(flags.model_dir, "events.out.tfevents.*")):
            for event in tf.train.summary_iterator(path):
                for value in event.summary.value:
                    if value.tag == "train_loss":
                        losses[int(event.step)] = (
                            float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                        )
        results["train_losses"] = [losses[step] for step in sorted(losses)]
        results["train_loss_steps"] = sorted(losses)
    with open(flags.results, "w") as f:
        json.dump(results, f)
