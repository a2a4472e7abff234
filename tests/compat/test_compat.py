"""Compat layer: install()/uninstall(), the local TPUClusterResolver, bfloat16_scope, shard/replicate, launcher."""

import os
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import embedding
import tpu_estimator as te
from tpu_estimator import _estimator_lib, compat
from tpu_estimator import estimator as tf_estimator
from tpu_estimator.compat import cluster_resolver as cluster_resolver_lib
from tpu_estimator.compat import launcher as run_lib
from tpu_estimator.compat import namespaces

UPSTREAM_BFLOAT16_SCOPE = tf.compat.v1.tpu.bfloat16_scope


def _session(num_devices=2):
    return tf.compat.v1.Session(config=tf.compat.v1.ConfigProto(device_count={"CPU": num_devices}))


_MISSING = "<missing>"


def _lookup(path):
    """The object at `path` below `tensorflow`, or _MISSING (TF 2.16+ has no `tf.estimator` before install())."""
    obj = tf
    for part in path.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            break
    return obj


def _snapshot():
    """The objects behind every name install() touches, plus the module lists it changes."""
    names = {
        "compat.v1.estimator.tpu": namespaces.ESTIMATOR_NAMES,
        "compat.v1.estimator.tpu.experimental": ["EmbeddingConfigSpec"],
        "compat.v1.tpu": list(namespaces.tpu_names()),
        "compat.v1.tpu.experimental": namespaces.EMBEDDING_PARAMETER_NAMES,
        "distribute.cluster_resolver": ["TPUClusterResolver"],
        "compat.v1.distribute.cluster_resolver": ["TPUClusterResolver"],
        "compat.v2.distribute.cluster_resolver": ["TPUClusterResolver"],
    }
    snapshot = {}
    for path, members in names.items():
        for name in members:
            snapshot[path + "." + name] = _lookup(path + "." + name)
    v1 = tf.compat.v1
    snapshot["tf.contrib"] = hasattr(tf, "contrib")
    snapshot["v1.contrib"] = hasattr(v1, "contrib")
    snapshot["estimator.tpu"] = _lookup("estimator.tpu") is not _MISSING
    if _estimator_lib.CORE == "upstream":
        import tensorflow_estimator

        snapshot["tensorflow_estimator.estimator.train_and_evaluate"] = (
            tensorflow_estimator.estimator.train_and_evaluate
        )
    for path in ("estimator", "compat.v1.estimator", "compat.v2.estimator"):
        snapshot[path + ".train_and_evaluate"] = _lookup(path + ".train_and_evaluate")
    snapshot["v1.__all__"] = list(v1.__all__)
    snapshot["contrib modules"] = sorted(m for m in sys.modules if m.startswith("tensorflow.contrib"))
    return snapshot


