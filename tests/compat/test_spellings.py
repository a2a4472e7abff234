"""Every spelling by which legacy programs reach TPUEstimator, run through the launcher and compared by value.

Each program of tests/programs/spellings/ looks the API up one way (`tf.estimator.tpu`, `tf.compat.v1.estimator`,
`import tensorflow.compat.v1 as tf`, `tf.contrib.*`, `tensorflow.contrib.tpu.python.tpu.*`, `tensorflow_estimator`
and its modules, `tensorflow.python.estimator.*`, `tensorflow.python.tpu.*`) and trains the same linear regression
with it. One launcher process runs them all (`run_all.py`, one after the other, each as `__main__`) to keep the test fast. Each result
must be our classes, and the values of a NumPy model of the run: full-batch gradient descent (every step reads the
8 rows: 4 per shard on 2 shards), the evaluation loss of the first shard's rows (upstream's TPU evaluation reports
replica 0's loss), the metric over all rows, and the training losses a host_call wrote through the contrib summary API.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPELLINGS_DIR = os.path.join(REPO, "tests", "programs", "spellings")
SPELLINGS = (
    "tf_estimator_tpu",
    "compat_v1_estimator",
    "compat_v1_as_tf",
    "contrib_attributes",
    "contrib_modules",
    "contrib_deep_paths",
    "tensorflow_estimator_top",
    "tensorflow_estimator_modules",
    "tensorflow_python_estimator",
    "tensorflow_python_tpu",
)
# Programs whose host_call writes the training loss with the TF1 contrib summary API.
WITH_SUMMARIES = ("contrib_attributes", "contrib_modules", "contrib_deep_paths")
TIMEOUT_SECS = 300


def _numpy_run():
    """What the programs compute, from the formula: 3 steps of gradient descent on the mean squared error."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0], [-1.0, 0.5], [0.5, 2.0], [-2.0, -1.0], [1.5, 0.5]])
    y = x @ np.array([2.0, -1.0]) + 0.5
    w, b, losses = np.zeros(2), 0.0, []
    for _ in range(3):
        error = x @ w + b - y
        losses.append(np.mean(error**2))
        w, b = w - 0.1 * 2 * x.T @ error / len(x), b - 0.1 * 2 * error.mean()
    error = x @ w + b - y
    return {
        "weights": w,
        "bias": b,
        "train_losses": losses,
        "eval_loss": np.mean(error[:4] ** 2),
        "eval_mse": np.mean(error**2),
        "predictions": x @ w + b,
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """name -> the program's results (or its error text); the launcher's output."""
    work_dir = str(tmp_path_factory.mktemp("spellings"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    for name in ("TPU_ESTIMATOR_NUM_SHARDS", "TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS"):
        env.pop(name, None)
    command = [sys.executable, "-m", "tpu_estimator.compat.launcher", os.path.join(SPELLINGS_DIR, "run_all.py")]
    process = subprocess.run(
        command + [work_dir, *SPELLINGS],
        cwd=work_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=TIMEOUT_SECS,
        text=True,
    )
    assert process.returncode == 0, process.stdout[-6000:]
    out = {"launcher output": process.stdout}
    for name in SPELLINGS:
        error = os.path.join(work_dir, name + ".error")
        if os.path.exists(error):
            with open(error) as f:
                out[name] = f.read()
            continue
        with open(os.path.join(work_dir, name + ".json")) as f:
            out[name] = json.load(f)
    return out


@pytest.mark.parametrize("name", SPELLINGS)
def test_spelling_reaches_our_classes_and_trains_as_numpy_does(results, name):
    out = results[name]
    assert isinstance(out, dict), "{} failed:\n{}".format(name, out)
    assert out["estimator_class"] == "tpu_estimator.tpu_estimator.TPUEstimator"
    assert out["classes"] == {
        "TPUEstimator": "tpu_estimator.tpu_estimator.TPUEstimator",
        "RunConfig": "tpu_estimator.tpu_config.RunConfig",
        "TPUConfig": "tpu_estimator.tpu_config.TPUConfig",
        "TPUClusterResolver": "tpu_estimator.compat.cluster_resolver.TPUClusterResolver",
    }
    # The program's own Estimator and RunConfig classes (where it names them) agree with ours: one class per name.
    assert all(out["checks"].values()), out["checks"]
    expected = _numpy_run()
    assert out["global_step"] == 3
    np.testing.assert_allclose(out["weights"], expected["weights"], rtol=1e-5)
    np.testing.assert_allclose(out["bias"], expected["bias"], rtol=1e-5)
    np.testing.assert_allclose(out["eval_loss"], expected["eval_loss"], rtol=1e-5)
    np.testing.assert_allclose(out["eval_mse"], expected["eval_mse"], rtol=1e-5)
    np.testing.assert_allclose(out["predictions"], expected["predictions"], rtol=1e-5, atol=1e-6)
    if name in WITH_SUMMARIES:
        assert out["train_loss_steps"] == [0, 1, 2]
        np.testing.assert_allclose(out["train_losses"], expected["train_losses"], rtol=1e-5)
    else:
        assert "train_losses" not in out


def test_the_launcher_prints_its_lines_and_no_tensorflow_log(results):
    # No C++ start-up lines, no "failed call to cuInit", no Python warnings from TensorFlow or the Estimator.
    assert results["launcher output"].splitlines() == [
        "tpu-estimator-run: running on the shards of the program's TPUConfig(num_shards=...), else 1 (CPU); "
        "--num_shards=N sets them; no TPU: everything runs on this machine",
        # Once: every program's TPUEstimator runs on the same shards.
        "tpu-estimator-run: TPUEstimator runs on 2 shards (the program's TPUConfig(num_shards=2)), 1 host, "
        "logical CPU devices",
    ]


def test_every_spelling_program_is_in_the_corpus():
    programs = {f[: -len(".py")] for f in os.listdir(SPELLINGS_DIR) if f.endswith(".py")}
    assert programs - {"legacy_model", "run_all"} == set(SPELLINGS)
