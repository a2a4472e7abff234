"""The CLI's one-line errors carry the cause TensorFlow reports below its `Graph execution error:` header (issue 36
item 7): a diverging model names the non-finite gradient, a corrupt TFRecord file keeps `corrupted record at N`."""

import re

import pytest

from tests.cli.test_runtime_errors import failed_training, run_in_process


def test_a_diverging_model_names_the_non_finite_values_and_what_to_do(tmp_path, capsys):
    message = failed_training(
        capsys, f"--model_dir={tmp_path / 'm'}", "--set=train.steps=10", "--set=optimizer.dense.name=sgd",
        "--set=optimizer.dense.learning_rate=1e30",
    )  # fmt: skip
    assert re.fullmatch(
        r"tpu-estimator train: error: training produced NaN or Inf values: Non-finite embedding gradient for table "
        r"'emb_cat_\d+' \(features 'cat_\d+'\) : Tensor had (NaN|Inf|Inf and NaN) values \(the model diverged: lower "
        r"the learning rates, optimizer.dense.learning_rate and optimizer.embedding.learning_rate; the latest "
        r"checkpoint holds finite values only\)",
        message,
    ), message


@pytest.fixture(scope="module")
def corrupt_tfrecord(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tfrecord")
    good = directory / "train.tfrecord"
    assert run_in_process("data", "--config=dlrm_tiny", "--rows=600", f"--output={good}") == 0
    data = bytearray(good.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of a record
    bad = directory / "bad.tfrecord"
    bad.write_bytes(bytes(data))
    return bad


def test_a_corrupt_tfrecord_keeps_the_offset_and_names_the_file(corrupt_tfrecord, tmp_path, capsys):
    message = failed_training(
        capsys, f"--model_dir={tmp_path / 'm'}", "--set=train.steps=30", "--set=data.source=tfrecord",
        f"--set=data.train_paths=[{corrupt_tfrecord}]",
        "--validate_rows=0",  # TensorFlow's reader's error (the sample checked before training would name it first)
    )  # fmt: skip
    assert re.fullmatch(
        rf"tpu-estimator train: error: data \({re.escape(str(corrupt_tfrecord))}\): not readable as data.source "
        r"tfrecord: corrupted record at \d+ \(a truncated file, or data.source/data.compression not matching the "
        r"files\)",
        message,
    ), message


def test_a_batch_too_large_for_one_tensor_is_refused_before_tensorflow_starts(tmp_path, capsys):
    assert failed_training(capsys, f"--model_dir={tmp_path / 'm'}", f"--set=train.batch_size={2**30}") == (
        "tpu-estimator train: error: train.batch_size: at most 8388608 rows, got 1073741824 (a batch's 26 categorical "
        "ids, 8 bytes each per row, must stay under TensorFlow's 2 GB limit of one tensor)"
    )
    assert not (tmp_path / "m").exists()
