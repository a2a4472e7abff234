"""A training process for the model_dir ownership tests: `python -m tests.estimator.guarded_trainer MODEL_DIR MAX_STEPS
[GATE]`.

Trains `model_fn` on one fixed batch (every step sees the same data, so a run resumed from any checkpoint ends
bit-identical to an uninterrupted one). With GATE, the process writes `GATE.waiting` before the step from global step
`GATE_STEP` and waits (at most 120 s) until the file GATE exists. Prints `TRAIN_SECONDS <s>` (the time `train` took)
and exits 0, or prints the error and exits 3.
"""

import os
import sys
import time

import numpy as np
import tensorflow as tf

import tpu_estimator as te

BATCH = 8
GATE_STEP = 2
RNG = np.random.RandomState(5)
X = RNG.randn(BATCH, 4).astype(np.float32)
Y = RNG.randn(BATCH, 1).astype(np.float32)


def input_fn(params):
    return tf.data.Dataset.from_tensors((X, Y)).repeat()


def model_fn(features, labels, mode, params):
    init = tf.compat.v1.glorot_uniform_initializer(seed=1)  # The same initial weights in every process.
    hidden = tf.compat.v1.layers.dense(features, 3, activation=tf.nn.tanh, kernel_initializer=init, name="hidden")
    out = tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=init, name="out")
    if mode == te.estimator.ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(mode, predictions={"y": out})
    loss = tf.reduce_mean(tf.square(out - labels))
    if mode == te.estimator.ModeKeys.EVAL:
        return te.TPUEstimatorSpec(mode, loss=loss)
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.MomentumOptimizer(0.05, 0.9))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def make_estimator(model_dir, model=model_fn):
    config = te.RunConfig(
        model_dir=str(model_dir),
        save_checkpoints_steps=1,
        tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=1),
    )
    return te.TPUEstimator(
        model_fn=model, config=config, train_batch_size=BATCH, eval_batch_size=BATCH, predict_batch_size=BATCH
    )


class GateHook(tf.compat.v1.train.SessionRunHook):
    """Blocks before the step from global step GATE_STEP until `gate` exists (at most 120 s)."""

    def __init__(self, gate):
        self._gate = gate

    def begin(self):
        self._step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self._session = session

    def before_run(self, run_context):
        if run_context.session.run(self._step) != GATE_STEP:
            return
        open(self._gate + ".waiting", "w").close()
        deadline = time.time() + 120
        while not os.path.exists(self._gate) and time.time() < deadline:
            time.sleep(0.05)


def main(argv):
    model_dir, max_steps = argv[1], int(argv[2])
    hooks = [GateHook(argv[3])] if len(argv) > 3 else []
    start = time.time()
    try:
        make_estimator(model_dir).train(input_fn, hooks=hooks, max_steps=max_steps)
    except Exception as e:  # noqa: BLE001 - the test reads the message.
        print("TRAIN_SECONDS {:.3f}".format(time.time() - start))
        print("ERROR {}: {}".format(type(e).__name__, e))
        return 3
    print("TRAIN_SECONDS {:.3f}".format(time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
