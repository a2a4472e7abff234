"""Unmodified TPUEstimator programs (tests/programs/) run through the launcher with use_tpu=True.

The programs never import tpu_estimator; the launcher installs the compat layer. All subprocesses start
together (module fixture) to keep the wall time down; each test then checks one program's outputs.
"""

import collections
import glob
import json
import math
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import launcher

PROGRAMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "programs")
LAUNCHER = os.path.join(os.path.dirname(sys.executable), "tpu-estimator-run")
TIMEOUT_SECS = 240


def _program(name):
    return os.path.join(PROGRAMS, name)


def _runs(root):
    """name -> (command, extra env) of every program run; the work dirs live under `root`."""

    paths = {"model_dir": "model", "export_dir": "export", "results": "results.json"}

    def command(name, launcher, program, *flags, outputs=("model_dir", "results")):
        """`launcher program flags`, then `--output=<root>/<name>/<file>` for each of `outputs`."""
        return (
            launcher + [_program(program), *flags] + [f"--{o}=" + os.path.join(root, name, paths[o]) for o in outputs]
        )

    return {
        # `python -m tpu_estimator.compat.launcher` form.
        "mnist": (
            command(
                "mnist",
                [sys.executable, "-m", "tpu_estimator.compat.launcher"],
                "mnist_tpu.py",
                "--tpu=grpc://10.0.0.2:8470",
            ),
            {},
        ),
        # Console-script form from here on.
        "resnet": (
            command(
                "resnet", [LAUNCHER], "resnet_tpu.py", "--tpu=my-tpu", outputs=("model_dir", "export_dir", "results")
            ),
            {},
        ),
        "recommender": (command("recommender", [LAUNCHER], "recommender_tpu.py", "--tpu=my-tpu"), {}),
        # Model parallelism needs a TPU: one clear error, through the launcher.
        "model_parallel": (
            command("model_parallel", [LAUNCHER], "resnet_tpu.py", "--num_cores_per_replica=2", outputs=("model_dir",)),
            {},
        ),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Starts every program at once; returns name -> (returncode, stdout+stderr text, work dir)."""
    root = str(tmp_path_factory.mktemp("programs"))
    runs = {}
    for name, (command, extra_env) in _runs(root).items():
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra_env)
        env.pop("TPU_ESTIMATOR_NUM_SHARDS", None)
        runs[name] = (command, env, os.path.join(root, name))
    done = launcher.run_together(runs, TIMEOUT_SECS)
    return {name: (returncode, output, os.path.join(root, name)) for name, (returncode, output) in done.items()}


def _succeeded(results, name):
    returncode, output, work_dir = results[name]
    assert returncode == 0, "{} failed ({}):\n{}".format(name, returncode, output[-6000:])
    with open(os.path.join(work_dir, "results.json")) as f:
        return json.load(f), work_dir


def _assert_finite_metrics(metrics, expected):
    assert set(expected) <= set(metrics), metrics
    for key, value in metrics.items():
        assert math.isfinite(value), (key, value)


def _event_steps(model_dir):
    """tag -> sorted steps of the events directly in model_dir (training summaries)."""
    steps = collections.defaultdict(list)
    for path in glob.glob(os.path.join(model_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                steps[value.tag].append(event.step)
    return {tag: sorted(s) for tag, s in steps.items()}


def test_mnist_classifier(results):
    out, _ = _succeeded(results, "mnist")
    assert out["estimator_class"] == "tpu_estimator.tpu_estimator.TPUEstimator"
    _assert_finite_metrics(out["metrics"], {"accuracy", "loss", "global_step"})
    assert out["metrics"]["global_step"] == 6
    assert 0.0 <= out["metrics"]["accuracy"] <= 1.0
    # take(10).batch(4) on 2 shards: batches of 4, 4 and a partial 2; exactly one prediction per row.
    assert out["num_predictions"] == 10
    assert all(0 <= c < 10 for c in out["class_ids"])


def test_recommender_with_tpu_embeddings(results):
    out, work_dir = _succeeded(results, "recommender")
    _assert_finite_metrics(out["metrics"], {"recall_at_5", "precision_at_1", "loss", "global_step"})
    assert out["metrics"]["global_step"] == 6
    assert 0.0 <= out["metrics"]["recall_at_5"] <= 1.0
    assert out["num_predictions"] == 10
    assert all(len(items) == 5 and len(set(items)) == 5 for items in out["top_items"])
    # The tables (one shared by query_item and history) are trained by the embedding optimizer (Adagrad slots).
    variables = set(out["variables"])
    assert {
        "dense_features/user_embedding/embedding_weights",
        "dense_features/user_embedding/embedding_weights/Adagrad",
    } <= variables
    assert any("shared_embedding" in v and v.endswith("/Adagrad") for v in variables), variables
    # host_call every 2nd step of each 3-step loop: loop-relative steps 0 and 2 -> global 0, 2, 3, 5.
    events = _event_steps(os.path.join(work_dir, "model"))
    assert events["host_loss"] == [0, 2, 3, 5], events
    assert events["host_global_step"] == [0, 2, 3, 5], events


def test_image_model_ema_host_call_and_export(results):
    out, work_dir = _succeeded(results, "resnet")
    _assert_finite_metrics(out["metrics"], {"top_1_accuracy", "top_5_accuracy", "loss", "global_step"})
    assert out["metrics"]["global_step"] == 4
    assert out["num_predictions"] == 10
    model_dir = os.path.join(work_dir, "model")
    events = _event_steps(model_dir)
    for tag in ("loss", "learning_rate", "current_epoch"):
        assert events.get(tag) == [0, 1, 2, 3], (tag, events)

    export_path = out["export_path"]
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    tag_sets = sorted(sorted(mg.meta_info_def.tags) for mg in saved_model.meta_graphs)
    assert tag_sets == [["serve"], ["serve", "tpu"]]
    for meta_graph in saved_model.meta_graphs:
        assert set(meta_graph.signature_def) == {"serving_default", "classify"}

    # scaffold_fn restored the moving averages: the export holds the checkpoint's EMA values.
    checkpoint = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    exported = tf.train.load_checkpoint(os.path.join(export_path, "variables", "variables"))
    ema_name = "dense/kernel/ExponentialMovingAverage"
    np.testing.assert_array_equal(exported.get_tensor(ema_name), checkpoint.get_tensor(ema_name))
    assert not np.allclose(checkpoint.get_tensor(ema_name), checkpoint.get_tensor("dense/kernel"))

    # Served predictions (both metagraphs) equal the program's TPUEstimator.predict().
    images = np.load(os.path.join(work_dir, "predict_inputs.npy"))
    for tags in (["serve"], ["serve", "tpu"]):
        with tf.compat.v1.Session(graph=tf.Graph()) as session:
            meta_graph = tf.compat.v1.saved_model.loader.load(session, tags, export_path)
            signature = meta_graph.signature_def["serving_default"]
            served = session.run(
                {k: v.name for k, v in signature.outputs.items()}, {signature.inputs["image"].name: images}
            )
        np.testing.assert_allclose(served["probabilities"], np.array(out["probabilities"]), rtol=1e-5, atol=1e-6)
        assert served["classes"].tolist() == out["classes"]


def test_model_parallelism_gives_one_clear_error(results):
    returncode, output, _ = results["model_parallel"]
    assert returncode == 1, output[-4000:]
    lines = output.strip().splitlines()
    assert "Traceback" not in output
    # Where the program called into us, then the error: what to change.
    assert lines[-2].startswith("tpu-estimator-run: configuration error") and "resnet_tpu.py:" in lines[-2]
    assert lines[-1].startswith("UnsupportedOffTPUError: TPUConfig.num_cores_per_replica=2 asks for model parallelism")
    assert "set num_cores_per_replica=None" in lines[-1]
