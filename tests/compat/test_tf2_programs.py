"""TF2 TPU programs (TPUStrategy, `tf.tpu.experimental.embedding`) run unmodified through the launcher.

Each program (examples/tf2/) saves a checkpoint before and after training; the final tables, slots and dense
weights, and the per-step losses, must equal a NumPy reference of one step on the global batch (the TPU embedding
optimizer's formula for the tables, Keras' for the dense layers), starting from the first checkpoint. The programs
start together (module fixture) to keep the wall time down.
"""

import functools
import importlib.util
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import launcher
from tests.oracles import optimizers as optimizer_oracle

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples", "tf2")
PROGRAMS = os.path.join(REPO, "tests", "programs")
TIMEOUT_SECS = 240
DIM = 4
GLOBAL_BATCH = 16
STEPS = 6


def _example_data():
    """examples/tf2/common.py: the programs' data (loaded by path: the programs import it as a sibling script)."""
    spec = importlib.util.spec_from_file_location("examples_tf2_common", os.path.join(EXAMPLES, "common.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example_data = _example_data()
DATA = {  # the test's own rows (other seeds and sizes than the programs' random data)
    "mid_level": functools.partial(example_data.mid_level_data, num_rows=64, seed=7),
    "v2": functools.partial(example_data.v2_loop_data, num_rows=64, seed=8),
    "tfrs": functools.partial(example_data.tfrs_data, num_rows=64, seed=9),
}


def _runs():
    """name -> (program, launcher options, data set)."""
    return {
        "mid_level_2": ("tpu_embedding_mid_level.py", ["--num_shards=2"], "mid_level"),
        "v2_2": ("tpu_embedding_v2_loop.py", ["--num_shards=2"], "v2"),
        # 2 hosts x 2 shards (tpu-estimator-hosts): host 0's program drives both hosts' shards.
        "mid_level_hosts": ("tpu_embedding_mid_level.py", ["--num_shards=2"], "mid_level"),
        "v2_hosts": ("tpu_embedding_v2_loop.py", ["--num_shards=2"], "v2"),
        "tfrs_2": ("tfrs_keras_fit.py", ["--num_shards=2"], "tfrs"),
        "tfrs_hosts": ("tfrs_keras_fit.py", ["--num_shards=2"], "tfrs"),
        "spatial_split": (os.path.join(PROGRAMS, "tf2_model_parallel.py"), ["--num_shards=2"], None),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (returncode, output, work dir, data); every program started at once."""
    root = str(tmp_path_factory.mktemp("tf2_programs"))
    data = {name: make() for name, make in DATA.items()}
    for name, arrays in data.items():
        np.savez(os.path.join(root, name + ".npz"), **arrays)
    env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "TPU_ESTIMATOR_NUM_SHARDS")}
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    commands = {}
    for name, (program, options, data_name) in _runs().items():
        work_dir = os.path.join(root, name)
        command = [sys.executable, "-m", "tpu_estimator.compat.launcher", *options, os.path.join(EXAMPLES, program)]
        if name.endswith("_hosts"):
            command[:0] = [sys.executable, "-m", "tpu_estimator.app.hosts", "--num_hosts=2", "--grace_secs=20", "--"]
        if data_name is None:  # The error programs.
            command[-1:] = [program] + (["--split"] if name == "spatial_split" else [])
        else:
            command += [
                "--tpu=my-tpu",
                "--data=" + os.path.join(root, data_name + ".npz"),
                "--model_dir=" + os.path.join(work_dir, "model"),
                "--results=" + os.path.join(work_dir, "results.json"),
                "--steps=%d" % STEPS,
                "--global_batch_size=%d" % GLOBAL_BATCH,
            ]
        commands[name] = (command, env, work_dir)
    done = launcher.run_together(commands, TIMEOUT_SECS)
    return {
        name: (returncode, output, os.path.join(root, name), data.get(_runs()[name][2]))
        for name, (returncode, output) in done.items()
    }


def _succeeded(runs, name):
    returncode, output, work_dir, data = runs[name]
    assert returncode == 0, "{} failed ({}):\n{}".format(name, returncode, output[-6000:])
    with open(os.path.join(work_dir, "results.json")) as f:
        return json.load(f), work_dir, data, output


def _checkpoint(work_dir, number):
    reader = tf.train.load_checkpoint(os.path.join(work_dir, "model", "ckpt-%d" % number))
    return {
        key.replace("/.ATTRIBUTES/VARIABLE_VALUE", ""): reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if key.endswith("VARIABLE_VALUE")
    }


# ----------------------------------------------------------------------------------------------- NumPy reference
def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _dense_gradients(x, h, activation_slope, z, y, w0, w1):
    """Gradients of the summed sigmoid cross-entropy / GLOBAL_BATCH of `z = act(x @ w0 + b0) @ w1 + b1`, `h` the
    hidden activations and `activation_slope` act' at them: ((w0, b0, w1, b1)'s, x's)."""
    dz = (_sigmoid(z) - y)[:, None] / GLOBAL_BATCH
    dh = (dz @ w1.T) * activation_slope
    return (x.T @ dh, dh.sum(0), h.T @ dz, dz.sum(0)), dh @ w0.T


def _mid_level_reference(data, initial, steps, table_lr=0.1, dense_lr=0.1):
    """The seed program's training on the global batch: Adagrad tables (TPU rule), Keras SGD dense layers.

    Returns:
      (final state by checkpoint name, per-step losses, evaluation loss on the first global batch).
    """
    f64 = {k: np.asarray(v, np.float64) for k, v in initial.items()}
    tables = {
        name: optimizer_oracle.init_state("adagrad", f64["embedding/" + name], initial_accumulator_value=0.1)
        for name in ("videos", "users")
    }
    dense = {k: f64["model/layer_with_weights-%d/%s" % (i, p)] for i in (0, 1) for p, k in [("kernel", "w%d" % i)]}
    dense.update({"b%d" % i: f64["model/layer_with_weights-%d/bias" % i] for i in (0, 1)})
    num_rows = len(data["clicked"])

    def forward(rows):
        watched, liked, user = data["watched"][rows], data["liked"][rows], data["user"][rows]
        videos, users = tables["videos"]["params"], tables["users"]["params"]
        counts = (liked >= 0).sum(1)
        liked_sum = np.stack([videos[r[r >= 0]].sum(0) if (r >= 0).any() else np.zeros(DIM) for r in liked])
        x = np.concatenate([videos[watched], liked_sum / np.maximum(counts, 1)[:, None], users[user]], 1)
        pre = x @ dense["w0"] + dense["b0"]
        h = np.maximum(pre, 0)
        z = (h @ dense["w1"] + dense["b1"])[:, 0]
        y = data["clicked"][rows].astype(np.float64)
        loss = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
        return x, pre, h, z, y, loss.sum() / GLOBAL_BATCH, (watched, liked, user, counts)

    losses = []
    for s in range(steps):
        rows = np.arange(s * GLOBAL_BATCH, (s + 1) * GLOBAL_BATCH) % num_rows
        x, pre, h, z, y, loss, (watched, liked, user, counts) = forward(rows)
        losses.append(loss)
        dense_grads, dx = _dense_gradients(x, h, pre > 0, z, y, dense["w0"], dense["w1"])
        grads = dict(zip(("w0", "b0", "w1", "b1"), dense_grads))
        g_videos = np.zeros_like(tables["videos"]["params"])
        g_users = np.zeros_like(tables["users"]["params"])
        np.add.at(g_videos, watched, dx[:, :DIM])
        for i, r in enumerate(liked):
            for video in r[r >= 0]:
                g_videos[video] += dx[i, DIM : 2 * DIM] / counts[i]
        np.add.at(g_users, user, dx[:, 2 * DIM :])
        for name, g in (("videos", g_videos), ("users", g_users)):
            tables[name] = optimizer_oracle.step("adagrad", tables[name], g, lr=table_lr)
        for k in dense:
            dense[k] = dense[k] - dense_lr * grads[k]
    eval_loss = forward(np.arange(GLOBAL_BATCH))[5]
    final = {}
    for name, state in tables.items():
        final["embedding/" + name] = state["params"]
        final["embedding/%s.Saccumulators" % name] = state["accumulators"]
    for i in (0, 1):
        final["model/layer_with_weights-%d/kernel" % i] = dense["w%d" % i]
        final["model/layer_with_weights-%d/bias" % i] = dense["b%d" % i]
    return final, np.array(losses), eval_loss


def _v2_reference(data, initial, steps, table_lr=0.1, l2=0.01, dense_lr=0.01):
    """The TPUEmbeddingV2 loop on the global batch: TPU FTRL tables (rows of the step), Keras Adam dense layers."""
    f64 = {k: np.asarray(v, np.float64) for k, v in initial.items()}
    tables = {}
    for name in ("words", "items"):
        tables[name] = optimizer_oracle.init_state("ftrl", f64["embedding/" + name], initial_accumulator_value=0.1)
    dense = {"w%d" % i: f64["model/layer_with_weights-%d/kernel" % i] for i in (0, 1)}
    dense.update({"b%d" % i: f64["model/layer_with_weights-%d/bias" % i] for i in (0, 1)})
    moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in dense.items()}
    starts = np.concatenate([[0], np.cumsum(data["query_lengths"])])
    num_rows = len(data["clicked"])
    losses = []
    for s in range(steps):
        rows = np.arange(s * GLOBAL_BATCH, (s + 1) * GLOBAL_BATCH) % num_rows
        queries = [data["query_values"][starts[r] : starts[r + 1]] for r in rows]
        items = data["item"][rows]
        words_table, items_table = tables["words"]["params"], tables["items"]["params"]
        q = np.stack([words_table[ids].sum(0) for ids in queries])
        x = np.concatenate([q, items_table[items]], 1)
        h = np.tanh(x @ dense["w0"] + dense["b0"])
        z = (h @ dense["w1"] + dense["b1"])[:, 0]
        y = data["clicked"][rows].astype(np.float64)
        losses.append((np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))).sum() / GLOBAL_BATCH)
        dense_grads, dx = _dense_gradients(x, h, 1 - h**2, z, y, dense["w0"], dense["w1"])
        grads = dict(zip(("w0", "b0", "w1", "b1"), dense_grads))
        word_ids = np.concatenate(queries)
        word_grads = np.concatenate([np.repeat(dx[i : i + 1, :DIM], len(ids), 0) for i, ids in enumerate(queries)])
        for name, ids, table_grads in (("words", word_ids, word_grads), ("items", items, dx[:, DIM:])):
            tables[name] = optimizer_oracle.lazy_table_step("ftrl", tables[name], ids, table_grads, table_lr, l2=l2)
        t = s + 1
        alpha = dense_lr * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        for k, g in grads.items():
            m, v = moments[k]
            m = m + (g - m) * (1 - 0.9)
            v = v + (g**2 - v) * (1 - 0.999)
            moments[k] = (m, v)
            dense[k] = dense[k] - alpha * m / (np.sqrt(v) + 1e-7)
    final = {}
    for name, state in tables.items():
        final["embedding/" + name] = state["params"]
        final["embedding/%s.Saccumulators" % name] = state["accumulators"]
        final["embedding/%s.Slinears" % name] = state["linears"]
    for i in (0, 1):
        final["model/layer_with_weights-%d/kernel" % i] = dense["w%d" % i]
        final["model/layer_with_weights-%d/bias" % i] = dense["b%d" % i]
    return final, np.array(losses)