def test_install_replaces_names_and_uninstall_restores_them_exactly():
    before = _snapshot()
    assert before["compat.v1.estimator.tpu.TPUEstimator"] is not te.TPUEstimator
    compat.install()
    try:
        compat.install()  # Idempotent.
        assert compat.is_installed()
        v1 = tf.compat.v1
        for name in namespaces.ESTIMATOR_NAMES:
            assert getattr(v1.estimator.tpu, name) is getattr(te, name)
            assert getattr(tf.estimator.tpu, name) is getattr(te, name)
        from tpu_estimator import experimental

        assert v1.estimator.tpu.experimental.EmbeddingConfigSpec is experimental.EmbeddingConfigSpec
        assert v1.tpu.CrossShardOptimizer is te.CrossShardOptimizer
        assert v1.tpu.cross_replica_sum is te.cross_replica_sum
        assert v1.tpu.outside_compilation is te.outside_compilation
        assert v1.tpu.rewrite is te.rewrite
        for name in ("shard", "replicate", "batch_parallel", "initialize_system", "shutdown_system", "bfloat16_scope"):
            assert getattr(v1.tpu, name) is getattr(compat, name)
        for name in namespaces.EMBEDDING_PARAMETER_NAMES:
            assert getattr(v1.tpu.experimental, name) is getattr(embedding, name)
        ours = cluster_resolver_lib.TPUClusterResolver
        assert tf.distribute.cluster_resolver.TPUClusterResolver is ours
        assert v1.distribute.cluster_resolver.TPUClusterResolver is ours
        assert tf.compat.v2.distribute.cluster_resolver.TPUClusterResolver is ours
        # TF1 contrib, as attributes and as importable modules.
        assert tf.contrib.tpu.TPUEstimator is te.TPUEstimator
        assert v1.contrib.cluster_resolver.TPUClusterResolver is ours
        from tensorflow.contrib import summary as contrib_summary
        from tensorflow.contrib import tpu as contrib_tpu
        from tensorflow.contrib.cluster_resolver import TPUClusterResolver

        assert contrib_tpu.CrossShardOptimizer is te.CrossShardOptimizer and TPUClusterResolver is ours
        assert contrib_tpu.experimental.AdagradParameters is embedding.AdagradParameters
        assert callable(contrib_summary.scalar) and callable(contrib_summary.all_summary_ops)
        with pytest.raises(AttributeError, match="keras_to_tpu_model is not provided by tpu_estimator.compat"):
            contrib_tpu.keras_to_tpu_model
        # train_and_evaluate runs our loop on every host of a TPUEstimator with one process per host, the core's
        # otherwise: every spelling of it is the one of tpu_estimator.estimator.
        for root in (tf, v1, tf.compat.v2):
            assert root.estimator.train_and_evaluate is tf_estimator.train_and_evaluate
        if _estimator_lib.CORE == "upstream":
            import tensorflow_estimator

            assert tensorflow_estimator.estimator.train_and_evaluate is tf_estimator.train_and_evaluate
        # Names TensorFlow keeps: the feature columns our EmbeddingConfigSpec reads.
        assert v1.tpu.experimental.embedding_column.__module__.startswith("tensorflow.")
    finally:
        compat.uninstall()
    compat.uninstall()  # A second call does nothing.
    assert not compat.is_installed()
    after = _snapshot()
    assert after.keys() == before.keys()
    for key, value in before.items():
        if isinstance(value, list):
            assert after[key] == value, key
        else:
            assert after[key] is value, key
    with pytest.raises(ImportError):
        import tensorflow.contrib  # noqa: F401


def test_local_cluster_resolver(monkeypatch):
    monkeypatch.delenv("TPU_ESTIMATOR_NUM_SHARDS", raising=False)
    # As under tpu-estimator-run: a program's grpc:// TPU address is recorded, and the run stays in this process.
    monkeypatch.setenv("TPU_ESTIMATOR_TPU_ADDRESSES", "ignore")
    resolver = cluster_resolver_lib.TPUClusterResolver(tpu="grpc://10.1.2.3:8470", zone="us-central1-b", project="p")
    assert isinstance(resolver, tf.distribute.cluster_resolver.ClusterResolver)
    assert resolver.master() == resolver.get_master() == ""
    assert resolver.master("worker", 0, "grpc") == ""
    assert resolver.cluster_spec().as_dict() == {}
    assert resolver.get_job_name() == resolver.task_type == "worker" and resolver.task_id == 0
    assert resolver.environment == "" and resolver.tpu == "grpc://10.1.2.3:8470"
    assert resolver.num_accelerators() == {"TPU": 1}
    monkeypatch.setenv("TPU_ESTIMATOR_NUM_SHARDS", "4")
    assert resolver.num_accelerators() == {"TPU": 4}
    metadata = resolver.get_tpu_system_metadata()
    assert (metadata.num_cores, metadata.num_hosts, metadata.num_of_cores_per_host) == (4, 1, 4)
    assert cluster_resolver_lib.TPUClusterResolver().tpu == "local"
    assert cluster_resolver_lib.TPUClusterResolver([b"my-tpu"]).tpu == "my-tpu"
    assert cluster_resolver_lib.TPUClusterResolver.connect("x").master() == ""
    with resolver as entered:
        assert entered is resolver
    # RunConfig(cluster=...) as programs build it: an in-process master, no cluster_def.
    config = te.RunConfig(cluster=resolver, model_dir="/tmp/unused")
    assert config.master == "" and config.evaluation_master == "" and config.cluster is resolver
    assert not config.session_config.HasField("cluster_def")


def _dense_under(scope_fn, x):
    with tf.Graph().as_default() as graph:
        with scope_fn():
            y = tf.compat.v1.layers.dense(
                tf.cast(tf.constant(x), tf.bfloat16),
                3,
                kernel_initializer=tf.compat.v1.constant_initializer(0.25),
                bias_initializer=tf.compat.v1.constant_initializer(0.5),
            )
            raw = tf.compat.v1.get_variable("raw", shape=[2], dtype=tf.bfloat16)
        variables = {v.op.name: v.dtype.base_dtype for v in tf.compat.v1.global_variables()}
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            value = session.run(tf.cast(y, tf.float32))
    return variables, y.dtype, raw.dtype, value


