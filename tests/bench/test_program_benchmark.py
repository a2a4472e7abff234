"""The whole-program benchmark: programs run as processes in turn, ratios per round, the bounds."""

import dataclasses
import os
import sys

import numpy as np
import pytest

from tpu_estimator.app import program_benchmark as pb
from tpu_estimator.app import setup_benchmark as sb


def test_zipf_cdf_follows_the_power_law():
    cdf = pb.zipf_cdf(4, 1.0)
    weights = np.array([1, 1 / 2, 1 / 3, 1 / 4])
    np.testing.assert_allclose(cdf, np.cumsum(weights) / weights.sum(), rtol=1e-6)


@pytest.mark.parametrize(
    "load, kind, name, known, unknown_key",
    [
        (pb.load_program, "program", "P_nope", "P_dlrm_zipf", "batchsize"),
        (sb.load_setup_program, "setup program", "S_nope", "S_bert_base", "layer"),
    ],
)
def test_yaml_programs_name_the_known_ones_and_refuse_unknown_keys(tmp_path, load, kind, name, known, unknown_key):
    """`load_yaml_program` through its two users: a name not in configs/bench, a YAML with a key of no field."""
    with pytest.raises(ValueError, match=f"No {kind} '{name}'.*{known}"):
        load(name)
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: x\n{unknown_key}: 3\n")
    with pytest.raises(ValueError, match=rf"unknown keys \['{unknown_key}'\]"):
        load(str(bad))


def test_programs_are_checked_when_loaded():
    assert pb.load_program("P_dlrm_zipf").num_tables == 26
    with pytest.raises(ValueError, match="need 0 < first_steps < total_steps"):
        pb.Program(name="x", first_steps=5, total_steps=5)
    with pytest.raises(ValueError, match="source must be"):
        pb.Program(name="x", source="csv")


def _fake_result(wall, loop, evaluate, predict):
    return {
        "wall_seconds": wall,
        "cpu_seconds": wall * 1.5,
        "cores_busy": 1.5,
        "seconds_import": 1.0,
        "first_train": {"seconds": 2.0, "seconds_to_first_step": 1.5, "seconds_after_hooks": 0.25},
        "second_train": {"seconds": 3.0, "loop_cores_busy": 1.2, "seconds_after_hooks": 0.5},
        "loop_examples_per_sec": loop,
        "evaluate": {"seconds": evaluate, "seconds_after_hooks": 0.25},
        "predict": {"seconds": predict, "seconds_after_hooks": 0.125},
    }


def test_the_session_close_is_reported_and_left_out_of_the_evaluate_ratio_to_the_hooks_end():
    def run(evaluate, after):
        result = _fake_result(10.0, 100.0, evaluate, 1.0)
        result["evaluate"]["seconds_after_hooks"] = after
        return result

    # Whole calls 5 / 3; without the close (1 s each) 4 / 2. A call without the figure is left out of that ratio.
    rounds = [{"ours": run(3.0, 1.0), "upstream": run(5.0, 1.0)}, {"ours": run(3.0, None), "upstream": run(6.0, 1.0)}]
    assert pb._phase_ratio(rounds, "evaluate")["values"] == [5 / 3, 2.0]
    assert pb._phase_ratio(rounds, "evaluate", to_hooks_end=True)["values"] == [2.0]
    assert pb.seconds_after_hooks(rounds[0]["ours"]) == 0.25 + 0.5 + 1.0 + 0.125
    assert pb.seconds_after_hooks(rounds[1]["ours"]) is None


