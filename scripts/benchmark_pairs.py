"""One benchmark line in several environments, run in turn; per-pair ratios (see tpu_estimator/app/benchmark_pairs.py).

python scripts/benchmark_pairs.py --workload=A --line=ours_1shard --runs=5 \
    --env=before=.venv-tf215/bin/python:/tmp/before --env=after=.venv-tf215/bin/python:.
python scripts/benchmark_pairs.py --workload=A --line=ours_1shard --runs=5 \
    --env=tf2.15=.venv-tf215/bin/python:. --env=tf2.21=.venv/bin/python:.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

from tpu_estimator.app import benchmark, benchmark_pairs

flags.DEFINE_string("workload", "A", "Workload letter (configs/bench/<letter>_*.yaml, the first match).")
flags.DEFINE_string("config", None, "A workload YAML; overrides --workload.")
flags.DEFINE_string("line", "ours_1shard", "The line to run: ours_1shard, ours_2shards, ours_dict_1shard, upstream.")
flags.DEFINE_integer("runs", 5, "Rounds; each round runs every environment once, in the order given.")
flags.DEFINE_integer("iterations_per_loop", None, "Default: the workload's largest value.")
flags.DEFINE_integer("steps", None, "Measured steps per run (default: the workload's).")
flags.DEFINE_multi_string("env", None, "name=python[:source_dir], two or more; the first is the reference.")
flags.mark_flag_as_required("env")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    environments = [benchmark_pairs.parse_environment(spec) for spec in FLAGS.env]
    w = benchmark.load_workload(benchmark.workload_paths(FLAGS.config, FLAGS.workload)[0])
    if FLAGS.steps:
        w.steps = FLAGS.steps
    result = benchmark_pairs.compare(environments, w, FLAGS.line, FLAGS.runs, FLAGS.iterations_per_loop)
    print(benchmark_pairs.markdown(result, environments[0].name))


if __name__ == "__main__":
    app.run(main)
