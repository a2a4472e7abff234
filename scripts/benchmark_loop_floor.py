"""The floor of workload D: what `iterations_per_loop` can gain for a tiny model in plain TensorFlow.

Builds workload D's dense model (batch 32, 8 inputs (2 tables x dim 4) -> ReLU 8 -> logit, sigmoid cross-entropy, Adagrad) as a
bare TF1 `tf.compat.v1.while_loop` of training steps on a constant batch: no input pipeline, no embedding, no
estimator. One `Session.run` runs `--iterations_per_loop` steps. Prints steps/sec for 1 and for N steps per run
(median of --runs, interleaved) and their ratio: the most that looping in-graph can give on this machine, since
every step still executes the model's ~50 TensorFlow ops one by one.

  python scripts/benchmark_loop_floor.py --runs=3
"""

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from absl import (
    app,
    flags,
)

FLAGS = flags.FLAGS
flags.DEFINE_integer("iterations_per_loop", 100, "Steps per Session.run of the looped line.")
flags.DEFINE_integer("steps", 3000, "Timed steps per run and line.")
flags.DEFINE_integer("runs", 3, "Runs per line (median reported).")
flags.DEFINE_integer("batch", 32, "Batch size.")


def _build(batch: int):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((batch, 8), dtype=np.float32))
    y = tf.constant((rng.random(batch) < 0.3).astype(np.float32))
    tf.compat.v1.train.get_or_create_global_step()
    hidden = tf.compat.v1.layers.Dense(8, activation=tf.nn.relu)
    out = tf.compat.v1.layers.Dense(1)
    optimizer = tf.compat.v1.train.AdagradOptimizer(0.05, initial_accumulator_value=0.1)

    def body(i):
        logits = tf.squeeze(out(hidden(x)), 1)
        loss = tf.compat.v1.losses.sigmoid_cross_entropy(y, logits)
        with tf.control_dependencies([optimizer.minimize(loss)]):
            return i + 1

    iterations = tf.compat.v1.placeholder(tf.int32, [])
    loop = tf.compat.v1.while_loop(lambda i: i < iterations, body, [tf.constant(0)], parallel_iterations=1)
    return loop, iterations


def main(argv):
    del argv
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.disable_control_flow_v2()
    loop, iterations = _build(FLAGS.batch)
    results = {1: [], FLAGS.iterations_per_loop: []}
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for _ in range(FLAGS.runs):
            for ipl in results:
                sess.run(loop, {iterations: ipl})  # Warm-up.
                runs = max(1, FLAGS.steps // ipl)
                start = time.perf_counter()
                for _ in range(runs):
                    sess.run(loop, {iterations: ipl})
                results[ipl].append(runs * ipl / (time.perf_counter() - start))
    medians = {ipl: statistics.median(v) for ipl, v in results.items()}
    for ipl, v in results.items():
        print(
            "iterations_per_loop={:<4d} steps/sec median {:>9,.0f}  runs {}".format(
                ipl, medians[ipl], " / ".join("{:,.0f}".format(x) for x in v)
            )
        )
    print(
        "ratio ipl {} / ipl 1: {:.2f}x".format(
            FLAGS.iterations_per_loop, medians[FLAGS.iterations_per_loop] / medians[1]
        )
    )


if __name__ == "__main__":
    app.run(main)