def test_ratios_are_taken_within_each_round(monkeypatch):
    walls = iter([10.0, 20.0, 30.0, 30.0, 5.0, 15.0])  # ours, upstream per round: ratios 2, 1, 3
    pools = iter([50.0, 25.0, 50.0, 50.0, 20.0, 5.0])  # computation alone, ours, upstream per round: 2, 1, 4
    calls = []

    def fake_run_child(p, kind, implementation, interpreter, tfrecord_path, timeout=3600):
        calls.append((kind, implementation))
        if kind == "compute":
            rates = {"evaluate_examples_per_sec": 300.0, "predict_examples_per_sec": 200.0}
            if implementation == "upstream":
                rates = {"evaluate_examples_per_sec": 100.0, "predict_examples_per_sec": 400.0}
            return {"examples_per_sec": next(pools), "cores_busy": 1.0, **rates}
        if kind != "program":
            return {"examples_per_sec": 100.0, "cores_busy": 1.0}
        wall = next(walls)
        return _fake_result(wall, 1000.0 / wall, wall / 10, wall / 20)

    monkeypatch.setattr(pb, "run_child", fake_run_child)
    interpreters = {"ours": pb.Interpreter(sys.executable), "upstream": pb.Interpreter(sys.executable)}
    result = pb.compare(pb.load_program("P_tiny"), 3, interpreters, log=lambda _: None)
    # Each round: the pair, then the computation alone of each; the input alone once at the end.
    one_round = [("program", "ours"), ("program", "upstream"), ("compute", "ours"), ("compute", "upstream")]
    assert calls == one_round * 3 + [("input", "ours")]
    wall = result["ratios"]["wall_upstream_over_ours"]
    assert wall["values"] == [2.0, 1.0, 3.0] and wall["median"] == 2.0
    assert result["ratios"]["loop_ours_over_upstream"]["values"] == [2.0, 1.0, 3.0]
    assert result["ratios"]["evaluate_upstream_over_ours"]["values"] == [2.0, 1.0, 3.0]
    assert result["ratios"]["pool_compute_ours_over_upstream"]["values"] == [2.0, 1.0, 4.0]
    # Ours' loop per round (1000 / wall: 100, 1000/30, 200) over min(input 100, that round's pool 50, 50, 20).
    np.testing.assert_allclose(result["ratios"]["loop_over_bound_ours"]["values"], [2.0, 2 / 3, 10.0])
    report = pb.markdown(result)
    assert "wall time upstream / ours **2.00 (1.00-3.00)**" in report
    assert "| after the timing hook's end, mostly the session's close, all calls (s) | 1.12 (1.12-1.12) |" in report
    # Without the close (0.25 s of evaluate() = wall / 10, 0.125 s of predict() = wall / 20) the ratios move from
    # 2, 1, 3 to (2 - 0.25) / (1 - 0.25), 1, (1.5 - 0.25) / (0.5 - 0.25) = 2.33, 1, 5 (and the same for predict()).
    assert (
        "`evaluate()` upstream / ours 2.00 (1.00-3.00) (to the timing hook's end, without the close: 2.33 (1.00-5.00))"
        in report
    )
    assert "`predict()` upstream / ours 2.00 (1.00-3.00) (without the close: 2.33 (1.00-5.00))" in report
    assert "| wall time, whole process (s) | 10.0 (5.0-30.0) | 20.0 (15.0-30.0) |" in report
    assert (
        "Bounds (examples/s, median (range) of 3 pool run(s), one after each round's pair): input pipeline alone "
        "100; computation "
        "alone (pool): ours 50 (20-50), upstream 25 (5-50); per-pair ratio ours / upstream 2.00 (1.00-4.00)."
    ) in report
    assert "Ours' loop over min(input alone, that round's computation alone): **200% (67%-1000%)**." in report
    assert (
        "`evaluate()` from the pool (examples/s, first run to the hooks' end): ours 300 (300-300), upstream "
        "100 (100-100); per-pair ratio ours / upstream **3.00 (3.00-3.00)**." in report
    )
    assert "`predict()` from the pool (examples/s, first prediction to last): ours 200 (200-200)" in report
    assert "per-pair ratio ours / upstream **0.50 (0.50-0.50)**." in report


