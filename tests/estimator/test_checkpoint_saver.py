"""The chief's checkpoint saver writes `graph.pbtxt` natively (`estimator_core.checkpoint_saver`): the file holds
the graph (read back equal to the graph's `GraphDef`, and to what upstream's hook writes), the event file and the
initial checkpoint are upstream's, and `TPUEstimator` uses it exactly where the Estimator would add its default."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

import tpu_estimator as te
from tpu_estimator.estimator_core import checkpoint_saver


def _graph_with_awkward_values():
    """A graph whose text format has floats that print differently, bytes, and attrs in several orders."""
    graph = tf.Graph()
    with graph.as_default():
        # Not `create_global_step()`: its initialisation `cond` names functions uniquely per graph, and the test
        # compares two graphs.
        tf.compat.v1.get_variable(
            "global_step",
            [],
            tf.int64,
            tf.compat.v1.zeros_initializer(),
            trainable=False,
            collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.GLOBAL_STEP],
        )
        weights = tf.compat.v1.get_variable("w", [3], initializer=tf.constant_initializer([0.1, 1e-30, 3.4e38]))
        tf.constant(b"\xff\x00caf\xc3\xa9", name="bytes_const")
        tf.identity(weights * tf.constant(0.2, tf.float32), name="scaled")
    return graph


def _parse(path):
    graph_def = tf.compat.v1.GraphDef()
    with open(path) as f:
        text_format.Parse(f.read(), graph_def)
    return graph_def


def _run_session_start(graph, hook):
    with graph.as_default():
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]):
            pass


@pytest.mark.parametrize("native", [True, False])
def test_graph_text_reads_back_as_the_graph(tmp_path, monkeypatch, native):
    monkeypatch.setattr(checkpoint_saver, "_NATIVE_TEXT", native and checkpoint_saver._NATIVE_TEXT)
    graph_def = _graph_with_awkward_values().as_graph_def(add_shapes=True)
    path = checkpoint_saver.write_graph_text(graph_def, str(tmp_path / "sub"), "graph.pbtxt")
    assert path == str(tmp_path / "sub" / "graph.pbtxt")
    assert _parse(path) == graph_def
    assert os.listdir(tmp_path / "sub") == ["graph.pbtxt"]  # No temporary file left behind.
    if not native:
        assert open(path).read() == text_format.MessageToString(graph_def)


def test_session_start_writes_the_graph_events_and_the_initial_checkpoint(tmp_path):
    graph = _graph_with_awkward_values()
    directory = str(tmp_path)

    class Listener(tf.compat.v1.train.CheckpointSaverListener):
        saved = []

        def after_save(self, session, global_step_value):
            self.saved.append(global_step_value)

    with graph.as_default():
        hook = checkpoint_saver.CheckpointSaverHook(directory, save_steps=100, listeners=[Listener()])
    _run_session_start(graph, hook)
    assert Listener.saved == [0]  # The initial save (none at the end: no step since).
    graph_def = graph.as_graph_def(add_shapes=True)
    assert _parse(os.path.join(directory, "graph.pbtxt")) == graph_def
    # What upstream's writer (`tf.io.write_graph`, Python's text printer) writes of the same graph reads back equal.
    upstream_file = tf.io.write_graph(graph_def, str(tmp_path / "upstream"), "graph.pbtxt")
    assert _parse(upstream_file) == _parse(os.path.join(directory, "graph.pbtxt"))
    assert tf.train.latest_checkpoint(directory).endswith("model.ckpt-0")
    np.testing.assert_allclose(tf.train.load_variable(directory, "w"), np.float32([0.1, 1e-30, 3.4e38]))

    def graph_events(directory):
        events = []
        for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
            for event in tf.compat.v1.train.summary_iterator(path):
                if event.HasField("graph_def"):
                    events.append(("graph", tf.compat.v1.GraphDef.FromString(event.graph_def)))
                elif event.HasField("meta_graph_def"):
                    events.append(("meta_graph", tf.compat.v1.MetaGraphDef.FromString(event.meta_graph_def)))
        return events

    upstream_graph = _graph_with_awkward_values()
    with upstream_graph.as_default():
        upstream_hook = tf.compat.v1.train.CheckpointSaverHook(str(tmp_path / "upstream_hook"), save_steps=100)
    _run_session_start(upstream_graph, upstream_hook)
    events = graph_events(directory)
    assert [kind for kind, _ in events] == [kind for kind, _ in graph_events(str(tmp_path / "upstream_hook"))]
    assert events[-2] == ("graph", graph_def)  # Session start: the graph, then the meta graph.
    kind, meta = events[-1]
    assert kind == "meta_graph"
    assert meta.graph_def == graph_def
    assert meta.saver_def == hook._get_saver().saver_def
    assert "variables" in meta.collection_def  # The graph's collections, as upstream's session start writes them.


def test_plugin_assets_are_written_beside_the_graph(tmp_path):
    from tensorflow.python.summary import plugin_asset

    class Asset(plugin_asset.PluginAsset):
        plugin_name = "test_plugin"

        def assets(self):
            return {"a.txt": "content"}

    with tf.Graph().as_default():  # The cached writer of the directory exists already (a second train() call).
        tf.compat.v1.summary.FileWriterCache.get(str(tmp_path))
    graph = _graph_with_awkward_values()
    with graph.as_default():
        plugin_asset.get_plugin_asset(Asset)
        hook = checkpoint_saver.CheckpointSaverHook(str(tmp_path), save_steps=100)
    _run_session_start(graph, hook)
    with open(tmp_path / "plugins" / "test_plugin" / "a.txt") as f:
        assert f.read() == "content"


def test_save_graph_def_false_writes_no_graph_file(tmp_path):
    graph = _graph_with_awkward_values()
    with graph.as_default():
        hook = checkpoint_saver.CheckpointSaverHook(str(tmp_path), save_steps=100, save_graph_def=False)
    _run_session_start(graph, hook)
    assert not os.path.exists(tmp_path / "graph.pbtxt")
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-0")


def _input_fn(params):
    x = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(32, 1)
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, 2.0 * x[:, 0]))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def _model_fn(features, labels, mode, params):
    prediction = tf.squeeze(tf.compat.v1.layers.dense(features["x"], 1, kernel_initializer=tf.zeros_initializer()), 1)
    loss = tf.reduce_mean(tf.square(prediction - labels))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def _estimator(model_dir, **config):
    return te.TPUEstimator(
        model_fn=_model_fn,
        config=te.RunConfig(
            model_dir=str(model_dir), tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=2), **config
        ),
        use_tpu=True,
        train_batch_size=8,
    )


def test_tpu_estimator_trains_with_the_native_saver(tmp_path, monkeypatch):
    written = []
    real = checkpoint_saver.write_graph_text
    monkeypatch.setattr(checkpoint_saver, "write_graph_text", lambda *a: written.append(a[1:]) or real(*a))
    estimator = _estimator(tmp_path, save_checkpoints_steps=4)
    estimator.train(_input_fn, max_steps=4)
    estimator.train(_input_fn, max_steps=6)
    assert written == [(str(tmp_path), "graph.pbtxt")] * 2  # Each train() call's session start.
    graph_def = _parse(str(tmp_path / "graph.pbtxt"))
    assert any(node.name.startswith("training_loop") for node in graph_def.node)
    steps = sorted(int(p.split("-")[-1].split(".")[0]) for p in glob.glob(str(tmp_path / "model.ckpt-*.index")))
    assert steps == [0, 4, 6]
    # Plain gradient descent on y = 2x from w = 0: the checkpointed kernel is the NumPy model's after 6 steps.
    x = np.linspace(-1.0, 1.0, 32, dtype=np.float32)
    w = b = 0.0
    for step in range(6):
        batch = x[(step * 8) % 32 : (step * 8) % 32 + 8]
        error = w * batch + b - 2.0 * batch
        w, b = w - 0.1 * np.mean(2 * error * batch), b - 0.1 * np.mean(2 * error)
    np.testing.assert_allclose(tf.train.load_variable(str(tmp_path), "dense/kernel")[0, 0], w, rtol=1e-5)


def test_a_saver_hook_given_to_train_replaces_the_default(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(checkpoint_saver, "write_graph_text", lambda *a: written.append(a))
    own = tf.compat.v1.train.CheckpointSaverHook(str(tmp_path / "own"), save_steps=100, checkpoint_basename="own.ckpt")
    _estimator(tmp_path / "model", save_checkpoints_steps=4).train(_input_fn, max_steps=4, hooks=[own])
    assert written == []
    assert tf.train.latest_checkpoint(str(tmp_path / "own")).endswith("own.ckpt-4")
    assert not glob.glob(str(tmp_path / "model" / "model.ckpt-*"))


def test_no_checkpoint_cadence_means_no_saver(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(checkpoint_saver, "write_graph_text", lambda *a: written.append(a))
    _estimator(tmp_path, save_checkpoints_steps=None, save_checkpoints_secs=None).train(_input_fn, max_steps=4)
    assert written == []
    assert not glob.glob(str(tmp_path / "model.ckpt-*"))