def _tfrs_reference(data, initial, steps, table_lr=0.2, dense_lr=0.1):
    """Keras fit with the TFRS layer on the global batch: TPU SGD tables, Keras SGD dense layers.

    Returns:
      (final state by checkpoint name, per-step losses, loss of the first batch before and after training).
    """
    f64 = {k: np.asarray(v, np.float64) for k, v in initial.items()}
    prefix = "model/embedding/_tpu_embedding/"
    tables = {name: f64[prefix + name] for name in ("users", "items")}
    dense = {k: f64["model/" + k] for k in ("hidden/kernel", "hidden/bias", "logit/kernel", "logit/bias")}
    num_rows = len(data["clicked"])

    def forward(rows):
        x = np.concatenate([tables["users"][data["user"][rows]], tables["items"][data["item"][rows]]], 1)
        pre = x @ dense["hidden/kernel"] + dense["hidden/bias"]
        h = np.maximum(pre, 0)
        z = (h @ dense["logit/kernel"] + dense["logit/bias"])[:, 0]
        y = data["clicked"][rows].astype(np.float64)
        loss = (np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))).mean()
        return x, pre, h, z, y, loss

    baseline = forward(np.arange(GLOBAL_BATCH))[5]
    losses = []
    for s in range(steps):
        rows = np.arange(s * GLOBAL_BATCH, (s + 1) * GLOBAL_BATCH) % num_rows
        x, pre, h, z, y, loss = forward(rows)
        losses.append(loss)
        dense_grads, dx = _dense_gradients(x, h, pre > 0, z, y, dense["hidden/kernel"], dense["logit/kernel"])
        grads = dict(zip(("hidden/kernel", "hidden/bias", "logit/kernel", "logit/bias"), dense_grads))
        for name, ids, g in (("users", data["user"][rows], dx[:, :DIM]), ("items", data["item"][rows], dx[:, DIM:])):
            np.subtract.at(tables[name], ids, table_lr * g)
        for k in dense:
            dense[k] = dense[k] - dense_lr * grads[k]
    final = {prefix + name: value for name, value in tables.items()}
    final.update({"model/" + k: v for k, v in dense.items()})
    return final, np.array(losses), baseline, forward(np.arange(GLOBAL_BATCH))[5]