def test_bounds_only_run_one_pool_round(monkeypatch):
    calls = []

    def fake_run_child(p, kind, implementation, interpreter, tfrecord_path, timeout=3600):
        calls.append((kind, implementation))
        return {"examples_per_sec": 10.0, "evaluate_examples_per_sec": 5.0, "predict_examples_per_sec": 4.0}

    monkeypatch.setattr(pb, "run_child", fake_run_child)
    interpreters = {"ours": pb.Interpreter(sys.executable), "upstream": pb.Interpreter(sys.executable)}
    result = pb.compare(pb.load_program("P_tiny"), 0, interpreters, log=lambda _: None)
    assert calls == [("compute", "ours"), ("compute", "upstream"), ("input", "ours")]
    assert "computation alone (pool): ours 10 (10-10), upstream 10 (10-10)" in pb.markdown(result)


@pytest.mark.upstream
def test_tiny_program_runs_as_processes_and_reports_every_phase():
    p = pb.load_program("P_tiny")
    # The children import this source tree (a worktree's, not only the installed package).
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(pb.__file__))))
    interpreters = {"ours": pb.Interpreter(sys.executable, source), "upstream": pb.Interpreter(sys.executable, source)}
    result = pb.compare(p, 1, interpreters, log=lambda _: None)
    for implementation in pb.IMPLEMENTATIONS:
        run = result["rounds"][0][implementation]
        assert "error" not in run, run
        assert run["wall_seconds"] > run["first_train"]["seconds"] + run["second_train"]["seconds"] > 0
        assert 0 < run["cpu_seconds"] and run["loop_examples_per_sec"] > 0
        assert 0.0 <= run["evaluate"]["auc"] <= 1.0
        assert run["predict"]["rows"] == p.predict_batches * p.batch_size
        for call in (run["first_train"], run["second_train"], run["evaluate"], run["predict"]):
            assert 0 <= call["seconds_after_hooks"] < call["seconds"]
        # The second train() of ours runs (14 - 4) / 5 = 2 loops; upstream one step per run.
        assert run["second_train"]["runs"] == (2 if implementation == "ours" else 10)
    assert result["bounds"]["input"]["examples_per_sec"] > 0, result["bounds"]["input"]
    (pool_round,) = result["compute_rounds"]
    for implementation in pb.IMPLEMENTATIONS:
        for key in ("examples_per_sec", "evaluate_examples_per_sec", "predict_examples_per_sec"):
            assert pool_round[implementation][key] > 0, pool_round[implementation]
        # The loop's cores busy, beside (not overwritten by) the whole process's.
        assert 0 < pool_round[implementation]["loop_cores_busy"] != pool_round[implementation]["cores_busy"]
    assert 0 < result["bounds"]["input"]["loop_cores_busy"] != result["bounds"]["input"]["cores_busy"]
    assert len(result["ratios"]["loop_over_bound_ours"]["values"]) == 1


def test_compute_only_reads_the_input_once_before_the_program(monkeypatch, tmp_path):
    import tensorflow as tf

    p = pb.load_program("P_tiny")
    batches_read = []
    program_input_fn = pb._input_fn(p, None)

    def counting_input_fn(params):
        def count(*_):
            batches_read.append(1)
            return np.int64(0)

        def counted(features, labels):
            read = tf.numpy_function(count, [labels], tf.int64)
            with tf.control_dependencies([read]):
                return features, tf.identity(labels)

        return program_input_fn(params).map(counted)

    monkeypatch.setattr(pb, "_input_fn", lambda *_: counting_input_fn)
    result = pb.run_compute_only(p, "ours", str(tmp_path / "model"), None)
    # The pool's batches are read once, before training; training, evaluate() and predict() read the pool.
    assert len(batches_read) == p.compute_pool_batches
    assert result["examples_per_sec"] > 0 and result["evaluate_examples_per_sec"] > 0


