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


@pytest.mark.quick
def test_machine_rates_are_positive():
    rates = benchmark.machine_rates(table_rows=10000, dim=16, gathers=10000, copy_bytes=1 << 20, repeats=1)
    assert all(v > 0 for v in rates.values())


def test_cluster_line_runs_on_loopback_workers_and_counts_the_bytes_between_them():
    w = benchmark.load_workload(CONFIG)
    result = benchmark.run_line_in_subprocess(w, "cluster_2x1", w.row_values[0], 5)
    assert "error" not in result, result.get("error")
    assert result["measured_steps"] == 10 and result["examples_per_sec"] > 0
    # Host 1 sends at least its half batch of int64 ids every step: (64 / 2) rows x 4 tables x 2 ids x 8 bytes.
    assert result["loopback_bytes_per_step"] > 32 * 4 * 2 * 8


def test_loopback_cluster_stops_its_workers():
    import socket

    from tpu_estimator.app import loopback_cluster

    with loopback_cluster.loopback_cluster(num_hosts=1, cpu_shards=1) as spec:
        host, port = spec["worker"][0].split(":")
        socket.create_connection((host, int(port)), timeout=5).close()
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=5).close()


def test_both_reports_say_a_lines_share_of_the_machine_alike():
    line = {
        "line": "ours_2shards",
        "rows": 100000,
        "iterations_per_loop": 5,
        "examples_per_sec": 2000.0,
        "examples_per_sec_runs": [2000.0],
        "steps_per_sec": 2.0,
        "peak_rss_bytes": 2e9,
        "table_and_slot_bytes": 1e9,
    }
    machine = {
        "line": "ours_2shards",
        "rows": 100000,
        "iterations_per_loop": 5,
        "row_accesses_per_sec": 2.5e6,
        "fraction_of_gather_rate": 0.25,
        "fraction_of_copy_bandwidth": 0.125,
    }
    result = {
        "workload": {"name": "w", "description": "d"},
        "lines": [line],
        "ratios": [{"rows": 100000, "line": "ours_2shards", "iterations_per_loop": 5, "ours_over_upstream": 1.5}],
        "machine_fraction": [machine],
        "notes": [],
    }
    said = (
        "ours_2shards rows=100,000 ipl=5: 2.5M random row accesses/s = 25% of the NumPy gather rate, 12% of the "
        "copy bandwidth"
    )
    report = benchmark.format_report(result).splitlines()
    assert report[-1] == "  " + said
    assert "1.50x" in report[-2]
    tables = benchmark.markdown_tables({"workloads": {"w": result}}).splitlines()
    assert "- " + said in tables
    assert any(row.startswith("| ours_2shards | 100,000 | 5 |") and "| 1.50x |" in row for row in tables)
