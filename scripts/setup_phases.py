"""Where `train()`'s setup goes: graph building stages, Scaffold, session, first step; ours and upstream's CPU path.

Runs a program of `configs/bench/P_*.yaml` in this process (TF 2.15 for upstream), two `train()` calls of one step
more each, and prints the seconds spent in each phase of each call (wall time of the wrapped functions):

python scripts/setup_phases.py --program=P_dlrm_zipf --implementation=ours --shards=1
python scripts/setup_phases.py --program=P_dlrm_zipf --implementation=upstream
"""

import os
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags

flags.DEFINE_string("program", "P_dlrm_zipf", "A program name in configs/bench (P_*.yaml) or a YAML path.")
flags.DEFINE_enum("implementation", "ours", ["ours", "upstream"], "Which TPUEstimator.")
flags.DEFINE_integer("shards", None, "Ours: override the program's shards.")
flags.DEFINE_integer("calls", 2, "train() calls, each one step longer than the last.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    import tensorflow as tf
    from tensorflow.python.training import session_manager

    from tpu_estimator.app import program_benchmark, setup_benchmark
    from tpu_estimator.embedding_stage import embedding_infeed
    from tpu_estimator.modes import step_feed, train_loop

    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    times: dict = {}
    timed = []
    if FLAGS.implementation == "ours":
        timed += [
            (step_feed, "build_input_pipeline", "input_fn and input pipeline"),
            (embedding_infeed.EmbeddingInfeed, "__init__", "embedding infeed graph"),
            (train_loop.TrainLoop, "_build_loop", "training loop graph (model_fn replicas, updates)"),
            (train_loop.TrainLoop, "build", "TrainLoop.build (all of the above)"),
        ]
    timed += [
        (tf.compat.v1.train.Scaffold, "finalize", "Scaffold.finalize (savers, init ops)"),
        (session_manager.SessionManager, "prepare_session", "session: create, initialise or restore"),
    ]
    program = program_benchmark.load_program(FLAGS.program)
    if FLAGS.shards:
        program.shards = FLAGS.shards
    model_dir = tempfile.mkdtemp(prefix="setup_phases_")
    tfrecord_path = program_benchmark.write_tfrecords(program, model_dir) if program.source == "tfrecord" else None
    estimator = program_benchmark._estimator(program, FLAGS.implementation, os.path.join(model_dir, "model"))
    input_fn = program_benchmark._input_fn(program, tfrecord_path)
    label = f"{FLAGS.implementation}, {program.shards if FLAGS.implementation == 'ours' else 1} shard(s)"
    with setup_benchmark.timed_calls(times, timed):
        for call in range(FLAGS.calls):
            times.clear()
            start = time.perf_counter()
            estimator.train(input_fn, max_steps=call + 1)
            total = time.perf_counter() - start
            print(f"{label}, train() call {call + 1} (one step): {total:.2f} s")
            for phase, seconds in times.items():
                print(f"  {phase}: {seconds:.2f} s")
    shutil.rmtree(model_dir, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