def test_time_to_first_step_ends_when_the_first_run_begins():
    import time

    class LoopEstimator:
        """Setup takes 0.1 s; then one run of a loop of steps takes 0.3 s; the session closes in 0.2 s."""

        def train(self, input_fn, max_steps, hooks):
            (hook,) = hooks
            time.sleep(0.1)
            hook.after_create_session(None, None)
            hook.before_run(None)
            time.sleep(0.3)
            hook.after_run(None, None)
            hook.end(None)
            time.sleep(0.2)

    phase = pb._train_phase(LoopEstimator(), None, max_steps=20, previous_steps=0, batch_size=8)
    assert 0.1 <= phase["seconds_to_first_step"] < 0.25
    assert phase["seconds"] >= 0.6 and phase["runs"] == 1
    assert 0.2 <= phase["seconds_after_hooks"] < 0.3  # the close after the hooks' end


def test_overlap_runs_one_process_per_implementation_after_the_rounds(monkeypatch):
    calls = []

    def fake_run_child(p, kind, implementation, interpreter, tfrecord_path, timeout=3600, pairs=0):
        calls.append((kind, implementation, pairs))
        if kind == "overlap":
            # ours: program-fed 90, 100, 120 over pool-fed 100 -> 90%, 100%, 120%; upstream: 80% each.
            programs = [90.0, 100.0, 120.0] if implementation == "ours" else [80.0, 80.0, 80.0]
            return {"pairs": [{"program": rate, "pool": 100.0, "ratio": rate / 100.0} for rate in programs]}
        return _fake_result(10.0, 100.0, 1.0, 1.0)

    monkeypatch.setattr(pb, "run_child", fake_run_child)
    interpreters = {"ours": pb.Interpreter(sys.executable), "upstream": pb.Interpreter(sys.executable)}
    result = pb.compare(pb.load_program("P_tiny"), 1, interpreters, bounds=False, log=lambda _: None, overlap_pairs=3)
    assert calls == [
        ("program", "ours", 0),
        ("program", "upstream", 0),
        ("overlap", "ours", 3),
        ("overlap", "upstream", 3),
    ]
    assert result["ratios"]["overlap_ours"]["values"] == [0.9, 1.0, 1.2]
    assert result["ratios"]["overlap_ours"]["median"] == 1.0
    assert result["ratios"]["overlap_upstream"]["median"] == 0.8
    assert (
        "The loop fed by the program's input over the loop fed by the pool, in one process, back to back "
        "(3 pairs, alternating which runs first): ours **100% (90%-120%)**, upstream 80% (80%-80%)."
    ) in pb.markdown(result)


def test_overlap_alternates_the_program_and_the_pool_on_one_model(tmp_path):
    import tensorflow as tf

    p = pb.load_program("P_tiny")
    with pytest.raises(ValueError, match="overlap pairs must be at least 1, got 0"):
        pb.run_overlap(p, "ours", str(tmp_path / "none"), None, 0)
    result = pb.run_overlap(p, "ours", str(tmp_path / "work"), None, 2)
    assert [pair["order"] for pair in result["pairs"]] == [["program", "pool"], ["pool", "program"]]
    # What each call followed: setup, P, Q | Q, P.
    assert [(pair["program_after"], pair["pool_after"]) for pair in result["pairs"]] == [
        ("setup", "program"),
        ("pool", "pool"),
    ]
    for pair in result["pairs"]:
        assert pair["program"] > 0 and pair["pool"] > 0
        assert pair["ratio"] == pytest.approx(pair["program"] / pair["pool"])
    # Setup (4 steps), then 4 calls of total_steps - first_steps = 10 steps each, all on one model.
    assert result["global_step"] == p.first_steps + 4 * (p.total_steps - p.first_steps) == 44
    model_dir = str(tmp_path / "work" / "model")
    assert tf.train.load_variable(model_dir, "global_step") == 44
    # The pool-fed calls read the file cache, filled once.
    assert any(name.startswith("batches") for name in os.listdir(tmp_path / "work" / "pool"))


