"""The flags and interpreters of the benchmark scripts that run ours and upstream in turn, each in a fresh process
(benchmark_program.py, benchmark_setup.py)."""

import json
import sys

from absl import flags

from tpu_estimator.app import program_benchmark


def define_flags():
    """Defines `--python`, `--ours_python`, `--ours_source` and `--output_json`."""
    flags.DEFINE_string(
        "python", sys.executable, "Interpreter for both (upstream needs tensorflow_estimator: TF 2.15)."
    )
    flags.DEFINE_string("ours_python", None, "Interpreter for ours (default --python).")
    flags.DEFINE_string("ours_source", None, "Source tree of tpu_estimator for ours (default: the installed package).")
    flags.DEFINE_string("output_json", None, "Also write the raw results here.")


def interpreters():
    """`{'ours': ..., 'upstream': ...}`: the `program_benchmark.Interpreter` of each, as the flags name them."""
    flag_values = flags.FLAGS
    return {
        "ours": program_benchmark.Interpreter(flag_values.ours_python or flag_values.python, flag_values.ours_source),
        "upstream": program_benchmark.Interpreter(flag_values.python),
    }


def write_json(result):
    """Writes `result` to `--output_json` (nothing without it)."""
    if flags.FLAGS.output_json:
        with open(flags.FLAGS.output_json, "w") as f:
            json.dump(result, f, indent=1)
