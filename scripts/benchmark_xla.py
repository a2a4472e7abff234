"""Plain vs XLA-compiled shards (`RunConfig(xla_compile_shards=True)`), in one invocation.

Trains the same dense model on the same data with and without XLA, interleaved, and prints examples/sec after
warm-up (median of --runs) and the ratio XLA/plain.

  python scripts/benchmark_xla.py --num_shards=2 --batch=512 --steps=200 --runs=3
"""

import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # Quiet TensorFlow's C++ start-up logs (before importing it).

import numpy as np
import tensorflow as tf
from absl import app, flags

import tpu_estimator as te

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_shards", 2, "Shards.")
flags.DEFINE_integer("batch", 512, "Global batch size.")
flags.DEFINE_integer("steps", 200, "Timed steps per run (after a warm-up loop).")
flags.DEFINE_integer("iterations_per_loop", 50, "Steps per Session.run.")
flags.DEFINE_integer("runs", 3, "Runs per configuration (median reported).")
flags.DEFINE_list("hidden", ["512", "256"], "Hidden layer widths.")


def _input_fn(params):
    rng = np.random.RandomState(0)
    x = rng.randn(4096, 256).astype(np.float32)
    y = rng.randn(4096, 1).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    return dataset.batch(params["batch_size"], drop_remainder=True).prefetch(4)


def _model_fn(features, labels, mode, params):
    net = features
    for width in FLAGS.hidden:
        net = tf.compat.v1.layers.dense(net, int(width), activation=tf.nn.relu)
    out = tf.compat.v1.layers.dense(net, 1)
    loss = tf.reduce_mean(tf.square(out - labels))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(1e-3))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def _examples_per_sec(xla: bool) -> float:
    config = te.RunConfig(
        model_dir=tempfile.mkdtemp(),
        xla_compile_shards=xla,
        save_checkpoints_steps=10**9,
        tpu_config=te.TPUConfig(iterations_per_loop=FLAGS.iterations_per_loop, num_shards=FLAGS.num_shards),
    )
    estimator = te.TPUEstimator(model_fn=_model_fn, config=config, train_batch_size=FLAGS.batch)
    estimator.train(_input_fn, max_steps=FLAGS.iterations_per_loop)  # warm-up: graph, session, XLA compilation

    class Timer(tf.compat.v1.train.SessionRunHook):
        """Times the training loops only (not graph building or session creation)."""

        def __init__(self):
            self.seconds = 0.0

        def before_run(self, run_context):
            self._start = time.time()

        def after_run(self, run_context, run_values):
            self.seconds += time.time() - self._start

    timer = Timer()
    estimator.train(_input_fn, steps=FLAGS.steps, hooks=[timer])
    return FLAGS.steps * FLAGS.batch / timer.seconds


def main(argv):
    del argv
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    results = {False: [], True: []}
    for _ in range(FLAGS.runs):
        for xla in (False, True):
            results[xla].append(_examples_per_sec(xla))
    plain, xla = statistics.median(results[False]), statistics.median(results[True])
    print(
        "shards={} batch={} hidden={} steps={} ipl={}".format(
            FLAGS.num_shards, FLAGS.batch, FLAGS.hidden, FLAGS.steps, FLAGS.iterations_per_loop
        )
    )
    print("plain  examples/sec median {:,.0f}  runs {}".format(plain, ["{:,.0f}".format(r) for r in results[False]]))
    print("xla    examples/sec median {:,.0f}  runs {}".format(xla, ["{:,.0f}".format(r) for r in results[True]]))
    print("ratio xla/plain {:.2f}".format(xla / plain))


if __name__ == "__main__":
    app.run(main)