def test_dense_floor_runs_in_each_pool_round_with_ours_interpreter(monkeypatch):
    calls = []
    evaluate = {"ours": iter([120.0, 90.0]), "upstream": iter([100.0, 60.0]), pb.DENSE_FLOOR: iter([150.0, 90.0])}

    def fake_run_child(p, kind, implementation, interpreter, tfrecord_path, timeout=3600, pairs=0):
        calls.append((kind, implementation, interpreter.python))
        if kind == "input":
            return {"examples_per_sec": 1000.0}
        rate = next(evaluate[implementation])
        return {"examples_per_sec": 10.0, "evaluate_examples_per_sec": rate, "predict_examples_per_sec": 2 * rate}

    monkeypatch.setattr(pb, "run_child", fake_run_child)
    interpreters = {"ours": pb.Interpreter("ours-python"), "upstream": pb.Interpreter("upstream-python")}
    p = pb.load_program("P_tiny")
    result = pb.compare(p, 0, interpreters, log=lambda _: None, dense_floor=True, pool_rounds=2)
    one_round = [
        ("compute", "ours", "ours-python"),
        ("compute", "upstream", "upstream-python"),
        ("compute", pb.DENSE_FLOOR, "ours-python"),
    ]
    assert calls == one_round * 2 + [("input", "ours", "ours-python")]
    ratios = result["ratios"]
    assert ratios["pool_evaluate_floor_over_upstream"]["values"] == [1.5, 1.5]
    assert ratios["pool_evaluate_ours_over_floor"]["values"] == [0.8, 1.0]
    assert ratios["pool_predict_floor_over_upstream"]["values"] == [1.5, 1.5]
    assert (
        "The dense part alone (ours' loop, the embedding activations an input: no lookup at all) 120 (90-150): per "
        "round **1.50 (1.50-1.50)x** upstream's whole model; ours' whole model at 90% (80%-100%) of it."
    ) in pb.markdown(result)


def test_dense_floor_input_keeps_the_dense_features_and_labels_and_replaces_the_sparse_ones():
    import tensorflow as tf

    p = pb.load_program("P_tiny")
    params = {"batch_size": p.batch_size}
    with tf.Graph().as_default():
        program = tf.compat.v1.data.make_one_shot_iterator(pb._input_fn(p, None)(params)).get_next()
        floor = tf.compat.v1.data.make_one_shot_iterator(pb.dense_floor_input_fn(p, None)(params)).get_next()
        with tf.compat.v1.Session() as session:
            (program_features, program_labels), (floor_features, floor_labels) = session.run([program, floor])
    assert sorted(floor_features) == sorted([pb.ACTIVATIONS_KEY, "dense"])
    assert floor_features[pb.ACTIVATIONS_KEY].shape == (p.batch_size, p.num_tables * p.dim)
    assert 0.05 < floor_features[pb.ACTIVATIONS_KEY].std() < 0.2  # 0.1 * N(0, 1)
    np.testing.assert_array_equal(floor_features["dense"], program_features["dense"])
    np.testing.assert_array_equal(floor_labels, program_labels)


def test_dense_floor_trains_evaluates_and_predicts_without_tables(tmp_path):
    import tensorflow as tf

    p = pb.load_program("P_tiny")
    result = pb.run_compute_only(p, pb.DENSE_FLOOR, str(tmp_path / "model"), None)
    for key in ("examples_per_sec", "evaluate_examples_per_sec", "predict_examples_per_sec"):
        assert result[key] > 0, result
    names = [name for name, _ in tf.train.list_variables(str(tmp_path / "model"))]
    assert tf.train.load_variable(str(tmp_path / "model"), "global_step") == p.total_steps
    # The MLP 16-1 on tables * dim + dense inputs; no embedding table.
    assert tf.train.load_variable(str(tmp_path / "model"), "dense/kernel").shape == (
        p.num_tables * p.dim + p.num_dense,
        16,
    )
    assert not [name for name in names if "embedding" in name], names


