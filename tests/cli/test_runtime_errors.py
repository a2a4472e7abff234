"""Data and checkpoint problems TensorFlow meets while a subcommand runs end in one line and exit 2; the data
command; rerunning train at its target; label-less and empty predict input (issue 17 items 5-7, issue 19)."""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from tpu_estimator.app import cli, config_file
from tpu_estimator.app.data import criteo, synthetic

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = ["--set=train.steps=5", "--set=train.save_checkpoints_steps=5", "--set=eval.steps=1"]


def run_in_process(*args):
    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    return cli.run(flag_values(["tpu-estimator"] + list(args)), flag_values)


def failed_training(capsys, *args) -> str:
    """`train` with `args`: it fails with status 2; its one-line error."""
    assert run_in_process("train", "--config=dlrm_tiny", *args) == 2
    return error_line(capsys, "train")


def error_line(capsys, subcommand):
    """The last line of stderr, which must be the command's one-line error."""
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith(f"tpu-estimator {subcommand}: error: "), err
    assert not any("Traceback" in line for line in err), err
    return err[-1]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """`train.tsv` (300 synthetic rows), `train.held_out.tsv` (100 more) written by the data command."""
    directory = tmp_path_factory.mktemp("rows")
    assert (
        run_in_process(
            "data", "--rows=300", "--held_out_rows=100", "--max_vocab=100", f"--output={directory}/train.tsv"
        )
        == 0
    )
    return directory


@pytest.fixture(scope="module")
def dlrm_dir(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("dlrm")
    assert run_in_process("train", "--config=dlrm_tiny", f"--model_dir={model_dir}", *FAST) == 0
    return model_dir


def test_data_command_writes_the_synthetic_rows_of_the_config(rows, tmp_path, capsys):
    generator = synthetic.SyntheticCriteo(
        synthetic.SyntheticCriteoSpec(seed=0, cardinalities=tuple(criteo.criteo_cardinalities(100)))
    )
    with open(rows / "train.tsv") as f:
        assert f.read().splitlines() == generator.generate(300).tsv_lines()
    with open(rows / "train.held_out.tsv") as f:
        assert f.read().splitlines() == generator.generate(100, start=300).tsv_lines()
    # TFRecord: written directly, and converted from the TSV file, give the same examples.
    direct, converted = tmp_path / "direct.tfrecord", tmp_path / "converted.tfrecord"
    assert run_in_process("data", "--rows=300", "--max_vocab=100", f"--output={direct}") == 0
    assert f"wrote 300 synthetic rows to {direct} (seed 0)" in capsys.readouterr().out
    assert run_in_process("data", f"--input={rows}/train.tsv", f"--output={converted}") == 0
    assert f"wrote 300 records to {converted}" in capsys.readouterr().out
    a = list(tf.data.TFRecordDataset(str(direct)).as_numpy_iterator())
    b = list(tf.data.TFRecordDataset(str(converted)).as_numpy_iterator())
    assert len(a) == 300 and a == b


def test_malformed_row_is_one_line_naming_file_and_line(rows, tmp_path, capsys):
    with open(rows / "train.tsv") as f:
        lines = f.read().splitlines()
    lines[56] = "1\t2\tx"
    bad = tmp_path / "bad.tsv"
    bad.write_text("\n".join(lines) + "\n")
    args = [
        "--config=dlrm_tiny",
        f"--model_dir={tmp_path}/m",
        "--set=data.source=tsv",
        f"--set=data.train_paths=[{bad}]",
        "--validate_rows=0",  # the reader's own error, for a line beyond the sample checked before training
    ]
    assert run_in_process("train", *args, *FAST) == 2
    assert error_line(capsys, "train").endswith(
        f"{bad}:57: expected 40 tab-separated fields, got 3 (data.skip_malformed=true skips malformed lines)"
    )
    assert run_in_process("data", f"--input={bad}", f"--output={tmp_path}/bad.tfrecord") == 2
    assert error_line(capsys, "data").endswith(
        f"{bad}:57: expected 40 tab-separated fields, got 3 (--skip_malformed skips malformed lines)"
    )


def test_checkpoint_of_another_model_is_one_line_and_config_yaml_is_not_written(dlrm_dir, tmp_path, capsys):
    undescribed = tmp_path / "undescribed"
    tf.io.gfile.makedirs(str(undescribed))
    for name in os.listdir(dlrm_dir):
        if name != "config.yaml" and not os.path.isdir(dlrm_dir / name):
            tf.io.gfile.copy(str(dlrm_dir / name), str(undescribed / name))
    assert run_in_process("train", "--config=wide_deep_tiny", f"--model_dir={undescribed}", "--set=train.steps=10") == 2
    line = error_line(capsys, "train")
    assert f"model_dir {undescribed}: its checkpoint does not fit the model of this config (wide_deep): Key " in line
    assert "not found in checkpoint; it was written by another model: use a new --model_dir" in line
    assert not os.path.exists(undescribed / "config.yaml")


def test_rerunning_train_at_its_target_keeps_the_metrics(dlrm_dir, capsys):
    metrics_path = dlrm_dir / "metrics_train.json"
    before = metrics_path.read_text()
    assert json.loads(before)["global_step"] == 5 and json.loads(before)["final_loss"] is not None
    capsys.readouterr()
    assert run_in_process("train", f"--model_dir={dlrm_dir}", *FAST) == 0  # the config saved in the directory
    out = capsys.readouterr().out
    assert f"train: the model in {dlrm_dir} is at global step 5, already at the target step 5: nothing to train" in out
    assert f"{metrics_path} is kept" in out and "final_loss" not in out
    assert metrics_path.read_text() == before


def test_evaluation_without_a_batch_is_an_error(dlrm_dir, rows, tmp_path, capsys):
    three = tmp_path / "three.tsv"
    with open(rows / "train.tsv") as f:
        three.write_text("".join(f.readlines()[:3]))
    args = ["--set=data.source=tsv", f"--set=data.train_paths=[{rows}/train.tsv]", f"--set=data.eval_paths=[{three}]"]
    assert run_in_process("evaluate", f"--model_dir={dlrm_dir}", *args) == 2
    assert error_line(capsys, "evaluate").endswith(
        f"no evaluation examples: data.eval_paths ({three}) holds less than one batch (eval.batch_size 32)"
    )


def test_predict_reads_rows_without_labels_and_says_when_there_are_none(dlrm_dir, rows, tmp_path, capsys):
    with open(rows / "train.held_out.tsv") as f:
        labelled = f.read().splitlines()[:20]
    unlabelled = tmp_path / "test.tsv"  # Criteo's test.txt format: 39 fields
    unlabelled.write_text("".join(line.split("\t", 1)[1] + "\n" for line in labelled))
    labelled_path = tmp_path / "labelled.tsv"
    labelled_path.write_text("\n".join(labelled) + "\n")
    assert (
        run_in_process("predict", f"--model_dir={dlrm_dir}", f"--input={unlabelled}", f"--output={tmp_path}/u.csv") == 0
    )
    assert (
        run_in_process("predict", f"--model_dir={dlrm_dir}", f"--input={labelled_path}", f"--output={tmp_path}/l.csv")
        == 0
    )
    with open(tmp_path / "u.csv") as f:
        u = list(csv.DictReader(f))
    with open(tmp_path / "l.csv") as f:
        labelled_rows = list(csv.DictReader(f))
    assert len(u) == len(labelled_rows) == 20
    assert all(r["label"] == "" for r in u)
    assert [r["label"] for r in labelled_rows] == [line.split("\t")[0] for line in labelled]
    np.testing.assert_allclose([float(r["probability"]) for r in u], [float(r["probability"]) for r in labelled_rows])
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    capsys.readouterr()
    assert run_in_process("predict", f"--model_dir={dlrm_dir}", f"--input={empty}", f"--output={tmp_path}/e.csv") == 0
    assert "predict: no rows in " + str(empty) + ": nothing written" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "e.csv")


