"""Benchmarks ours vs upstream TPUEstimator on synthetic embedding workloads (see tpu_estimator/app/benchmark.py).

python scripts/benchmark.py --workload=all --runs=3 --output_json=/tmp/bench.json
python scripts/benchmark.py --config=configs/bench/A_dlrm.yaml --runs=3 --steps=200
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # Quiet TensorFlow's C++ start-up logs (before importing it).

from absl import (
    app,
    flags,
)

from tpu_estimator.app import benchmark

flags.DEFINE_string("config", None, "One workload YAML (configs/bench/<workload>.yaml); overrides --workload.")
flags.DEFINE_string("workload", "all", "A, B, C, D, M or all (configs/bench/<letter>_*.yaml).")
flags.DEFINE_integer("runs", 3, "Runs per configuration; medians are reported.")
flags.DEFINE_integer("steps", None, "Measured steps per run (after warm-up); default from the config.")
flags.DEFINE_string("output_json", None, "Write the results as JSON to this path.")
flags.DEFINE_bool("measure_machine", True, "Measure the NumPy random-gather rate and copy bandwidth.")
flags.DEFINE_string("plot", None, "Write a PNG of the vocabulary sweep (workloads C/C2) to this path (matplotlib).")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    results = benchmark.run(
        config=FLAGS.config,
        workload=FLAGS.workload,
        runs=FLAGS.runs,
        steps=FLAGS.steps,
        output_json=FLAGS.output_json,
        measure_machine=FLAGS.measure_machine,
    )
    if FLAGS.plot:
        benchmark.plot_vocabulary_sweep(results, FLAGS.plot)


if __name__ == "__main__":
    app.run(main)
