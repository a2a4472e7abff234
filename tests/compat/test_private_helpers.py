"""Private helpers of tensorflow_estimator's modules that public TPU programs call, in our legacy module paths.

`USED_BY` is the list: each helper (module, name) with the public programs that call it. The helper behaves as
upstream's (upstream's function is the oracle on the TF 2.15 leg; the values asserted are upstream's on both), and
the program that calls it runs through the launcher (tests/programs/efficientnet_tpu.py makes the calls of
tensorflow/tpu's EfficientNet `main.py`).
"""

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tpu_estimator import _estimator_lib, compat
from tpu_estimator.compat import legacy_modules
from tpu_estimator.estimator_core import checkpoint_step

# (module below `python.estimator`, private name): the public programs that call it.
USED_BY = {
    ("estimator", "_load_global_step_from_checkpoint_dir"): [
        # `from tensorflow.python.estimator import estimator`, then before its train_and_eval loop:
        # `current_step = estimator._load_global_step_from_checkpoint_dir(FLAGS.model_dir)`.
        "tensorflow/tpu models/official/efficientnet/main.py",
    ],
}

PROGRAM = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "programs", "efficientnet_tpu.py")
LAUNCHER = os.path.join(os.path.dirname(sys.executable), "tpu-estimator-run")
TIMEOUT_SECS = 240


def test_the_list_is_the_table_install_uses():
    provided = {(module, name) for module, names in legacy_modules.PRIVATE_HELPERS.items() for name in names}
    assert provided == set(USED_BY)
    assert all(USED_BY.values())


@pytest.mark.parametrize("package", ["tensorflow.python.estimator", "tensorflow_estimator.python.estimator"])
def test_each_helper_is_in_the_module_path_programs_import(package):
    compat.install()
    try:
        for module_suffix, name in USED_BY:
            module = importlib.import_module("{}.{}".format(package, module_suffix))
            helper = getattr(module, name)
            assert callable(helper)
            if _estimator_lib.CORE == "ours":
                assert helper is getattr(_estimator_lib, legacy_modules.PRIVATE_HELPERS[module_suffix][name])
    finally:
        compat.uninstall()


def _checkpoint(directory, global_step=None):
    """A checkpoint in `directory` with a variable `w` and, unless None, a global step of `global_step`."""
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("w", initializer=1.5)
        if global_step is not None:
            step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            if global_step is not None:
                session.run(step.assign(global_step))
            tf.compat.v1.train.Saver().save(session, os.path.join(directory, "model.ckpt"), global_step=7)
    return directory


def _cases(tmp_path):
    """(model_dir, upstream's value) for each case upstream's helper distinguishes."""
    return [
        (str(tmp_path / "missing"), 0),
        (_mkdir(tmp_path / "empty"), 0),
        (_checkpoint(_mkdir(tmp_path / "with_step"), global_step=42), 42),
        (_checkpoint(_mkdir(tmp_path / "no_step")), 0),
    ]


def _mkdir(path):
    os.makedirs(str(path))
    return str(path)


def test_load_global_step_from_checkpoint_dir_as_upstream(tmp_path):
    for model_dir, expected in _cases(tmp_path):
        value = checkpoint_step.load_global_step_from_checkpoint_dir(model_dir)
        assert value == expected, model_dir
        # Upstream returns the checkpoint reader's NumPy value, and the int 0 when it cannot read one.
        assert type(value) is (np.int64 if expected else int), (model_dir, type(value))
        if _estimator_lib.CORE == "upstream":
            from tensorflow_estimator.python.estimator import estimator as upstream

            oracle = upstream._load_global_step_from_checkpoint_dir(model_dir)
            assert value == oracle and type(value) is type(oracle), model_dir


def _run(work_dir, name, *args):
    command = [LAUNCHER, "--num_shards=2", PROGRAM, "--tpu=my-tpu", "--model_dir=" + os.path.join(work_dir, "model")]
    command += ["--results=" + os.path.join(work_dir, name + ".json")] + list(args)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TPU_ESTIMATOR_NUM_SHARDS", None)
    result = subprocess.run(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=work_dir,
        timeout=TIMEOUT_SECS,
    )
    assert result.returncode == 0, "{} failed ({}):\n{}".format(name, result.returncode, result.stdout[-6000:])
    with open(os.path.join(work_dir, name + ".json")) as f:
        return json.load(f), result.stdout


def test_efficientnet_main_resumes_from_the_helpers_step(tmp_path):
    """EfficientNet main.py's train_and_eval loop, unmodified calls, 2 shards: a first run from nothing, then a
    second that reads the first's step with `estimator._load_global_step_from_checkpoint_dir` and goes on."""
    work_dir = str(tmp_path)
    first, output = _run(work_dir, "first", "--train_steps=4", "--export_dir=" + os.path.join(work_dir, "export"))
    assert "Current step 0." in output
    assert first["start_step"] == 0 and first["start_step_type"] == "int"
    assert [e["global_step"] for e in first["evaluations"]] == [2.0, 4.0]
    assert all(np.isfinite(e["loss"]) and 0.0 <= e["top_1_accuracy"] <= 1.0 for e in first["evaluations"])
    assert os.path.exists(os.path.join(first["export_path"], "saved_model.pb"))

    second, output = _run(work_dir, "second", "--train_steps=6")
    assert "Current step 4." in output
    assert second["start_step"] == 4 and second["start_step_type"] == "int64"
    assert [e["global_step"] for e in second["evaluations"]] == [6.0]
