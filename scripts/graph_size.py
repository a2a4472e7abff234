"""Size of TRAIN graphs as written to a model directory: node count, `graph.pbtxt`, `.meta` and event-file bytes.

Each line trains a step or two in a fresh subprocess and a temporary model directory, then the files are measured:

* `dlrm_tiny`, `wide_deep_tiny`: `tpu-estimator train --config=NAME --set=train.steps=5` (2 shards, 5 steps: one
  loop of `iterations_per_loop=5`);
* `A_upstream`, `A_ours_1shard`, `A_ours_2shards`: workload A's model of the benchmark
  (`tpu_estimator/app/configs/bench/A_dlrm.yaml`: 26 tables x 100k x 16, MLP 512-256-1) as the benchmark builds
  it, trained 2 steps with a checkpoint at the start and the end; `A_upstream` is
  `TPUEstimator(use_tpu=False)` of tensorflow_estimator (TensorFlow 2.15 only).

Sizes and node counts are deterministic (no timing). Usage:

    PYTHONPATH=. python scripts/graph_size.py [--lines=dlrm_tiny,A_upstream,...] [--markdown]
"""

import argparse
import dataclasses
import glob
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List

LINES = ("dlrm_tiny", "wide_deep_tiny", "A_upstream", "A_ours_1shard", "A_ours_2shards")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(model_dir: str) -> Dict[str, int]:
    """Node count of `graph.pbtxt` and the bytes of it, of the latest `.meta` and of the event files (top level)."""
    path = os.path.join(model_dir, "graph.pbtxt")
    with open(path) as f:
        nodes = sum(1 for line in f if line == "node {\n")  # Top-level nodes only (not function bodies).
    metas = sorted(glob.glob(os.path.join(model_dir, "*.meta")), key=os.path.getmtime)
    events = glob.glob(os.path.join(model_dir, "events.out.tfevents.*"))
    return {
        "nodes": nodes,
        "graph_pbtxt_bytes": os.path.getsize(path),
        "meta_bytes": os.path.getsize(metas[-1]) if metas else 0,
        "events_bytes": sum(os.path.getsize(p) for p in events),
    }


def _train_cli_model(config: str, model_dir: str) -> None:
    from tpu_estimator.app import cli

    sys.argv = ["tpu-estimator", "train", f"--config={config}", f"--model_dir={model_dir}", "--set=train.steps=5"]
    cli.main()


def _train_workload_a(line: str, model_dir: str) -> None:
    from tpu_estimator.app import benchmark

    w = benchmark.load_workload(os.path.join(benchmark.DEFAULT_CONFIG_DIR, "A_dlrm.yaml"))
    w = dataclasses.replace(w, steps=1, warmup_steps=1, pool_batches=1, save_checkpoints=True)
    benchmark.run_line(w, line, w.row_values[0], iterations_per_loop=1, model_dir=model_dir)


def _child(line: str, model_dir: str) -> None:
    if line.startswith("A_"):
        _train_workload_a(line[len("A_") :], model_dir)
    else:
        try:
            _train_cli_model(line, model_dir)
        except SystemExit as e:
            if e.code:
                raise


def run_line(line: str) -> Dict[str, int]:
    """Trains `line` in a subprocess and measures its model directory."""
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        subprocess.run(
            [sys.executable, os.path.abspath(__file__), f"--child={line}", f"--model_dir={model_dir}"],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        return measure(model_dir)


def markdown(results: Dict[str, Dict[str, int]]) -> str:
    rows = ["| line | nodes | `graph.pbtxt` | `.meta` | event files |", "|---|---:|---:|---:|---:|"]
    for line, r in results.items():
        rows.append(
            "| {} | {:,} | {:.2f} MB | {:.2f} MB | {:.2f} MB |".format(
                line, r["nodes"], r["graph_pbtxt_bytes"] / 1e6, r["meta_bytes"] / 1e6, r["events_bytes"] / 1e6
            )
        )
    return "\n".join(rows)


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", default=",".join(LINES), help="comma-separated lines: " + ", ".join(LINES))
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table instead of JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model_dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.model_dir)
        return
    lines = [line for line in args.lines.split(",") if line]
    unknown = [line for line in lines if line not in LINES]
    if unknown:
        parser.error(f"unknown lines {unknown}; choose from {', '.join(LINES)}")
    results = {line: run_line(line) for line in lines}
    print(markdown(results) if args.markdown else json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, _ROOT)
    main(sys.argv[1:])
