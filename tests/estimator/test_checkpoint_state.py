"""A damaged `checkpoint` state file is never trusted blindly (issue 36 item 2): training refuses it naming the file
and the newest intact checkpoint (TensorFlow alone restarts from step 0 and overwrites the checkpoints), before
anything in the directory changes; the fix the message gives resumes bit-identically; interrupted saves' leftovers
are removed by the next trainer, nothing else."""

import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.estimator import guarded_trainer
from tpu_estimator.checkpoints.checkpoint_state import DamagedCheckpointStateError

TRAINED, TARGET = 4, 6


def snapshot(model_dir):
    """{relative path: bytes} of every file under `model_dir`."""
    files = {}
    for root, _, names in os.walk(model_dir):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, model_dir)] = f.read()
    return files


def values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(a model_dir trained to step TRAINED, the final values of an uninterrupted run to TARGET)."""
    model_dir = tmp_path_factory.mktemp("trained") / "model"
    guarded_trainer.make_estimator(model_dir).train(guarded_trainer.input_fn, max_steps=TRAINED)
    reference = tmp_path_factory.mktemp("reference") / "model"
    shutil.copytree(model_dir, reference)
    guarded_trainer.make_estimator(reference).train(guarded_trainer.input_fn, max_steps=TARGET)
    final = values(str(reference / f"model.ckpt-{TARGET}"))
    assert final["global_step"] == TARGET
    return model_dir, final


@pytest.fixture
def model_dir(trained, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(trained[0], copy)
    return copy


def train(model_dir):
    guarded_trainer.make_estimator(model_dir).train(guarded_trainer.input_fn, max_steps=TARGET)


def refused(model_dir):
    before = snapshot(model_dir)
    with pytest.raises(DamagedCheckpointStateError) as error:
        train(model_dir)
    assert snapshot(model_dir) == before  # nothing written, deleted or overwritten
    return str(error.value)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda text: text[:20], id="truncated_to_20_bytes"),
        pytest.param(lambda text: "", id="empty"),
        pytest.param(lambda text: None, id="missing"),
        pytest.param(lambda text: 'model_checkpoint_path: "model.ckpt-99"\n', id="names_missing_files"),
    ],
)
def test_a_damaged_state_file_is_an_error_naming_it_and_the_fix_resumes(model_dir, trained, damage):
    state = model_dir / "checkpoint"
    damaged = damage(state.read_text())
    if damaged is None:
        state.unlink()
    else:
        state.write_text(damaged)
    message = refused(model_dir)
    assert f"the checkpoint state file {state} cannot be trusted" in message
    assert "would start again from step 0" in message
    fix = f"write {state} with the one line 'model_checkpoint_path: \"model.ckpt-{TRAINED}\"'"
    assert fix in message, message
    # The fix the message gives: resume from the newest intact checkpoint, as an uninterrupted run ends.
    state.write_text(re.search(r"one line '([^']*)'", message).group(1) + "\n")
    train(model_dir)
    final = values(tf.train.latest_checkpoint(str(model_dir)))
    assert sorted(final) == sorted(trained[1])
    for name, value in trained[1].items():
        np.testing.assert_array_equal(final[name], value, err_msg=name)


def test_a_state_file_older_than_an_intact_checkpoint_is_refused_for_training_only(model_dir):
    state = model_dir / "checkpoint"
    state.write_text('model_checkpoint_path: "model.ckpt-2"\n')
    message = refused(model_dir)
    assert f"it names model.ckpt-2 but model.ckpt-{TRAINED} is newer" in message
    assert "would overwrite the newer one" in message
    # Readers restore what the file names.
    estimator = guarded_trainer.make_estimator(model_dir)
    assert estimator.evaluate(guarded_trainer.input_fn, steps=1)["global_step"] == 2


def test_a_damaged_newer_checkpoint_is_not_counted_as_intact(model_dir):
    """An index that does not read (an interrupted save) is not a checkpoint to protect."""
    (model_dir / "model.ckpt-9.index").write_bytes(b"partial")
    train(model_dir)
    assert values(tf.train.latest_checkpoint(str(model_dir)))["global_step"] == TARGET


def test_evaluate_and_predict_refuse_a_damaged_state_file(model_dir):
    """Upstream would evaluate and predict with freshly initialised weights."""
    state = model_dir / "checkpoint"
    state.write_text(state.read_text()[:20])
    estimator = guarded_trainer.make_estimator(model_dir)
    with pytest.raises(DamagedCheckpointStateError, match="cannot be trusted: it does not parse"):
        estimator.evaluate(guarded_trainer.input_fn, steps=1)
    with pytest.raises(DamagedCheckpointStateError, match=re.escape(str(state))):
        next(estimator.predict(lambda params: guarded_trainer.input_fn(params).take(1)))


def test_interrupted_saves_leftovers_are_removed_by_the_next_trainer_nothing_else(model_dir):
    # What the Saver of both TensorFlow versions leaves when killed mid-save: the sharded save's `<prefix>_temp`
    # directory (saver.py) and an atomic write's `<name>.tmp<uuid hex>` file.
    leftovers = ["model.ckpt-5_temp/part-00000-of-00001.data-00000-of-00001", "checkpoint.tmp" + "ab" * 16]
    kept = ["model.ckpt-5_temp_notes/x", "mydata_temp/part-00000", "checkpoint.tmp_mine", "notes.txt"]
    for name in leftovers + kept:
        (model_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (model_dir / name).write_text("x")
    train(model_dir)
    assert not (model_dir / "model.ckpt-5_temp").exists()
    assert not (model_dir / leftovers[1]).exists()
    for name in kept:
        assert (model_dir / name).read_text() == "x", name
    assert values(tf.train.latest_checkpoint(str(model_dir)))["global_step"] == TARGET
