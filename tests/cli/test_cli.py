"""The tpu-estimator command line, end to end in subprocesses on the tiny config."""

import csv
import glob
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from tpu_estimator.app import cli
from tpu_estimator.app import progress as cli_progress
from tpu_estimator.app.data import convert, criteo, synthetic

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(REPO, "configs", "dlrm_tiny.yaml")


def run_cli(*args, check=True):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "tpu_estimator_cli.py")] + list(args),
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def run_in_process(*args):
    """`cli.run` with fresh flags (what `main` does, without the process)."""
    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    argv = flag_values(["tpu-estimator"] + list(args))
    return cli.run(argv, flag_values)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.quick
def test_config_errors_name_the_key_path(capsys):
    assert run_in_process("train", f"--config={TINY}", "--set=train.batch_size=abc") == 2
    err = capsys.readouterr().err
    assert "train.batch_size: expected int, got str 'abc'" in err
    assert run_in_process("train", f"--config={TINY}", "--set=model.bottom_mlpp=[4]") == 2
    assert "model.bottom_mlpp: unknown key" in capsys.readouterr().err
    assert run_in_process("train", f"--config={TINY}", "--set=train.batch_size=33") == 2
    assert "train.batch_size: 33 must be divisible by tpu.num_shards 2" in capsys.readouterr().err
    assert run_in_process("train", f"--config={TINY}") == 2  # no model_dir
    assert "model_dir: not set" in capsys.readouterr().err
    assert run_in_process("fly", f"--config={TINY}") == 2
    assert "expected one subcommand" in capsys.readouterr().err


