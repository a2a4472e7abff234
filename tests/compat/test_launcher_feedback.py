"""What the launcher tells the user: the shards each TPUEstimator runs on and why; a data error in two lines, and
as the first line of the error TPUEstimator raises."""

import textwrap

import pytest
import tensorflow as tf

from tests.helpers.launcher import run_launcher
from tpu_estimator import compat
from tpu_estimator.compat import launcher as run_lib
from tpu_estimator.inputs import data_errors as errors

# What TensorFlow 2.15 and 2.21 report for a failed `tf.debugging.Assert` of our id check (quotes escaped).
TF_ASSERT_MESSAGE = (
    "Graph execution error:\n\nDetected at node 'x/Assert' defined at (most recent call last):\n  File \"p.py\"...\n"
    "assertion failed: [Feature \\'user\\' (table \\'tbl_user\\'): ids must be in [0, 500) (vocabulary_size); "
    "smallest and largest id:] [1] [777]\n\t [[{{node embedding_preprocess/cond/Assert/Assert}}]]\n"
)

BAD_IDS_PROGRAM = """
import numpy as np
import tensorflow.compat.v1 as tf

def model_fn(features, labels, mode, params):
    net = tf.keras.layers.DenseFeatures(COLUMNS)(features)
    loss = tf.reduce_mean(tf.square(tf.reduce_sum(net, axis=1, keepdims=True) - labels))
    optimizer = tf.tpu.CrossShardOptimizer(tf.train.GradientDescentOptimizer(0.1))
    train_op = optimizer.minimize(loss, tf.train.get_global_step())
    return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

def input_fn(params):
    ids = np.array([[1], [2], [777], [3]] * 2, np.int64)
    dataset = tf.data.Dataset.from_tensor_slices(({"user": ids}, np.ones([8, 1], np.float32)))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)

COLUMNS = [tf.tpu.experimental.embedding_column(
    tf.feature_column.categorical_column_with_identity("user", 500), dimension=2)]
spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
    feature_columns=COLUMNS, optimization_parameters=tf.tpu.experimental.AdagradParameters(0.1))
config = tf.estimator.tpu.RunConfig(
    model_dir=MODEL_DIR, tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=1, num_shards=2))
estimator = tf.estimator.tpu.TPUEstimator(
    model_fn=model_fn, config=config, use_tpu=True, train_batch_size=8, embedding_config_spec=spec)
estimator.train(input_fn, max_steps=1)
"""


class _FakeOpError(Exception):
    """Stands in for a `tf.errors.OpError` (which `data_error` recognises by its `node_def`)."""

    node_def = None

    def __init__(self, message):
        super().__init__(message)
        self.message = message


def test_data_error_reads_the_failed_check_out_of_tensorflows_message():
    assert errors.data_error(_FakeOpError(TF_ASSERT_MESSAGE)) == (
        "Feature 'user' (table 'tbl_user'): ids must be in [0, 500) (vocabulary_size); smallest and largest id: 1, 777"
    )
    assert errors.data_error(_FakeOpError("assertion failed: [Feature 'a': weights must be ok.]\n")) == (
        "Feature 'a': weights must be ok."
    )
    # Not a TensorFlow error, or not a failed check: None (the caller reports it as before).
    assert errors.data_error(ValueError(TF_ASSERT_MESSAGE)) is None
    assert errors.data_error(_FakeOpError("Key w not found in checkpoint")) is None


@pytest.fixture
def launcher_state(monkeypatch):
    monkeypatch.setattr("sys.argv", list(__import__("sys").argv))
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    for name in ("TPU_ESTIMATOR_NUM_SHARDS", "TPU_ESTIMATOR_TRACEBACK"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(run_lib, "_announced", set())
    yield
    compat.uninstall()


def test_out_of_range_id_is_two_lines_naming_feature_table_and_id(tmp_path, launcher_state, capsys):
    script = tmp_path / "bad_ids.py"
    script.write_text(f"MODEL_DIR = {str(tmp_path / 'model')!r}\n" + textwrap.dedent(BAD_IDS_PROGRAM))
    assert run_lib.main([str(script)]) == 1
    captured = capsys.readouterr()
    # Before the program: the launcher's line, then the TPUEstimator's shards and where the number comes from.
    assert captured.out.splitlines()[1] == (
        "tpu-estimator-run: TPUEstimator runs on 2 shards (the program's TPUConfig(num_shards=2)), 1 host, "
        "logical CPU devices"
    )
    assert "Traceback" not in captured.err
    assert captured.err.strip().splitlines()[-2:] == [
        "tpu-estimator-run: the program's data failed a check (--traceback shows the full traceback):",
        "InvalidArgumentError: Feature 'user' (table 'tbl_user'): ids must be in [0, 500) (vocabulary_size); "
        "smallest and largest id: 1, 777",
    ]
    # --traceback: the whole traceback first, then the same two lines.
    assert run_lib.main(["--traceback", "--num_shards=2", str(script)]) == 1
    captured = capsys.readouterr()
    assert "Traceback (most recent call last)" in captured.err
    assert captured.err.strip().splitlines()[-1].startswith("InvalidArgumentError: Feature 'user' (table 'tbl_user')")
    assert "TPUEstimator runs on 2 shards (--num_shards / TPU_ESTIMATOR_NUM_SHARDS)" in captured.out


@pytest.mark.timeout(300)
def test_the_launchers_whole_output_for_an_out_of_range_id_is_at_most_5_lines(tmp_path):
    # As a user runs it: a process with TensorFlow's default log settings; every line it prints is counted.
    script = tmp_path / "bad_ids.py"
    script.write_text(f"MODEL_DIR = {str(tmp_path / 'model')!r}\n" + textwrap.dedent(BAD_IDS_PROGRAM))
    proc = run_launcher(script, timeout=280)
    assert proc.returncode == 1
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) <= 5, lines
    assert lines[-1] == (
        "InvalidArgumentError: Feature 'user' (table 'tbl_user'): ids must be in [0, 500) (vocabulary_size); "
        "smallest and largest id: 1, 777"
    )


def test_a_failed_data_check_reaches_the_caller_with_its_message_first(tmp_path):
    compat.install()
    try:
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            exec(f"MODEL_DIR = {str(tmp_path / 'model')!r}\n" + textwrap.dedent(BAD_IDS_PROGRAM), {})
    finally:
        compat.uninstall()
    lines = str(raised.value).splitlines()
    assert lines[0] == (
        "Feature 'user' (table 'tbl_user'): ids must be in [0, 500) (vocabulary_size); smallest and largest id: 1, 777"
    )
    assert any(line.startswith("assertion failed: [Feature") for line in lines[1:])  # TensorFlow's text follows
