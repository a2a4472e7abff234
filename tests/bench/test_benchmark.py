"""Smoke test of the benchmark harness on the tiny workload (10 measured steps per line, one run)."""

import json
import os

import pytest

from tpu_estimator.app import benchmark

CONFIG = os.path.join(benchmark.DEFAULT_CONFIG_DIR, "tiny.yaml")


@pytest.mark.upstream
def test_tiny_workload_reports_positive_rates(tmp_path):
    out = tmp_path / "bench.json"
    results = benchmark.run(
        config=CONFIG, runs=1, steps=10, output_json=str(out), measure_machine=False, log=lambda *a: None
    )
    saved = json.loads(out.read_text())
    assert saved["workloads"].keys() == results["workloads"].keys() == {"tiny"}
    result = saved["workloads"]["tiny"]
    assert {"workload", "lines", "ratios", "notes"} <= set(result)
    lines = {(l["line"], l["iterations_per_loop"]): l for l in result["lines"]}
    assert set(lines) == {("upstream", 1), ("ours_1shard", 5), ("ours_2shards", 5)}
    for line in lines.values():
        assert "error" not in line, line.get("error")
        assert line["examples_per_sec"] > 0 and line["steps_per_sec"] > 0
        assert line["peak_rss_bytes"] > 0
    assert len(result["ratios"]) == 2 and all(r["ours_over_upstream"] > 0 for r in result["ratios"])
    assert benchmark.format_report(result).startswith("Workload tiny")


def test_machine_rates_are_positive():
    rates = benchmark.machine_rates(table_rows=10000, dim=16, gathers=10000, copy_bytes=1 << 20, repeats=1)
    assert all(v > 0 for v in rates.values())
