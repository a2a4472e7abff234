"""Building the BERT-base training step in TensorFlow's two kinds of loop: the v1 `while_loop` and a functional While.

Ours builds the TRAIN step in a v1 `while_loop` (`train_loop.py`), where every op pays the loop's bookkeeping
(`WhileContext.AddOp`). This measures whether a functional While (control flow v2: the body a function) would build
faster: the S_bert_base step (encoder, loss, Adam) in one loop of one step, in plain TensorFlow, the two kinds in
turn, each in a fresh process:

python scripts/setup_loop_kinds.py --runs=3
"""

import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

flags.DEFINE_integer("runs", 3, "Rounds; each builds the step in both kinds of loop, each in a fresh process.")
flags.DEFINE_string("program", "S_bert_base", "A setup program name in configs/bench (S_*.yaml) or a YAML path.")
flags.DEFINE_string("child", None, "Internal: build in this kind of loop ('v1' or 'functional') and print JSON.")
FLAGS = flags.FLAGS

KINDS = ("v1", "functional")


def build_and_run(program: str, kind: str) -> dict:
    """Builds the step in a loop of `kind`, creates the session, runs one step; returns the seconds of each."""
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    from tpu_estimator.app import setup_benchmark

    p = setup_benchmark.load_setup_program(program)
    tf.compat.v1.disable_eager_execution()
    with tf.Graph().as_default() as graph:
        tf.compat.v1.set_random_seed(p.seed)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        iterator = tf.compat.v1.data.make_initializable_iterator(
            setup_benchmark.input_fn_of(p)({"batch_size": p.batch_size})
        )

        def body(step, unused_loss):
            features, labels = iterator.get_next()
            logits = tf.compat.v1.layers.dense(setup_benchmark.encoder(p, features["input_ids"]), 2, name="classifier")
            loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
            train_op = tf.compat.v1.train.AdamOptimizer(p.learning_rate).minimize(loss, global_step)
            with tf.control_dependencies([train_op]):
                return step + 1, tf.identity(loss)

        start = time.perf_counter()
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = kind == "functional"
        with tf.compat.v1.variable_scope("", use_resource=True):
            loop = tf.compat.v1.while_loop(
                lambda step, _: step < 1, body, [tf.constant(0), tf.constant(0.0)], parallel_iterations=1
            )
        built = time.perf_counter()
        init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session() as session:
            session.run([init, iterator.initializer])
            ready = time.perf_counter()
            session.run(loop)
            stepped = time.perf_counter()
            weights = sum(float(abs(v).sum()) for v in session.run(tf.compat.v1.trainable_variables()))
        return {
            "build": built - start,
            "session_and_init": ready - built,
            "first_step": stepped - ready,
            "ops": len(graph.get_operations()),
            "weights_abs_sum": weights,
        }


def main(argv):
    del argv
    if FLAGS.child:
        print(json.dumps(build_and_run(FLAGS.program, FLAGS.child)))
        return
    rounds = []
    for index in range(FLAGS.runs):
        result = {}
        for kind in KINDS:
            output = subprocess.run(
                [sys.executable, __file__, f"--child={kind}", f"--program={FLAGS.program}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            result[kind] = json.loads(output.strip().splitlines()[-1])
            print(f"round {index + 1}/{FLAGS.runs} {kind}: " + json.dumps(result[kind]), file=sys.stderr)
        rounds.append(result)

    def cell(values, fmt="{:.2f}"):
        return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"

    print(f"Program `{FLAGS.program}`, {FLAGS.runs} rounds (v1, functional in turn): median (range)\n")
    print("| figure | v1 `while_loop` | functional While | per-round ratio functional / v1 |")
    print("|---|---:|---:|---:|")
    for key in ("build", "session_and_init", "first_step"):
        v1 = [r["v1"][key] for r in rounds]
        fn = [r["functional"][key] for r in rounds]
        print(f"| {key} (s) | {cell(v1)} | {cell(fn)} | {cell([f / v for f, v in zip(fn, v1)])} |")
    print(f"| ops in the graph | {rounds[0]['v1']['ops']} | {rounds[0]['functional']['ops']} | |")


if __name__ == "__main__":
    app.run(main)