def test_bfloat16_scope_matches_upstream():
    x = np.linspace(-1, 1, 8).reshape(2, 4).astype(np.float32)
    ours = _dense_under(compat.bfloat16_scope, x)
    theirs = _dense_under(UPSTREAM_BFLOAT16_SCOPE, x)
    # Variables stored as float32, read (and computed) as bfloat16, as upstream does.
    assert ours[0] == theirs[0] == {"dense/kernel": tf.float32, "dense/bias": tf.float32, "raw": tf.float32}
    assert ours[1] == theirs[1] == tf.bfloat16 and ours[2] == theirs[2] == tf.bfloat16
    np.testing.assert_array_equal(ours[3], theirs[3])
    # bfloat16 keeps 8 bits of mantissa: the product (about -0.57) rounds by up to 2^-9, and adding the bias 0.5
    # cancels most of it, so the error bound is absolute (CPUs with and without bfloat16 matmul units round
    # differently; -0.0703 for -0.0714 was seen).
    np.testing.assert_allclose(ours[3], x @ np.full((4, 3), 0.25) + 0.5, rtol=1e-2, atol=4e-3)
    with tf.Graph().as_default():
        with compat.bfloat16_scope("model") as scope:
            assert scope.name == "model"
            assert tf.compat.v1.get_variable("f", shape=[1]).dtype.base_dtype == tf.float32


def test_replicate_with_cross_replica_sum_and_training():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    with tf.Graph().as_default():
        summed = compat.replicate(lambda a: te.cross_replica_sum(a) * 2.0, [[x[:2]], [x[2:]]])
        nested = compat.replicate(lambda a: {"y": a + 1.0}, [[1.0], [2.0]])
        weights = tf.compat.v1.get_variable("w", initializer=tf.ones([2]))

        def step(a):
            loss = tf.reduce_sum(weights * a)
            optimizer = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
            return loss, optimizer.minimize(loss)

        trained = compat.replicate(step, [[x[:2]], [x[2:]]])
        assert [s[0].device for s in summed] == ["/device:CPU:0", "/device:CPU:1"]
        with _session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for value in session.run(summed):  # A single output comes back as a one-element list per replica.
                np.testing.assert_array_equal(value[0], 2 * (x[:2] + x[2:]))
            assert session.run(nested) == [{"y": 2.0}, {"y": 3.0}]
            losses = session.run(trained)
            # One update with the mean gradient (MEAN reduction), although both replicas' outputs ran.
            np.testing.assert_allclose(session.run(weights), 1.0 - x.sum(axis=0) / 2)
            np.testing.assert_allclose([l[0] for l in losses], [x[:2].sum(), x[2:].sum()])


def test_shard_splits_and_joins():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    with tf.Graph().as_default():
        rows, sums, first = compat.shard(
            lambda a: [a * 2.0, tf.reduce_sum(a), a[:1]],
            [tf.constant(x)],
            num_shards=2,
            outputs_from_all_shards=[True, True, False],
        )
        columns = compat.shard(
            lambda a: a + 1.0, [tf.constant(x.T)], num_shards=2, input_shard_axes=[1], output_shard_axes=[1]
        )
        parallel = compat.batch_parallel(lambda a: a - 1.0, [tf.constant(x)], num_shards=4)
        only_ops = compat.shard(tf.no_op, num_shards=2)
        with _session(4) as session:
            got = session.run([rows, sums, first, columns[0], parallel[0]])
            session.run(only_ops)
    np.testing.assert_array_equal(got[0], 2 * x)
    np.testing.assert_array_equal(got[1], [x[:2].sum(), x[2:].sum()])  # Scalars are stacked.
    np.testing.assert_array_equal(got[2], x[:1])
    np.testing.assert_array_equal(got[3], x.T + 1)
    np.testing.assert_array_equal(got[4], x - 1)
    assert len(only_ops) == 1 and isinstance(only_ops[0], tf.Operation)