def test_failed_overlap_and_floor_runs_are_reported_and_bad_arguments_refused(monkeypatch):
    def fake_run_child(p, kind, implementation, interpreter, tfrecord_path, timeout=3600, pairs=0):
        if (kind, implementation) in (("overlap", "upstream"), ("compute", pb.DENSE_FLOOR)):
            return {"error": "exit status 1: boom"}
        if kind == "overlap":
            return {"pairs": [{"program": 90.0, "pool": 100.0, "ratio": 0.9}]}
        return {"examples_per_sec": 10.0, "evaluate_examples_per_sec": 5.0, "predict_examples_per_sec": 4.0}

    monkeypatch.setattr(pb, "run_child", fake_run_child)
    interpreters = {"ours": pb.Interpreter(sys.executable), "upstream": pb.Interpreter(sys.executable)}
    p = pb.load_program("P_tiny")
    result = pb.compare(p, 0, interpreters, log=lambda _: None, overlap_pairs=1, dense_floor=True)
    assert (
        result["ratios"]["overlap_upstream"] is None and result["ratios"]["pool_evaluate_floor_over_upstream"] is None
    )
    report = pb.markdown(result)
    assert "Failed runs: upstream overlap: exit status 1: boom; dense_floor pool: exit status 1: boom." in report
    assert "ours **90% (90%-90%)**, upstream -." in report
    assert "The dense part alone" not in report
    with pytest.raises(ValueError, match="overlap_pairs must be 0"):
        pb.compare(p, 0, interpreters, overlap_pairs=-1)
    with pytest.raises(ValueError, match="dense_floor runs in the pool rounds: it needs bounds"):
        pb.compare(p, 0, interpreters, bounds=False, dense_floor=True)
    with pytest.raises(ValueError, match=r"pool_rounds \(2\) is for runs=0"):
        pb.compare(p, 1, interpreters, pool_rounds=2)


def test_spread_gives_each_implementations_range_and_its_worst_run_against_its_median(monkeypatch):
    # Issue 38's series 3 as crafted rounds: ours 41.8, 52.5, 34.0 s (median 41.8; worst 52.5 = +26%), upstream
    # 53.6, 54.4, 54.5 s (median 54.4; worst +0.2%); a fourth round whose ours failed counts for upstream only.
    walls = iter([41.8, 53.6, 52.5, 54.4, 34.0, 54.5, None, 60.0])
    seconds = iter([30.0, 45.0, 40.0, 46.0, 24.0, 47.0, None, 50.0])

    def fake_run_child(p, kind, implementation, interpreter, tfrecord_path, timeout=3600):
        wall, second = next(walls), next(seconds)
        if wall is None:
            return {"error": "exit status 1"}
        result = _fake_result(wall, 100.0, 1.0, 1.0)
        result["second_train"]["seconds"] = second
        return result

    monkeypatch.setattr(pb, "run_child", fake_run_child)
    interpreters = {"ours": pb.Interpreter(sys.executable), "upstream": pb.Interpreter(sys.executable)}
    result = pb.compare(pb.load_program("P_tiny"), 4, interpreters, bounds=False, log=lambda _: None)
    wall = result["spread"]["wall time, whole process"]
    assert wall["ours"]["values"] == [41.8, 52.5, 34.0] and wall["ours"]["median"] == 41.8
    assert wall["ours"]["worst_over_median"] == pytest.approx(52.5 / 41.8)
    assert wall["ours"]["best_over_median"] == pytest.approx(34.0 / 41.8)
    assert wall["upstream"]["values"] == [53.6, 54.4, 54.5, 60.0]
    assert wall["upstream"]["worst_over_median"] == pytest.approx(60.0 / 54.45)
    second = result["spread"]["second `train()`"]
    assert second["ours"]["worst_over_median"] == pytest.approx(40.0 / 30.0)
    report = pb.markdown(result)
    assert (
        "Spread (each implementation's range, and its slowest run against its median): wall time, whole process: "
        "ours 34.0-52.5 s, worst +26%, upstream 53.6-60.0 s, worst +10%; second `train()`: ours 24.0-40.0 s, "
        "worst +33%, upstream 45.0-50.0 s, worst +8%." in report
    )
    assert pb.spread([]) is None and pb.spread([None]) is None


