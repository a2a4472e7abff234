"""`BestExporter`: which evaluation results export and which exports are kept, on the active core and against
upstream's on TF 2.15."""

import os

import pytest
import tensorflow as tf

from tests.estimator_core import helpers
from tests.estimator_core.cores import OURS, upstream
from tpu_estimator import estimator as active

LOSSES = [3.0, 2.0, 2.5, 1.0, 1.5, 0.5]


def _serving_fn(lib):
    return lib.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 3])})


def _write_eval_events(model_dir, results):
    """Scalar summaries in `model_dir/eval`, as `Estimator.evaluate` writes them, one event per result."""
    with tf.Graph().as_default():
        writer = tf.compat.v1.summary.FileWriter(os.path.join(str(model_dir), "eval"))
        for step, result in enumerate(results):
            values = [tf.compat.v1.Summary.Value(tag=tag, simple_value=value) for tag, value in result.items()]
            writer.add_summary(tf.compat.v1.Summary(value=values), step)
        writer.close()


def export_sequence(lib, model_dir, results, events=(), **exporter_kwargs):
    """Calls a fresh `BestExporter` once per result: `(exported? per call, the calls whose exports are kept)`."""
    if events:
        _write_eval_events(model_dir, events)
    estimator = lib.Estimator(helpers.linear_model_fn(lib), config=lib.RunConfig(model_dir=str(model_dir)))
    estimator.train(helpers.input_fn(), steps=1)
    exporter = lib.BestExporter("best", _serving_fn(lib), **exporter_kwargs)
    export_path = os.path.join(str(model_dir), "export", "best")
    exported, call_of_dir = [], {}
    for call, result in enumerate(results):
        path = exporter.export(estimator, export_path, estimator.latest_checkpoint(), result, False)
        exported.append(path is not None)
        if path is not None:
            assert os.path.isfile(os.path.join(path.decode(), "saved_model.pb"))
            call_of_dir[os.path.basename(path.decode())] = call
    kept = sorted(call_of_dir[name] for name in os.listdir(export_path)) if os.path.isdir(export_path) else []
    return exported, kept


def _higher_accuracy(best_eval_result, current_eval_result):
    return current_eval_result["accuracy"] > best_eval_result["accuracy"]


SCENARIOS = {
    # Smaller loss exports; the first call always does; the 2 newest exports are kept.
    "loss": dict(results=[{"loss": v} for v in LOSSES], exports_to_keep=2),
    # A compare_fn of its own, no garbage collection. An event-file best (0.9) does not stop the first export.
    "accuracy": dict(
        results=[{"accuracy": v, "loss": 1.0} for v in (0.5, 0.4, 0.7)],
        events=[{"accuracy": 0.9, "loss": 1.0}],
        compare_fn=_higher_accuracy,
        exports_to_keep=None,
    ),
}
EXPECTED = {"loss": ([True, True, False, True, False, True], [3, 5]), "accuracy": ([True, False, True], [0, 2])}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_best_exporter_exports_better_results_and_keeps_the_newest(tmp_path, scenario):
    assert export_sequence(active, tmp_path, **SCENARIOS[scenario]) == EXPECTED[scenario]


def test_best_exporter_reads_the_best_result_from_event_files(tmp_path):
    # The event files are compared with compare_fn: an evaluation without `loss` there fails the default one.
    events = [{"mae": 1.0}, {"loss": 2.0}]
    with pytest.raises(ValueError, match="best_eval_result cannot be empty or no loss is found in it"):
        export_sequence(active, tmp_path / "events", [{"loss": 1.0}], events=events)
    # Without an event file pattern they are not read.
    assert export_sequence(active, tmp_path / "none", [{"loss": 1.0}], events=events, event_file_pattern=None) == (
        [True],
        [0],
    )


def test_best_exporter_validation():
    with pytest.raises(ValueError, match="`compare_fn` must not be None"):
        active.BestExporter(compare_fn=None)
    with pytest.raises(ValueError, match="must include current_eval_result argument"):
        active.BestExporter(compare_fn=lambda best_eval_result: True)
    with pytest.raises(ValueError, match="has following not expected args"):
        active.BestExporter(compare_fn=lambda best_eval_result, current_eval_result, other: True)
    with pytest.raises(ValueError, match="`exports_to_keep`, if provided, must be a positive number. Got 0"):
        active.BestExporter(exports_to_keep=0)
    assert active.BestExporter().name == "best_exporter"


@pytest.mark.upstream
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_best_exporter_matches_upstream(tmp_path, scenario):
    ours = export_sequence(OURS, tmp_path / "ours", **SCENARIOS[scenario])
    theirs = export_sequence(upstream(), tmp_path / "upstream", **SCENARIOS[scenario])
    assert ours == theirs == EXPECTED[scenario]