def test_tpu_only_arguments_and_bad_inputs_are_rejected():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="maximum_shapes"):
            compat.replicate(tf.identity, [[1.0]], maximum_shapes=[tf.TensorShape([None])])
        with pytest.raises(ValueError, match="device_assignment=...\\) needs a TPU topology"):
            compat.replicate(tf.identity, [[1.0]], device_assignment=object())
        with pytest.raises(ValueError, match="infeed_queue"):
            compat.shard(tf.identity, [tf.ones([2])], num_shards=2, infeed_queue=object())
        with pytest.raises(ValueError, match="same number of inputs"):
            compat.replicate(lambda *a: a[0], [[1.0], [1.0, 2.0]])
        with pytest.raises(ValueError, match="num_shards must be a positive integer"):
            compat.shard(tf.identity, [tf.ones([2])], num_shards=0)
        with pytest.raises(ValueError, match="Length of input_shard_axes"):
            compat.shard(tf.identity, [tf.ones([2])], num_shards=2, input_shard_axes=[0, 1])


def test_initialize_and_shutdown_system_are_no_ops():
    with tf.Graph().as_default():
        init = compat.initialize_system()
        shutdown = compat.shutdown_system()
        with tf.compat.v1.Session() as session:
            assert session.run(init) == b""
            assert session.run(shutdown) is None


# ---- launcher -----------------------------------------------------------------------------------------------


@pytest.fixture
def launcher_state(monkeypatch):
    """Restores what the launcher changes in-process: argv, sys.path, the env override, the compat layer."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("TPU_ESTIMATOR_NUM_SHARDS", "TPU_ESTIMATOR_TRACEBACK"):
        monkeypatch.setenv(name, "")  # Records the variable's state, so what the launcher sets is undone.
        monkeypatch.delenv(name)
    yield
    compat.uninstall()


@pytest.mark.quick
def test_launcher_runs_script_as_main(tmp_path, launcher_state, capsys):
    script = tmp_path / "prog.py"
    script.write_text(
        textwrap.dedent("""
      import os, sys
      import tensorflow.compat.v1 as tf
      if __name__ == '__main__':
        print('argv', sys.argv[1:], 'path0', sys.path[0])
        print('estimator', tf.estimator.tpu.TPUEstimator.__module__)
        print('shards', os.environ.get('TPU_ESTIMATOR_NUM_SHARDS'))
        sys.exit(3 if '--fail' in sys.argv else 0)
  """)
    )
    with pytest.raises(SystemExit) as exit_info:
        run_lib.main(["--num_shards=3", str(script), "--flag=1", "pos"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "argv ['--flag=1', 'pos'] path0 {}".format(tmp_path) in out
    assert "estimator tpu_estimator.tpu_estimator" in out and "shards 3" in out
    with pytest.raises(SystemExit) as exit_info:
        run_lib.main([str(script), "--fail"])
    assert exit_info.value.code == 3


@pytest.mark.quick
def test_launcher_reports_our_configuration_errors_in_one_message(tmp_path, launcher_state, capsys):
    script = tmp_path / "bad_config.py"
    script.write_text(
        textwrap.dedent("""
      import tensorflow.compat.v1 as tf

      def main():
        tf.estimator.tpu.TPUConfig(iterations_per_loop='often')

      main()
  """)
    )
    assert run_lib.main([str(script)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert err[0].startswith(
        "tpu-estimator-run: configuration error raised by tpu_estimator, called from {}:5 in main".format(script)
    )
    assert err[1].startswith("ValueError: Invalid TPUConfig `iterations_per_loop` value.")
    # Errors that are not ours keep their traceback.
    script.write_text('raise ValueError("user bug")\n')
    with pytest.raises(ValueError, match="user bug"):
        run_lib.main([str(script)])


def test_launcher_usage(launcher_state, capsys):
    assert run_lib.main(["--help"]) == 0
    assert "TPU_ESTIMATOR_NUM_SHARDS" in capsys.readouterr().out
    assert run_lib.main([]) == 2
    assert run_lib.main(["--num_shards=0", "x.py"]) == 2
    assert run_lib.main(["--bogus", "x.py"]) == 2
    assert run_lib.main([os.path.join("no", "such", "program.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_bert_style_scaffold_fn_initialises_from_a_checkpoint(tmp_path, installed):
    """BERT's pattern through the compat names: `init_from_checkpoint` inside `scaffold_fn` when on TPU."""
    v1 = tf.compat.v1
    values = {"bert/w": np.full((3, 2), 0.5, np.float32), "bert/b": np.array([0.1, -0.1], np.float32)}
    init_checkpoint = str(tmp_path / "pretrained" / "model.ckpt")
    with tf.Graph().as_default():
        variables = [tf.Variable(value, name=name) for name, value in values.items()]
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            v1.train.Saver(variables).save(session, init_checkpoint)

    def model_fn(features, labels, mode, params):
        with v1.variable_scope("bert"):
            w = v1.get_variable("w", [3, 2])
            b = v1.get_variable("b", [2])
        loss = tf.reduce_mean(tf.square(tf.matmul(features, w) + b - labels))
        assignment_map = {"bert/w": "bert/w", "bert/b": "bert/b"}
        scaffold_fn = None
        if params["use_tpu"]:

            def tpu_scaffold():
                v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
                return v1.train.Scaffold()

            scaffold_fn = tpu_scaffold
        else:
            v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
        optimizer = v1.tpu.CrossShardOptimizer(v1.train.GradientDescentOptimizer(0.0))
        train_op = optimizer.minimize(loss, global_step=v1.train.get_global_step())
        return v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, scaffold_fn=scaffold_fn)

    def input_fn(params):
        x = np.ones((16, 3), np.float32)
        return tf.data.Dataset.from_tensor_slices((x, x[:, :2])).repeat().batch(params["batch_size"], True)

    config = v1.estimator.tpu.RunConfig(
        model_dir=str(tmp_path / "model"), tpu_config=v1.estimator.tpu.TPUConfig(2, num_shards=2)
    )
    estimator = v1.estimator.tpu.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=8)
    assert isinstance(estimator, te.TPUEstimator)
    estimator.train(input_fn, max_steps=2)
    for name, value in values.items():
        np.testing.assert_array_equal(estimator.get_variable_value(name), value)