def test_config_error_in_a_subprocess(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {name: dlrm, embedding_dim: 4, bottom_mlp: [8, 5]}\n")
    proc = run_cli("evaluate", f"--config={bad}", f"--model_dir={tmp_path}", check=False)
    assert proc.returncode == 2
    assert "model.bottom_mlp: last layer (5) must equal model.embedding_dim (4)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_train_resume_evaluate_export_predict(tmp_path):
    model_dir = str(tmp_path / "model")
    common = [f"--config={TINY}", f"--model_dir={model_dir}"]

    first = run_cli("train", *common, "--set=train.steps=10", "--progress_steps=5")
    assert "step 10/10" in first.stdout and "examples/s" in first.stdout
    assert read_json(os.path.join(model_dir, "metrics_train.json"))["global_step"] == 10
    run_cli("train", *common, "--set=train.steps=20")  # resumes from step 10
    trained = read_json(os.path.join(model_dir, "metrics_train.json"))
    assert trained["global_step"] == 20 and trained["steps_run"] == 10
    assert glob.glob(os.path.join(model_dir, "events.out.tfevents.*"))

    evaluate = run_cli("evaluate", *common)
    assert "auc" in evaluate.stdout
    metrics = read_json(os.path.join(model_dir, "metrics_evaluate.json"))
    assert metrics["global_step"] == 20
    assert math.isfinite(metrics["auc"]) and 0 <= metrics["auc"] <= 1
    assert math.isfinite(metrics["log_loss"]) and metrics["log_loss"] > 0

    run_cli("export", *common)
    export_dir = read_json(os.path.join(model_dir, "metrics_export.json"))["export_dir"]
    assert os.path.exists(os.path.join(export_dir, "saved_model.pb"))

    # The same rows: served by the SavedModel (config read from the export) from TSV, and by predict() from the
    # checkpoint, reading the TFRecord conversion of the TSV file.
    tsv = str(tmp_path / "rows.tsv")
    generator = synthetic.SyntheticCriteo(
        synthetic.SyntheticCriteoSpec(seed=5, cardinalities=tuple(criteo.criteo_cardinalities(100)))
    )
    generator.write_tsv(tsv, 50)
    tfrecord = str(tmp_path / "rows.tfrecord")
    assert convert.convert_tsv_to_tfrecord(tsv, tfrecord) == 50
    served = run_cli("predict", f"--export_dir={export_dir}", f"--input={tsv}", f"--output={tmp_path}/served.csv")
    assert "wrote 50 predictions" in served.stdout and "probability=" in served.stdout
    run_cli("predict", *common, f"--input={tfrecord}", f"--output={tmp_path}/predicted.csv")
    served_rows, predicted_rows = read_csv(tmp_path / "served.csv"), read_csv(tmp_path / "predicted.csv")
    assert len(served_rows) == len(predicted_rows) == 50
    assert [r["label"] for r in served_rows] == [r["label"] for r in predicted_rows]
    for key in ("probability", "logit"):
        np.testing.assert_allclose(
            [float(r[key]) for r in served_rows], [float(r[key]) for r in predicted_rows], rtol=1e-5, atol=1e-6
        )
    probabilities = np.array([float(r["probability"]) for r in served_rows])
    assert np.all((probabilities > 0) & (probabilities < 1)) and probabilities.std() > 0


def test_progress_lines():
    assert cli_progress.format_duration(5) == "5s"
    assert cli_progress.format_duration(125) == "2m05s"
    assert cli_progress.format_duration(3723) == "1h02m03s"
    hook = cli_progress.ProgressHook(batch_size=100, last_step=1000)
    hook.last_loss = 0.5
    assert hook._line(400, 2000.0, 30.0) == "step 400/1000  loss 0.5000  2,000 examples/s  ETA 30s"
    assert hook._line(400, 2000.0, None) == "step 400/1000  loss 0.5000  2,000 examples/s  ETA after the first loop"
    assert hook._line(1000, 2000.0, 0.0) == "step 1000/1000  loss 0.5000  2,000 examples/s"
    hook.points = [(0.0, 0), (10.0, 100), (12.0, 200), (14.0, 300)]  # the first run includes warm-up
    assert hook.steps_run == 300
    assert hook.examples_per_sec() == pytest.approx(200 * 100 / 4.0)
    assert hook.examples_per_sec(skip_first_run=False) == pytest.approx(300 * 100 / 14.0)


class _FakeSession:
    """Answers the hook's `session.run(global_step)` with the simulated step."""

    def __init__(self):
        self.step = 0

    def run(self, fetches):
        return self.step


class _FakeRunContext:
    def __init__(self, session):
        self.session = session


@pytest.mark.quick
def test_progress_eta_settles_within_the_first_tenth(monkeypatch):
    """Simulated timings: 100 steps in loops of 10; the first loop takes 30 s (graph building and warm-up in it),
    each later one 2 s. Every ETA printed from 10% of the steps on is within 2x of the true remaining time (the pace
    of the first loop gave 270 s for 18 s left at step 10)."""
    clock = {"now": 1000.0}
    monkeypatch.setattr(cli_progress.time, "time", lambda: clock["now"])
    lines = []
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        hook = cli_progress.ProgressHook(batch_size=32, last_step=100, every_secs=10.0, printer=lines.append)
        hook.begin()
        session = _FakeSession()
        hook.after_create_session(session, None)
        true_remaining = {}
        for loop in range(10):
            clock["now"] += 30.0 if loop == 0 else 2.0
            session.step += 10
            true_remaining[session.step] = (100 - session.step) * 0.2
            hook.after_run(_FakeRunContext(session), None)
    progress = [line for line in lines if line.startswith("step ")]
    assert progress[0] == "step 10/100  11 examples/s  ETA after the first loop"
    etas = {}
    for line in progress[1:-1]:
        step = int(line.split()[1].split("/")[0])
        etas[step] = float(line.split("ETA ")[1].rstrip("s"))
    assert etas and min(etas) <= 70
    for step, eta in etas.items():
        assert true_remaining[step] / 2 <= eta <= true_remaining[step] * 2, (step, eta, true_remaining[step])
    assert progress[-1] == "step 100/100  160 examples/s"
    assert len(progress) == 3, progress


def test_progress_shows_the_last_step_even_before_its_period():
    lines = []
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(global_step, 1)
        hook = cli_progress.ProgressHook(batch_size=8, last_step=3, every_secs=1e9, printer=lines.append)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for _ in range(3):
                session.run(train_op)
    # The phases before the first progress line, then the last step.
    assert lines[:2] == [
        "creating the session (initializing variables and embedding tables) ...",
        "training from step 0: the first loop includes the warm-up ...",
    ]
    assert [line.split()[:2] for line in lines[2:]] == [["step", "3/3"]]
