"""Setup of a BERT-base-sized dense program: ours on 1, 2, 4 shards and upstream's CPU path, in turn.

See tpu_estimator/app/setup_benchmark.py.

python scripts/benchmark_setup.py --program=S_bert_base --runs=3     # TF 2.15 environment (upstream needs it)
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import ours_and_upstream  # this folder's: the script runs as `python scripts/benchmark_setup.py`
from absl import app, flags

from tpu_estimator.app import setup_benchmark

flags.DEFINE_string("program", "S_bert_base", "A setup program name in configs/bench (S_*.yaml) or a YAML path.")
flags.DEFINE_integer("runs", 3, "Rounds; each runs every line once, each in a fresh process.")
ours_and_upstream.define_flags()
flags.adopt_module_key_flags(ours_and_upstream)  # listed by --help with the script's own
FLAGS = flags.FLAGS


def main(argv):
    del argv
    program = setup_benchmark.load_setup_program(FLAGS.program)
    result = setup_benchmark.compare(program, FLAGS.runs, ours_and_upstream.interpreters())
    ours_and_upstream.write_json(result)
    print(setup_benchmark.markdown(result))


if __name__ == "__main__":
    app.run(main)