def test_tpu_addresses_env_must_be_cluster_or_ignore(monkeypatch):
    monkeypatch.setenv("TPU_ESTIMATOR_TPU_ADDRESSES", "local")
    with pytest.raises(ValueError, match="TPU_ESTIMATOR_TPU_ADDRESSES='local': expected 'cluster' or 'ignore'"):
        cluster_resolver_lib.TPUClusterResolver(tpu="grpc://10.1.2.3:8470")


LEGACY_MODULE_NAMES = {
    # module path: {name: what it must be while installed}
    "tensorflow.contrib.tpu.python.tpu.tpu_estimator": {"TPUEstimator": te.TPUEstimator},
    "tensorflow.contrib.tpu.python.tpu.tpu_config": {"RunConfig": te.RunConfig, "TPUConfig": te.TPUConfig},
    "tensorflow.contrib.tpu.python.tpu.tpu_optimizer": {"CrossShardOptimizer": te.CrossShardOptimizer},
    "tensorflow.contrib.cluster_resolver.python.training.tpu_cluster_resolver": {
        "TPUClusterResolver": cluster_resolver_lib.TPUClusterResolver
    },
    "tensorflow_estimator.python.estimator.tpu.tpu_estimator": {"TPUEstimatorSpec": te.TPUEstimatorSpec},
    "tensorflow_estimator.python.estimator.tpu.tpu_config": {"InputPipelineConfig": te.InputPipelineConfig},
    "tensorflow.python.tpu.tpu_estimator": {"TPUEstimator": te.TPUEstimator},
}


def _import(name):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def test_legacy_module_paths_while_installed_and_after():
    before = {name: {k: getattr(_import(name), k, None) for k in names} for name, names in LEGACY_MODULE_NAMES.items()}
    compat.install()
    try:
        for name, names in LEGACY_MODULE_NAMES.items():
            module = _import(name)
            for key, expected in names.items():
                assert getattr(module, key) is expected, (name, key)
        # Without a dotted import too: each module is an attribute of its parent.
        import tensorflow_estimator

        assert tensorflow_estimator.estimator.tpu.TPUEstimator is te.TPUEstimator
        from tensorflow_estimator.python.estimator import estimator as estimator_module
        from tensorflow_estimator.python.estimator import mode_keys

        from tpu_estimator import estimator as estimator_lib

        assert estimator_module.Estimator is estimator_lib.Estimator and mode_keys.ModeKeys is estimator_lib.ModeKeys
    finally:
        compat.uninstall()
    after = {name: {k: getattr(_import(name), k, None) for k in names} for name, names in LEGACY_MODULE_NAMES.items()}
    for name, names in before.items():
        for key, value in names.items():
            assert after[name][key] is value, (name, key)
