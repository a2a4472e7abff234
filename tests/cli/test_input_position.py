"""The CLI's checkpoints hold the training input's position: a run resumed from a checkpoint written in the middle
of a run (what kill -9 leaves) ends with every variable equal to the uninterrupted run's (issue 36 item 7).

The resumed runs start from a copy of the uninterrupted run's periodic checkpoints 5 and 10, with a `checkpoint`
file naming it: exactly the model directory a run killed with SIGKILL right after that save leaves (a save
writes its files and then the state file; nothing else reaches the disk, and the embedding infeed thread had read
batches ahead of the step, which the checkpoint must not count). The resumed runs are the same command.
"""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.cli.test_runtime_errors import run_in_process
from tpu_estimator.app import commands, config_file

TRAIN = ["train", "--config=dlrm_tiny", "--set=train.steps=15", "--set=train.save_checkpoints_steps=5"]


def model_values(checkpoint):
    """Every value of the checkpoint but the input position (its bookkeeping depends on the infeed's timing)."""
    reader = tf.train.load_checkpoint(checkpoint)
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if not name.startswith("input_position/")
    }


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("uninterrupted") / "model"
    assert run_in_process(*TRAIN, f"--model_dir={model_dir}") == 0
    return model_dir


def killed_after_checkpoint(source, step, model_dir):
    """A model directory as a run killed right after saving checkpoint `step` leaves it."""
    os.makedirs(model_dir)
    for name in os.listdir(source):
        if name.startswith(f"model.ckpt-{step}.") or name == "config.yaml":
            shutil.copy(os.path.join(source, name), model_dir)
    with open(os.path.join(model_dir, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "model.ckpt-{step}"\nall_model_checkpoint_paths: "model.ckpt-{step}"\n')


@pytest.mark.parametrize("step", [5, 10])
def test_resuming_a_killed_run_equals_the_uninterrupted_run(uninterrupted, tmp_path, step, capsys):
    model_dir = tmp_path / "resumed"
    killed_after_checkpoint(uninterrupted, step, model_dir)
    capsys.readouterr()
    assert run_in_process(*TRAIN, f"--model_dir={model_dir}") == 0
    assert "read again from its beginning" not in capsys.readouterr().out
    expected = model_values(str(uninterrupted / "model.ckpt-15"))
    resumed = model_values(str(model_dir / "model.ckpt-15"))
    assert sorted(resumed) == sorted(expected) and len(expected) > 100
    different = [name for name in expected if not np.array_equal(expected[name], resumed[name])]
    assert different == []


def test_the_first_checkpoints_position_is_the_start_and_its_batches(uninterrupted):
    # Checkpoint 5: the snapshot taken at the first read is the base, and the model consumed 5 steps of 2
    # replicas' batches (PER_HOST_V2 on 2 shards) since: the resume from it reads and drops 10 batches.
    reader = tf.train.load_checkpoint(str(uninterrupted / "model.ckpt-5"))
    assert reader.get_tensor("input_position/0/skip") == 10
    assert "input_position/0/iterator" in reader.get_variable_to_shape_map()


def test_a_checkpoint_without_position_or_of_other_data_restarts_the_input_and_says_why(uninterrupted, tmp_path):
    config = config_file.load_config(str(uninterrupted / "config.yaml"))
    checkpoint = str(uninterrupted / "model.ckpt-15")
    assert commands._input_restart_reason(config, checkpoint) is None
    bigger = config_file.apply_overrides(config, ["train.batch_size=64"])
    assert commands._input_restart_reason(bigger, checkpoint) == (
        f"train.batch_size differs from the run that wrote {checkpoint} (see {uninterrupted / 'config.yaml'})"
    )
    other = config_file.apply_overrides(config, ["data.seed=2"])
    assert commands._input_restart_reason(other, checkpoint).startswith("data differs from the run that wrote")
    old = tmp_path / "old" / "model.ckpt-1"
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(old))
    assert commands._input_restart_reason(config, str(old)) == (
        f"{old} holds no input position (written by an older tpu-estimator)"
    )