def test_train_and_evaluate_prints_the_final_metrics_once(tmp_path, capsys):
    args = ["--config=dlrm_tiny", f"--model_dir={tmp_path}", "--set=train.steps=10", "--set=train.eval_every_steps=5"]
    assert run_in_process("train_and_evaluate", *args, "--set=eval.steps=1") == 0
    out = capsys.readouterr().out
    assert out.count("evaluation at step 5:") == 1
    assert "evaluation at step 10:" not in out
    assert out.count("  auc ") == 2  # the intermediate evaluation and the final one
    assert out.count("(loss: the first of 2 shards' rows of each batch, as TPUEstimator reports it; log_loss: all") == 1
    assert json.loads((tmp_path / "metrics_train_and_evaluate.json").read_text())["global_step"] == 10


def test_config_yaml_describes_the_trained_model(dlrm_dir):
    saved = config_file.load_config(str(dlrm_dir / "config.yaml"))
    assert saved.model.name == "dlrm" and saved.train.steps == 5 and saved.model_dir == str(dlrm_dir)


def test_evaluation_steps_beyond_the_data_name_the_batches_it_holds(dlrm_dir, rows, tmp_path, capsys):
    forty = tmp_path / "forty.tsv"
    with open(rows / "train.tsv") as f:
        forty.write_text("".join(f.readlines()[:40]))  # one batch of 32
    args = ["--set=data.source=tsv", f"--set=data.train_paths=[{rows}/train.tsv]", f"--set=data.eval_paths=[{forty}]"]
    assert run_in_process("evaluate", f"--model_dir={dlrm_dir}", "--set=eval.steps=3", *args) == 2
    assert error_line(capsys, "evaluate").endswith(
        "eval.steps 3: the evaluation data holds only 1 batches of eval.batch_size 32; set eval.steps <= 1, or "
        "eval.steps=null to use every full batch"
    )


def test_a_failed_data_check_is_one_line_naming_feature_table_and_id(tmp_path, capsys, monkeypatch):
    # What the embedding engine's id check raises inside a session run (TensorFlow escapes the quotes).
    from tpu_estimator.app import commands

    message = (
        "Graph execution error:\n\nDetected at node 'x' defined at (most recent call last):\n  File \"a.py\"\n"
        "assertion failed: [Feature \\'cat_3\\' (table \\'tbl_cat_3\\'): ids must be in [0, 500) (vocabulary_size); "
        "smallest and largest id:] [0] [731]\n\t [[{{node Assert}}]]"
    )

    def run(subcommand, config, flag_values):
        raise tf.errors.InvalidArgumentError(None, None, message)

    monkeypatch.setattr(commands, "run", run)
    assert run_in_process("train", "--config=dlrm_tiny", f"--model_dir={tmp_path}/m") == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["tpu-estimator train: importing TensorFlow, then building the graph ..."]
    assert captured.err.strip().splitlines() == [
        "tpu-estimator train: error: the data failed a check: Feature 'cat_3' (table 'tbl_cat_3'): ids must be in "
        "[0, 500) (vocabulary_size); smallest and largest id: 0, 731"
    ]
