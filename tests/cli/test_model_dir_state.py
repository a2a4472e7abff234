"""The CLI leaves a model directory as it found it when it does not train (issue 36 items 2-3): `config.yaml` is
written only at a checkpoint of the run's own (so under the model_dir lock); a trainer refused by the lock exits 2
with its message whole; a run failing on bad data keeps the directory's config; a damaged `checkpoint` file is one
line naming it, exit 2."""

import os
import re
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.cli.test_runtime_errors import FAST, run_in_process
from tpu_estimator.checkpoints.model_dir_lock import LOCK_FILE_NAME, ModelDirLock


def error_line(capsys, subcommand):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith(f"tpu-estimator {subcommand}: error: "), err
    return err[-1][len(f"tpu-estimator {subcommand}: error: ") :]


def files_of(model_dir):
    return sorted(os.listdir(model_dir))


def checkpoint_values(model_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
    # The input position is left out: a run reading other data (the failing run below) restarts its input, and its
    # session-start save rewrites the latest checkpoint without the old data's position (the model's values stay).
    names = [name for name in reader.get_variable_to_shape_map() if not name.startswith("input_position/")]
    return {name: np.asarray(reader.get_tensor(name)).tolist() for name in names}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("dlrm") / "model"
    assert run_in_process("train", "--config=dlrm_tiny", f"--model_dir={model_dir}", *FAST) == 0
    return model_dir


def test_a_trainer_refused_by_the_lock_exits_2_whole_and_writes_nothing(trained, tmp_path, capsys):
    config = (trained / "config.yaml").read_bytes()
    fresh = tmp_path / "fresh"
    for model_dir in (trained, fresh):
        before = files_of(model_dir) if model_dir.exists() else None
        with ModelDirLock(str(model_dir)):
            status = run_in_process(
                "train", "--config=dlrm_tiny", f"--model_dir={model_dir}", "--set=train.steps=10",
                "--set=train.batch_size=64", "--set=optimizer.dense.learning_rate=0.5",
            )  # fmt: skip
            assert status == 2
            message = error_line(capsys, "train")
            assert message.startswith(f"model_dir {model_dir} is being trained by another process: host ")
            assert message.endswith(
                f"delete the lock file {model_dir / LOCK_FILE_NAME}. (Readers such as evaluate, predict and export "
                "need no lock.)"
            )
            assert files_of(model_dir) == sorted((before or []) + [LOCK_FILE_NAME]) and before != []
    assert (trained / "config.yaml").read_bytes() == config
    assert files_of(fresh) == []


def test_a_run_failing_on_bad_data_keeps_the_config_and_checkpoints(trained, tmp_path, capsys):
    config = (trained / "config.yaml").read_bytes()
    values = checkpoint_values(trained)
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\t2\tnot a criteo line\n" * 64)
    status = run_in_process(
        "train", f"--model_dir={trained}", "--set=train.steps=10", "--set=train.batch_size=32",
        "--set=data.source=tsv", f"--set=data.train_paths=[{bad}]",
        "--validate_rows=0",  # fails in the reader, after the graph is built (the sample check would fail first)
    )  # fmt: skip
    assert status == 2
    assert re.match(rf"{re.escape(str(bad))}:\d+: expected 40 tab-separated fields", error_line(capsys, "train"))
    assert (trained / "config.yaml").read_bytes() == config
    assert checkpoint_values(trained) == values
    # A run that trains writes its config (at its first checkpoint).
    assert run_in_process("train", f"--model_dir={trained}", "--set=train.steps=10") == 0
    assert (trained / "config.yaml").read_bytes() != config
    assert "steps: 10" in (trained / "config.yaml").read_text()


def test_a_damaged_checkpoint_file_is_one_line_naming_it_exit_2(trained, tmp_path, capsys):
    model_dir = tmp_path / "model"
    os.makedirs(model_dir)
    for name in os.listdir(trained):
        if os.path.isfile(trained / name):
            (model_dir / name).write_bytes((trained / name).read_bytes())
    state = model_dir / "checkpoint"
    state.write_bytes(state.read_bytes()[:20])
    step = checkpoint_values(trained)["global_step"]
    before = {name: (model_dir / name).read_bytes() for name in files_of(model_dir)}
    for subcommand in ("train", "evaluate", "export"):
        assert run_in_process(subcommand, f"--model_dir={model_dir}", "--set=train.steps=20") == 2
        message = error_line(capsys, subcommand)
        assert message.startswith(f"model_dir {model_dir}: the checkpoint state file {state} cannot be trusted: ")
        assert f"'model_checkpoint_path: \"model.ckpt-{step}\"'" in message
    assert {name: (model_dir / name).read_bytes() for name in files_of(model_dir)} == before


def test_every_line_skipped_is_a_clear_error_within_seconds(tmp_path):
    """Without the fix the reader repeats the files forever finding no line, and training never takes a step."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\t2\tnot a criteo line\n" * 100)
    start = time.time()
    proc = subprocess.run(
        [sys.executable, os.path.join(repo, "scripts", "tpu_estimator_cli.py"), "train", "--config=dlrm_tiny",
         f"--model_dir={tmp_path / 'model'}", "--set=data.source=tsv", f"--set=data.train_paths=[{bad}]",
         "--set=data.skip_malformed=true"],
        capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=repo), cwd=repo, timeout=120,
    )  # fmt: skip
    assert time.time() - start < 120
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"tpu-estimator train: error: no training examples: data.train_paths ({bad}) holds less than one batch of "
        "well-formed lines (data.skip_malformed=true skipped the others) (train.batch_size 32)"
    )
    assert not (tmp_path / "model" / "config.yaml").exists()
