"""Paired benchmark runs: environments in turn, ratios per round (not ratios of separate medians)."""

import sys

import pytest

from tpu_estimator.app import benchmark, benchmark_pairs


@pytest.mark.quick
def test_ratios_are_taken_within_each_round(monkeypatch):
    # Rounds where the machine is slow for both: per-pair ratios stay 2.0 though the medians of runs differ.
    rates = {"a": iter([100.0, 50.0, 300.0]), "b": iter([200.0, 100.0, 600.0])}
    order = []

    def fake_run_once(environment, w, line, ipl):
        order.append(environment.name)
        return {"examples_per_sec": next(rates[environment.name])}

    monkeypatch.setattr(benchmark_pairs, "run_once", fake_run_once)
    envs = [benchmark_pairs.Environment("a", sys.executable), benchmark_pairs.Environment("b", sys.executable)]
    result = benchmark_pairs.compare(envs, benchmark.Workload(name="t"), "ours_1shard", runs=3, log=lambda _: None)
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert result["ratios"]["b"] == {"median": 2.0, "min": 2.0, "max": 2.0, "pairs": [2.0, 2.0, 2.0]}
    table = benchmark_pairs.markdown(result, "a")
    assert "| b | 200, 100, 600 | 2.000 (2.000-2.000) |" in table


def test_a_failed_run_drops_only_its_pair(monkeypatch):
    rates = {"a": iter([100.0, 100.0]), "b": iter([None, 150.0])}
    monkeypatch.setattr(
        benchmark_pairs,
        "run_once",
        lambda e, w, line, ipl: (
            {"examples_per_sec": next(rates[e.name])}
            if e.name == "a"
            else ({"examples_per_sec": v} if (v := next(rates["b"])) is not None else {"error": "exit code 1"})
        ),
    )
    envs = [benchmark_pairs.Environment("a", sys.executable), benchmark_pairs.Environment("b", sys.executable)]
    result = benchmark_pairs.compare(envs, benchmark.Workload(name="t"), "ours_1shard", runs=2, log=lambda _: None)
    assert result["ratios"]["b"]["pairs"] == [1.5]


def test_environment_specs_are_checked(tmp_path):
    env = benchmark_pairs.parse_environment(f"before={sys.executable}")
    assert env == benchmark_pairs.Environment("before", sys.executable, None)
    with pytest.raises(ValueError, match="expected name=python"):
        benchmark_pairs.parse_environment("before")
    with pytest.raises(ValueError, match="no interpreter at /nonexistent/python"):
        benchmark_pairs.parse_environment("x=/nonexistent/python")
    with pytest.raises(ValueError, match="has no tpu_estimator package"):
        benchmark_pairs.parse_environment(f"x={sys.executable}:{tmp_path}")
