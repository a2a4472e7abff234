"""Whole programs, ours and upstream's CPU path in turn (see tpu_estimator/app/program_benchmark.py).

python scripts/benchmark_program.py --program=P_dlrm_zipf --runs=5
python scripts/benchmark_program.py --program=P_criteo_tfrecord --runs=5 --output_json=/tmp/p.json
python scripts/benchmark_program.py --program=P_whole_program_a --runs=9 --bounds=false  # issue 38, spread
python scripts/benchmark_program.py --program=P_dlrm_zipf --runs=3 --ours_source=/tmp/before   # another tree
python scripts/benchmark_program.py --program=P_dlrm_zipf --runs=0 --bounds=false --overlap_pairs=6  # overlap only
python scripts/benchmark_program.py --program=P_dlrm_zipf --runs=0 --pool_rounds=3 --dense_floor  # pool + floor
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import ours_and_upstream  # this folder's: the script runs as `python scripts/benchmark_program.py`
from absl import app, flags

from tpu_estimator.app import program_benchmark

flags.DEFINE_string("program", "P_dlrm_zipf", "A program name in configs/bench (P_*.yaml) or a YAML path.")
flags.DEFINE_integer("runs", 5, "Rounds; each runs ours, then upstream, each in a fresh process.")
flags.DEFINE_bool("bounds", True, "Also measure the input pipeline alone and the computation alone (the pool).")
flags.DEFINE_integer(
    "overlap_pairs",
    0,
    "Then, per implementation, one process alternating the program's input and the pool this many times each.",
)
flags.DEFINE_bool(
    "dense_floor", False, "Each pool round also runs the program's dense part alone (the activations an input)."
)
flags.DEFINE_integer("pool_rounds", 1, "With --runs=0: rounds of the computation alone (the pool).")
ours_and_upstream.define_flags()
flags.adopt_module_key_flags(ours_and_upstream)  # listed by --help with the script's own
flags.DEFINE_integer("first_steps", None, "Override the program's first_steps.")
flags.DEFINE_integer("total_steps", None, "Override the program's total_steps.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    program = program_benchmark.load_program(FLAGS.program)
    if FLAGS.first_steps:
        program.first_steps = FLAGS.first_steps
    if FLAGS.total_steps:
        program.total_steps = FLAGS.total_steps
    result = program_benchmark.compare(
        program,
        FLAGS.runs,
        ours_and_upstream.interpreters(),
        bounds=FLAGS.bounds,
        overlap_pairs=FLAGS.overlap_pairs,
        dense_floor=FLAGS.dense_floor,
        pool_rounds=FLAGS.pool_rounds,
    )
    ours_and_upstream.write_json(result)
    print(program_benchmark.markdown(result))


if __name__ == "__main__":
    app.run(main)
