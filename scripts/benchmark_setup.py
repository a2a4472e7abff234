"""Setup of a BERT-base-sized dense program: ours on 1, 2, 4 shards and upstream's CPU path, in turn.

See tpu_estimator/app/setup_benchmark.py.

python scripts/benchmark_setup.py --program=S_bert_base --runs=3     # TF 2.15 environment (upstream needs it)
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

from tpu_estimator.app import program_benchmark, setup_benchmark

flags.DEFINE_string("program", "S_bert_base", "A setup program name in configs/bench (S_*.yaml) or a YAML path.")
flags.DEFINE_integer("runs", 3, "Rounds; each runs every line once, each in a fresh process.")
flags.DEFINE_string("python", sys.executable, "Interpreter for both (upstream needs tensorflow_estimator: TF 2.15).")
flags.DEFINE_string("ours_python", None, "Interpreter for ours (default --python).")
flags.DEFINE_string("ours_source", None, "Source tree of tpu_estimator for ours (default: the installed package).")
flags.DEFINE_string("output_json", None, "Also write the raw results here.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    program = setup_benchmark.load_setup_program(FLAGS.program)
    interpreters = {
        "ours": program_benchmark.Interpreter(FLAGS.ours_python or FLAGS.python, FLAGS.ours_source),
        "upstream": program_benchmark.Interpreter(FLAGS.python),
    }
    result = setup_benchmark.compare(program, FLAGS.runs, interpreters)
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w") as f:
            json.dump(result, f, indent=1)
    print(setup_benchmark.markdown(result))


if __name__ == "__main__":
    app.run(main)
