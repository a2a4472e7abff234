"""tpu_estimator._estimator_lib selects the core: upstream's where it imports, ours when forced or missing."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code, core=None):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TPU_ESTIMATOR_CORE", None)
    if core is not None:
        env["TPU_ESTIMATOR_CORE"] = core
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def _upstream_importable():
    try:
        import tensorflow_estimator.python.estimator.estimator  # noqa: F401
    except ImportError:
        return False
    return True


TPU_ESTIMATOR_ON_THE_ACTIVE_CORE = """
    import json, tempfile
    import numpy as np
    import tensorflow as tf
    import tpu_estimator as te
    from tpu_estimator import _estimator_lib, estimator, estimator_core, tpu_config

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [3, 1], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - labels))
        opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn(params):
        x = np.ones([64, 3], np.float32)
        return tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).repeat().batch(
            params["batch_size"], drop_remainder=True)

    config = te.RunConfig(model_dir=tempfile.mkdtemp(), tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=2))
    est = te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=8, eval_batch_size=8)
    est.train(input_fn, max_steps=6)
    metrics = est.evaluate(input_fn, steps=2)
    print(json.dumps({
        "core": _estimator_lib.CORE,
        "tpu_estimator_base_is_ours": issubclass(te.TPUEstimator, estimator_core.Estimator),
        "run_config_base_is_ours": issubclass(tpu_config.RunConfig, estimator_core.RunConfig),
        "namespace_is_active_core": estimator.Estimator is _estimator_lib.Estimator
            and estimator.export.ServingInputReceiver is _estimator_lib.export_lib.ServingInputReceiver,
        "global_step": int(est.get_variable_value("global_step")),
        "metrics": sorted(metrics),
        "eval_global_step": int(metrics["global_step"]),
    }))
"""


def _result(completed):
    assert completed.returncode == 0, completed.stderr[-4000:]
    import json

    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_forced_ours_runs_tpu_estimator_on_our_core():
    result = _result(_run(TPU_ESTIMATOR_ON_THE_ACTIVE_CORE, core="ours"))
    assert result == {
        "core": "ours",
        "tpu_estimator_base_is_ours": True,
        "run_config_base_is_ours": True,
        "namespace_is_active_core": True,
        "global_step": 6,
        "metrics": ["global_step", "loss"],
        "eval_global_step": 6,
    }


@pytest.mark.upstream
def test_default_is_upstream_where_it_imports():
    result = _result(_run(TPU_ESTIMATOR_ON_THE_ACTIVE_CORE))
    assert result["core"] == "upstream"
    assert not result["tpu_estimator_base_is_ours"] and not result["run_config_base_is_ours"]
    assert result["namespace_is_active_core"] and result["global_step"] == result["eval_global_step"] == 6


def test_default_without_upstream_is_ours_and_forcing_upstream_fails():
    if _upstream_importable():
        pytest.skip("tensorflow_estimator imports here: the default is upstream's (test_default_is_upstream...)")
    assert _result(_run(TPU_ESTIMATOR_ON_THE_ACTIVE_CORE))["core"] == "ours"
    completed = _run("import tpu_estimator.estimator", core="upstream")
    assert completed.returncode != 0
    assert "ImportError: TPU_ESTIMATOR_CORE=upstream, but upstream's tensorflow_estimator does not import" in (
        completed.stderr
    )


def test_invalid_core_name_is_a_clear_error():
    completed = _run("import tpu_estimator.estimator", core="mine")
    assert completed.returncode != 0
    assert "TPU_ESTIMATOR_CORE='mine' is not a valid Estimator core: use 'ours', 'upstream'" in completed.stderr