# ------------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("name", ["mid_level_2", "mid_level_hosts"])
def test_mid_level_program_trains_to_the_reference_on_two_shards_and_two_hosts(runs, name):
    results, work_dir, data, output = _succeeded(runs, name)
    assert "running on 2 shards on logical CPU devices" in output
    if name == "mid_level_hosts":
        assert "[host 1] tpu-estimator-run: host 1 serves its 2 shards to the program on host 0" in output
        assert results["num_replicas"] == 4
        assert results["worker_devices"] == [
            "/job:worker/replica:0/task:%d/device:CPU:%d" % (host, i) for host in (0, 1) for i in (0, 1)
        ]
    else:
        assert results["num_replicas"] == 2
        assert [d.rsplit("/", 1)[1] for d in results["worker_devices"]] == ["device:CPU:0", "device:CPU:1"]
    assert results["checkpoints"] == ["ckpt-0", "ckpt-%d" % STEPS]
    initial, final = _checkpoint(work_dir, 0), _checkpoint(work_dir, STEPS)
    expected, losses, eval_loss = _mid_level_reference(data, initial, STEPS)
    for name, value in expected.items():
        np.testing.assert_allclose(final[name], value, atol=1e-5, rtol=0, err_msg=name)
    # Training moved every variable the reference checks.
    for name in expected:
        assert not np.allclose(final[name], initial[name]), name
    np.testing.assert_allclose(results["losses"], losses, atol=1e-5, rtol=0)
    np.testing.assert_allclose(results["eval_loss"], eval_loss, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name, replicas", [("v2_2", 2), ("v2_hosts", 4)])
def test_v2_loop_trains_to_the_reference_on_two_shards_and_two_hosts(runs, name, replicas):
    results, work_dir, data, output = _succeeded(runs, name)
    assert results["num_replicas"] == replicas
    initial, final = _checkpoint(work_dir, 0), _checkpoint(work_dir, STEPS)
    expected, losses = _v2_reference(data, initial, STEPS)
    for name, value in expected.items():
        np.testing.assert_allclose(final[name], value, atol=1e-5, rtol=0, err_msg=name)
        assert not np.allclose(final[name], initial[name]), name
    np.testing.assert_allclose(results["losses"], losses, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["tfrs_2", "tfrs_hosts"])
def test_keras_fit_with_the_tfrs_layer_trains_to_the_reference(runs, name):
    results, work_dir, data, output = _succeeded(runs, name)
    initial, final = _checkpoint(work_dir, 0), _checkpoint(work_dir, 1)
    expected, losses, baseline, eval_loss = _tfrs_reference(data, initial, STEPS)
    for key, value in expected.items():
        np.testing.assert_allclose(final[key], value, atol=1e-5, rtol=0, err_msg=key)
        assert not np.allclose(final[key], initial[key]), key
    # fit's loss is the mean of the steps' losses over the epoch; evaluate sees the first batch.
    np.testing.assert_allclose(results["loss"], [losses.mean()], atol=1e-5, rtol=0)
    np.testing.assert_allclose(results["baseline_loss"], baseline, atol=1e-5, rtol=0)
    np.testing.assert_allclose(results["eval_loss"], eval_loss, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "name, error",
    [
        (
            "spatial_split",
            "UnsupportedOffTPUError: TPUStrategy.experimental_split_to_logical_devices(tensor, [1, 2, 1, 1]) splits "
            "a tensor over the logical devices of a replica (model parallelism), which needs a TPU",
        ),
    ],
)
def test_tpu_only_calls_end_in_one_line_through_the_launcher(runs, name, error):
    returncode, output, _, _ = runs[name]
    assert returncode == 1, output[-4000:]
    assert "Traceback" not in output and "AssertionError" not in output, output[-4000:]
    lines = output.strip().splitlines()
    assert lines[-2].startswith("tpu-estimator-run: configuration error raised by tpu_estimator, called from ")
    assert "tf2_model_parallel.py:" in lines[-2], lines[-2]
    assert lines[-1].startswith(error), lines[-1]
