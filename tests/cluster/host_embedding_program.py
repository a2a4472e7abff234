"""A TPUEstimator program with embedding tables that the tests run on 1 host and on N (one process per host).

    python tests/cluster/host_embedding_program.py MODEL_DIR NUM_SHARDS STEPS PARTITION_STRATEGY [SLEEP_PER_STEP_SECS]

Three tables sharded over every host, one optimizer each (Adagrad, Adam, FTRL, the last with a learning rate that
depends on the global step), a gradient multiplier of the global step, a weighted 'mean' feature, an 'sqrtn' one and a sequence feature; a dense layer trained
with Adagrad across the replicas. It trains STEPS steps, evaluates 2 steps and predicts 24 rows, then writes what
this host saw to MODEL_DIR/result_host<i>.json (the metrics, the predictions by row id).
"""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import estimator as tf_estimator
from tpu_estimator import experimental as tex
from tpu_estimator.specs.embedding_spec import SEQUENCE_LENGTH_SUFFIX

RNG = np.random.RandomState(11)
ROWS, GLOBAL_BATCH, PREDICT_BATCH = 96, 24, 12
FEATURES = {
    "w": RNG.randint(0, 13, size=(ROWS, 3)).astype(np.int64),  # 0 = no id: rows of 0 to 3 ids
    "w_weight": RNG.uniform(0.5, 2.0, size=(ROWS, 3)).astype(np.float32),
    "q": RNG.randint(0, 7, size=(ROWS, 4)).astype(np.int64),
    "s": RNG.randint(0, 11, size=(ROWS, 3)).astype(np.int64),  # dense sequences of length 3
    "id": np.arange(ROWS, dtype=np.int64),
}
Y = RNG.randn(ROWS).astype(np.float32)
INIT = {
    "tw": np.random.RandomState(1).uniform(-0.5, 0.5, size=(13, 3)),
    "tq": np.random.RandomState(2).uniform(-0.5, 0.5, size=(7, 2)),
    "ts": np.random.RandomState(3).uniform(-0.5, 0.5, size=(11, 2)),
}


def _host_block(dataset, global_batch, params):
    """This host's block of every global batch, in batches of `params['batch_size']`."""
    context = params["context"]
    block = global_batch // context.num_hosts
    take = lambda v: v[context.current_host * block : (context.current_host + 1) * block]
    dataset = dataset.batch(global_batch, drop_remainder=True)
    dataset = dataset.map(lambda *t: tf.nest.map_structure(take, t if len(t) > 1 else t[0]))
    return dataset.unbatch().batch(params["batch_size"], drop_remainder=True)


def _inputs(f):
    w = tf.sparse.from_dense(f["w"])
    w_weight = tf.SparseTensor(w.indices, tf.gather_nd(f["w_weight"], w.indices), w.dense_shape)
    return {"w": w, "w_weight": w_weight, "q": tf.sparse.from_dense(f["q"]), "s": f["s"], "id": f["id"]}


def make_train_input_fn(start_step):
    """Training input from the global batch of `start_step` on, so that a resumed job reads what an uninterrupted one
    would."""

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices((FEATURES, Y)).repeat().skip(start_step * GLOBAL_BATCH)
        return _host_block(dataset, GLOBAL_BATCH, params).map(lambda f, y: (_inputs(f), y))

    return input_fn


def latest_step(model_dir):
    path = tf.train.latest_checkpoint(model_dir)
    return int(tf.train.load_variable(path, "global_step")) if path else 0


def predict_input_fn(params):
    dataset = tf.data.Dataset.from_tensor_slices({k: v[:24] for k, v in FEATURES.items()})
    return _host_block(dataset, PREDICT_BATCH, params).map(_inputs)


def model_fn(features, labels, mode, params):
    lengths = tf.cast(features["s" + SEQUENCE_LENGTH_SUFFIX], tf.float32)[:, None]
    net = tf.concat([features["w"], features["q"], tf.reshape(features["s"], [-1, 6]), lengths], axis=1)
    dense = tf.compat.v1.layers.dense(net, 1, kernel_initializer=tf.compat.v1.constant_initializer(0.3))
    logits = tf.squeeze(dense, 1)
    if mode == tf_estimator.ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(mode, predictions={"id": features["id"], "logit": logits})
    loss = tf.reduce_mean(tf.square(logits - labels))
    if mode == tf_estimator.ModeKeys.EVAL:
        metric_fn = lambda labels, logits: {"mse": tf.compat.v1.metrics.mean_squared_error(labels, logits)}
        return te.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.AdagradOptimizer(0.1))
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
    hooks = [SleepHook(params["sleep"])] if params["sleep"] else []
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=hooks)


class SleepHook(tf.compat.v1.train.SessionRunHook):
    def __init__(self, secs):
        self._secs = secs

    def after_run(self, run_context, run_values):
        time.sleep(self._secs)


def feature_configs():
    """The features of the tables: a weighted one, a plain one, a sequence."""
    return {
        "w": tex.FeatureConfig("tw", weight_key="w_weight"),
        "q": tex.FeatureConfig("tq"),
        "s": tex.FeatureConfig("ts", max_sequence_length=3),
    }


def embedding_spec(strategy):
    init = lambda v: tf.compat.v1.constant_initializer(v)
    return tex.EmbeddingConfigSpec(
        table_to_config_dict={
            "tw": tex.TableConfig(13, 3, initializer=init(INIT["tw"]), combiner="mean"),
            "tq": tex.TableConfig(
                7, 2, initializer=init(INIT["tq"]), combiner="sqrtn", optimization_parameters=tex.AdamParameters(0.05)
            ),
            "ts": tex.TableConfig(
                11,
                2,
                initializer=init(INIT["ts"]),
                learning_rate_fn=lambda step: 0.2 / (1.0 + tf.cast(step, tf.float32)),
                optimization_parameters=tex.FtrlParameters(0.2, l1_regularization_strength=0.01),
            ),
        },
        feature_to_config_dict=feature_configs(),
        optimization_parameters=tex.AdagradParameters(0.5, initial_accumulator=0.1),
        partition_strategy=strategy,
        experimental_gradient_multiplier_fn=lambda step: 2.0 / (2.0 + tf.cast(step, tf.float32)),
    )


def make_estimator(model_dir, num_shards, strategy, save_checkpoints_steps=2, sleep=0.0):
    """The program's TPUEstimator: loops of 2 steps, `sleep` seconds after each."""
    config = te.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=save_checkpoints_steps,
        tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=num_shards),
    )
    return te.TPUEstimator(
        model_fn=model_fn,
        config=config,
        params={"sleep": sleep},
        train_batch_size=GLOBAL_BATCH,
        eval_batch_size=GLOBAL_BATCH,
        predict_batch_size=PREDICT_BATCH,
        embedding_config_spec=embedding_spec(strategy),
    )


def main(argv):
    model_dir, num_shards, steps, strategy = argv[1], int(argv[2]), int(argv[3]), argv[4]
    sleep = float(argv[5]) if len(argv) > 5 else 0.0
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    estimator = make_estimator(model_dir, num_shards, strategy, sleep=sleep)
    config = estimator.config
    estimator.train(make_train_input_fn(latest_step(model_dir)), max_steps=steps)
    metrics = estimator.evaluate(make_train_input_fn(0), steps=2)
    predictions = {int(p["id"]): float(p["logit"]) for p in estimator.predict(predict_input_fn)}
    result = {"metrics": {k: float(v) for k, v in metrics.items()}, "predictions": predictions}
    with open(os.path.join(model_dir, "result_host{}.json".format(config.task_id or 0)), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv)
