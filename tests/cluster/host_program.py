"""A TPUEstimator program the tests run on 1 host and on N hosts (one process per host, `tpu-estimator-hosts`).

    python tests/cluster/host_program.py MODEL_DIR NUM_SHARDS STEPS [SLEEP_PER_STEP_SECS [TIMEOUT_MS]]

The same file runs everywhere: under `TF_CONFIG` (set by `tpu_estimator.app.hosts`) it is one host of a job. It
trains a dense model (Adam, two layers, cross-replica mean; a host call writing summaries of every replica's rows)
for STEPS steps, evaluates 2 steps, predicts 24 rows and
exports a SavedModel into MODEL_DIR/export,
(the chief's last checkpoint written 3 s late), then writes what this host saw to MODEL_DIR/result_host<i>.json: the evaluation metrics and the predictions by row id.
Each host reads its block of every global batch (PER_HOST_V2), as replicas are host-major; training input starts at
the global batch of the latest checkpoint's step, so a resumed job reads what an uninterrupted one would.
"""

import functools
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import estimator as tf_estimator

RNG = np.random.RandomState(3)
ROWS = 256
X = RNG.randn(ROWS, 5).astype(np.float32)
Y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.float32)
IDS = np.arange(ROWS, dtype=np.int64)
GLOBAL_BATCH = 24
PREDICT_BATCH = 12


def _host_block(dataset, global_batch, params):
    """This host's block of every global batch, in batches of `params['batch_size']`."""
    context = params["context"]
    hosts, host = context.num_hosts, context.current_host
    block = global_batch // hosts
    dataset = dataset.batch(global_batch, drop_remainder=True)
    dataset = dataset.map(lambda *t: tf.nest.map_structure(lambda v: v[host * block : (host + 1) * block], t))
    return dataset.unbatch().batch(params["batch_size"], drop_remainder=True)


def make_input_fn(start_step: int):
    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices(({"x": X, "id": IDS}, Y)).repeat()
        return _host_block(dataset.skip(start_step * GLOBAL_BATCH), GLOBAL_BATCH, params)

    return input_fn


def latest_step(model_dir: str) -> int:
    path = tf.train.latest_checkpoint(model_dir)
    return int(tf.train.load_variable(path, "global_step")) if path else 0


def predict_input_fn(params):
    dataset = tf.data.Dataset.from_tensor_slices({"x": X[:24], "id": IDS[:24]})
    return _host_block(dataset, PREDICT_BATCH, params).map(lambda *t: t[0])


def serving_input_receiver_fn():
    features = {
        "x": tf.compat.v1.placeholder(tf.float32, [None, 5], name="x"),
        "id": tf.compat.v1.placeholder(tf.int64, [None], name="id"),
    }
    return tf_estimator.export.ServingInputReceiver(features, features)


class SlowFinalSave(tf.compat.v1.train.CheckpointSaverListener):
    """Delays the chief's last checkpoint: another host that read model_dir as soon as its own train() returned would
    evaluate an older checkpoint."""

    def __init__(self, last_step, secs=3.0):
        self._last_step, self._secs = last_step, secs

    def before_save(self, session, global_step_value):
        if global_step_value >= self._last_step:
            time.sleep(self._secs)


class SleepHook(tf.compat.v1.train.SessionRunHook):
    def __init__(self, secs):
        self._secs = secs

    def after_run(self, run_context, run_values):
        time.sleep(self._secs)


def model_fn(features, labels, mode, params):
    hidden = tf.compat.v1.layers.dense(
        features["x"],
        params.get("hidden", 8),
        activation=tf.nn.tanh,
        kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=1),
    )
    logits = tf.squeeze(
        tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=2)), 1
    )
    if mode == tf_estimator.ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(mode, predictions={"id": features["id"], "logit": logits})
    loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
    if mode == tf_estimator.ModeKeys.EVAL:
        metric_fn = lambda labels, logits: {
            "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.cast(logits > 0, tf.float32)),
            "mean_logit": tf.compat.v1.metrics.mean(logits),
        }
        return te.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(0.05))
    global_step = tf.compat.v1.train.get_global_step()
    train_op = optimizer.minimize(loss, global_step)
    hooks = [SleepHook(params["sleep"])] if params["sleep"] else []
    per_example_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    host_call = (
        functools.partial(host_fn, params["model_dir"]),
        {"step": tf.reshape(global_step, [1]), "id": features["id"], "loss": per_example_loss},
    )
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=hooks, host_call=host_call)


def host_fn(model_dir, step, id, loss):
    """Summaries of every replica's rows (on a pod, of the global batch): their count, id sum and mean loss."""
    with tf.summary.create_file_writer(model_dir).as_default(), tf.summary.record_if(True):
        tf.summary.scalar("host_call/rows", tf.cast(tf.size(id), tf.float32), step=step[0])
        tf.summary.scalar("host_call/id_sum", tf.cast(tf.reduce_sum(id), tf.float32), step=step[0])
        tf.summary.scalar("host_call/loss", tf.reduce_mean(loss), step=step[0])
        return tf.compat.v1.summary.all_v2_summary_ops()


def call_result(call) -> dict:
    """Runs `call()`: what the caller got (`error`: the exception's type name or None, `message`) and its seconds."""
    start = time.monotonic()
    try:
        call()
        result = {"error": None}
    except Exception as error:  # what the caller gets, whatever its type
        result = {"error": type(error).__name__, "message": str(error)}
    result["secs"] = time.monotonic() - start
    return result


def main(argv):
    model_dir, num_shards, steps = argv[1], int(argv[2]), int(argv[3])
    sleep = float(argv[4]) if len(argv) > 4 else 0.0
    session_config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=int(argv[5])) if len(argv) > 5 else None
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    config = te.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=2,
        session_config=session_config,
        tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=num_shards),
    )
    estimator = te.TPUEstimator(
        model_fn=model_fn,
        config=config,
        params={"sleep": sleep, "model_dir": model_dir},
        train_batch_size=GLOBAL_BATCH,
        eval_batch_size=GLOBAL_BATCH,
        predict_batch_size=PREDICT_BATCH,
    )
    listeners = [SlowFinalSave(steps)] if config.is_chief else []
    estimator.train(make_input_fn(latest_step(model_dir)), max_steps=steps, saving_listeners=listeners)
    metrics = estimator.evaluate(make_input_fn(0), steps=2)
    predictions = {int(p["id"]): float(p["logit"]) for p in estimator.predict(predict_input_fn)}
    exported = estimator.export_saved_model(os.path.join(model_dir, "export"), serving_input_receiver_fn)
    host = config.task_id or 0
    result = {
        "exported": tf.compat.as_str(exported),
        "is_chief": bool(config.is_chief),
        "metrics": {k: float(v) for k, v in metrics.items()},
        "predictions": predictions,
        "eval_dir": estimator.eval_dir(),
    }
    with open(os.path.join(model_dir, "result_host{}.json".format(host)), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv)
