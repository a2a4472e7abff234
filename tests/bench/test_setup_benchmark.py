"""The setup benchmark: a dense transformer's `train()` to the first step, lines in turn, ratios per round."""

import sys

import numpy as np
import pytest

from tpu_estimator.app import program_benchmark as pb
from tpu_estimator.app import setup_benchmark as sb


def test_setup_programs_are_checked_when_loaded():
    # Unknown names and keys: test_program_benchmark.py's test of the loader both benchmarks share.
    bert = sb.load_setup_program("S_bert_base")
    assert (bert.layers, bert.hidden, bert.heads, bert.intermediate, bert.vocab) == (12, 768, 12, 3072, 30522)
    with pytest.raises(ValueError, match=r"heads \(5\) must divide hidden \(32\)"):
        sb.SetupProgram(name="x", hidden=32, heads=5)
    with pytest.raises(ValueError, match=r"program x: batch_size 6 must be divisible by shards 4"):
        sb.SetupProgram(name="x", batch_size=6, shards=[1, 4])
    with pytest.raises(ValueError, match=r"program x: shards \[1, 0\] must all be positive"):
        sb.SetupProgram(name="x", batch_size=6, shards=[1, 0])


def test_lines_run_in_turn_and_ratios_are_taken_per_round(monkeypatch):
    p = sb.SetupProgram(name="x", shards=[1, 2])
    seconds = iter([10.0, 8.0, 12.0, 20.0, 10.0, 30.0])  # per round: ours 1, upstream, ours 2
    calls = []

    def fake_run_line(program, line, interpreter, timeout=3600):
        calls.append(line)
        return {
            "seconds_to_first_step": next(seconds),
            "seconds_to_session": 1.0,
            "model_fn_seconds": 2.0,
            "model_fn_calls": line[1],
            "seconds_first_step": 0.5,
            "wall_seconds": 30.0,
            "weights_abs_sum": 7.0,
            "phases": {"Scaffold.finalize": 0.25},
        }

    monkeypatch.setattr(sb, "run_line", fake_run_line)
    interpreters = {"ours": pb.Interpreter(sys.executable), "upstream": pb.Interpreter(sys.executable)}
    result = sb.compare(p, 2, interpreters, log=lambda _: None)
    assert calls == [("ours", 1), ("upstream", 1), ("ours", 2)] * 2
    assert result["ratios"]["upstream, CPU path_over_ours, 1 shard"]["values"] == [0.8, 0.5]
    assert result["ratios"]["ours, 2 shards_over_ours, 1 shard"]["values"] == [1.2, 1.5]
    report = sb.markdown(result)
    assert (
        "| `train()` to the first step (s) | 15.00 (10.00-20.00) | 9.00 (8.00-10.00) | 21.00 (12.00-30.00) |" in report
    )
    assert "| Scaffold.finalize (s) | 0.25 (0.25-0.25) | 0.25 (0.25-0.25) | 0.25 (0.25-0.25) |" in report
    assert "ours, 2 shards / ours, 1 shard 1.35 (1.20-1.50)" in report


def test_shards_train_the_same_weights():
    """Sharding invariance: the global batch split over 2 shards (gradients averaged by `CrossShardOptimizer`)
    trains the weights one shard trains from the same seeded initial values."""
    p = sb.load_setup_program("S_tiny")
    one, two = (sb.run_setup(p, "ours", shards, model_dir=None) for shards in (1, 2))
    assert (one["model_fn_calls"], two["model_fn_calls"]) == (1, 1)  # traced once, as on a TPU
    # Per layer 6 dense layers (kernel, bias) and 2 layer norms (gamma, beta); word and position embeddings, their
    # norm, the pooler and the classifier.
    assert one["weights"] == two["weights"] == p.layers * 16 + 8
    np.testing.assert_allclose(two["weights_abs_sum"], one["weights_abs_sum"], rtol=1e-5)
    for result in (one, two):
        assert 0 < result["seconds_to_session"] <= result["seconds_to_first_step"] < result["seconds_train"]
        assert result["phases"]["initial checkpoint and graph.pbtxt"] > 0


@pytest.mark.upstream
def test_tiny_setup_program_runs_as_processes_and_matches_upstream():
    p = sb.load_setup_program("S_tiny")
    interpreters = {"ours": pb.Interpreter(sys.executable), "upstream": pb.Interpreter(sys.executable)}
    result = sb.compare(p, 1, interpreters, log=lambda _: None)
    runs = result["rounds"][0]
    for name in ("ours, 1 shard", "upstream, CPU path", "ours, 2 shards"):
        assert "error" not in runs[name], runs[name]
        assert runs[name]["wall_seconds"] > runs[name]["seconds_to_first_step"] > 0
    # Same seeded initial values, same global batch: upstream's CPU path trains the same weights.
    upstream = runs["upstream, CPU path"]["weights_abs_sum"]
    np.testing.assert_allclose(runs["ours, 1 shard"]["weights_abs_sum"], upstream, rtol=1e-5)
    np.testing.assert_allclose(runs["ours, 2 shards"]["weights_abs_sum"], upstream, rtol=1e-5)


def test_timed_calls_adds_each_calls_seconds_and_puts_the_originals_back(monkeypatch):
    class Owner:
        def work(self, x):
            return x + 1

    clock = iter([10.0, 10.5, 20.0, 20.25])
    monkeypatch.setattr(sb.time, "perf_counter", lambda: next(clock))
    original = Owner.work
    seconds = {"work": 1.0}
    with sb.timed_calls(seconds, [(Owner, "work", "work")]):
        assert Owner().work(1) == 2 and Owner().work(2) == 3
    assert seconds == {"work": 1.75}
    assert Owner.work is original
