"""A workload on one host and on loopback clusters, run in turn: the overhead of TensorFlow's gRPC runtime.

Each round runs every line of the config once, in order (a fresh process per run; a `cluster_<H>x<S>` line starts
its H workers inside the run, see tpu_estimator/app/loopback_cluster.py). Reported per line: examples/s per run,
the ratio to the first line within each round (median and range), loopback bytes per step and seconds from
`train()` to the first step (graph build, session, placement on the workers).

    python scripts/cluster_loopback.py --config=tpu_estimator/app/configs/bench/L_A_loopback_cluster.yaml --runs=3
"""

import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

from tpu_estimator.app import benchmark

flags.DEFINE_string("config", None, "A workload YAML whose `lines` are the configurations to compare.")
flags.DEFINE_integer("runs", 3, "Rounds; each round runs every line once, in the order of the config.")
flags.DEFINE_integer("steps", None, "Measured steps per run (default: the workload's).")
flags.mark_flag_as_required("config")
FLAGS = flags.FLAGS


def _summary(values):
    return "{:.3f} ({:.3f}-{:.3f})".format(statistics.median(values), min(values), max(values)) if values else "-"


def main(argv):
    del argv
    w = benchmark.load_workload(FLAGS.config)
    if FLAGS.steps:
        w.steps = FLAGS.steps
    rows, ipl = w.row_values[0], w.ipl_values[0]
    results = {line: [] for line in w.lines}
    for round_index in range(FLAGS.runs):
        for line in w.lines:
            result = benchmark.run_line_in_subprocess(w, line, rows, ipl)
            results[line].append(result)
            if "error" in result:
                print("round {} {}: ERROR {}".format(round_index + 1, line, result["error"]), flush=True)
            else:
                print("round {} {}: {:,.0f} examples/s".format(round_index + 1, line, result["examples_per_sec"]))
    reference = w.lines[0]
    print("\n{}: {}, ipl {}, {} rounds\n".format(w.name, w.description, ipl, FLAGS.runs))
    print(
        "| line | examples/s per run | / {} per round: median (range) | loopback bytes per step | s to first step "
        "|".format(reference)
    )
    print("|---|---|---:|---:|---:|")
    for line in w.lines:
        runs = results[line]
        good = [r for r in runs if "error" not in r]
        ratios = [
            r["examples_per_sec"] / ref["examples_per_sec"]
            for r, ref in zip(runs, results[reference])
            if "error" not in r and "error" not in ref
        ]
        wire = [r["loopback_bytes_per_step"] for r in good if "loopback_bytes_per_step" in r]
        print(
            "| {} | {} | {} | {} | {} |".format(
                line,
                ", ".join("{:,.0f}".format(r["examples_per_sec"]) for r in good) or "failed",
                _summary(ratios),
                "{:,.0f}".format(statistics.median(wire)) if wire else "-",
                "{:.1f}".format(statistics.median(r["seconds_to_first_step"] for r in good)) if good else "-",
            )
        )


if __name__ == "__main__":
    app.run(main)