def _tiny_whole_program_a():
    p = pb.load_program("P_whole_program_a")
    assert (p.source, p.num_tables, p.rows, p.dim, p.batch_size, p.mlp, p.prefetch) == (
        "arrays",
        26,
        100000,
        16,
        1024,
        [512, 256, 1],
        4,
    )
    assert (p.first_steps, p.total_steps, p.iterations_per_loop, p.per_host_v2, p.save_checkpoints) == (
        20,
        320,
        100,
        True,
        False,
    )
    return dataclasses.replace(
        p,
        num_tables=3,
        rows=50,
        dim=2,
        batch_size=8,
        mlp=[4, 1],
        num_dense=2,
        array_batches=2,
        first_steps=2,
        total_steps=6,
        iterations_per_loop=2,
    )


def test_whole_program_a_input_is_the_workloads_numpy_arrays_as_sparse_ids_plus_one():
    import tensorflow as tf

    p = _tiny_whole_program_a()
    # The oracle: the workload's arrays (NumPy, seed 0), examples in order, repeated after array_batches batches.
    rng = np.random.default_rng(p.seed)
    n = p.batch_size * p.array_batches
    ids = (rng.zipf(1.2, size=(n, 3, 1)) - 1) % 50
    dense = rng.random((n, 2), dtype=np.float32)
    labels = rng.integers(0, 2, size=(n,)).astype(np.float32)
    with tf.Graph().as_default():
        batch = tf.compat.v1.data.make_one_shot_iterator(pb._input_fn(p, None)({"batch_size": 8})).get_next()
        with tf.compat.v1.Session() as session:
            for b in (0, 1, 0):  # the third batch is the first again
                features, got_labels = session.run(batch)
                rows = slice(b * 8, (b + 1) * 8)
                for t in range(3):
                    sparse = features["f%02d" % t]
                    np.testing.assert_array_equal(sparse.dense_shape, [8, 1])
                    np.testing.assert_array_equal(sparse.indices, np.stack([np.arange(8), np.zeros(8, int)], 1))
                    np.testing.assert_array_equal(sparse.values, ids[rows, t, 0] + 1)
                np.testing.assert_array_equal(features["dense"], dense[rows])
                np.testing.assert_array_equal(got_labels, labels[rows])
    assert pb._feature_names(p) == ({"f00": 51, "f01": 51, "f02": 51}, "dense")


def test_whole_program_a_runs_tiny_without_checkpoints_so_its_second_train_starts_again(tmp_path):
    import tensorflow as tf

    p = _tiny_whole_program_a()
    run = pb.run_program(p, "ours", str(tmp_path), None)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
    # No checkpoint: the second train() runs all 6 steps again, 3 loops of iterations_per_loop 2.
    assert pb.steps_before_second_train(p) == 0
    assert run["first_train"]["runs"] == 1 and run["second_train"]["runs"] == 3
    assert run["loop_examples_per_sec"] > 0 and "evaluate" not in run and "predict" not in run
    with pytest.raises(ValueError, match="P_whole_program_a: the overlap .* needs save_checkpoints"):
        pb.run_overlap(p, "ours", str(tmp_path), None, 1)


@pytest.mark.upstream
def test_whole_program_a_runs_tiny_on_upstream_the_same_steps_without_checkpoints(tmp_path):
    import tensorflow as tf

    p = _tiny_whole_program_a()
    run = pb.run_program(p, "upstream", str(tmp_path), None)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
    # One step per Session.run: 2, then all 6 steps again.
    assert run["first_train"]["runs"] == 2 and run["second_train"]["runs"] == 6
    assert run["loop_examples_per_sec"] > 0
