"""TRAIN, EVAL and PREDICT read from the `TPUEstimator` call to `Session.run` go down the stack: no product module
calls back into a module it was called from (issue 33), in any thread. Traced on the TPU-embedding example (embedding
columns, an Adam `CrossShardOptimizer`, 2 shards on one host), with a profiler over every Python call of every thread
(`call_tracer.py`); with one process per host in tests/cluster/test_reads_down_on_hosts.py."""

import importlib.util
import os
import threading

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator.call_tracer import REPO, trace_calls
from tpu_estimator import experimental as tex

# The modules that own each mode's stages: the trace must visit them (the check is not vacuous).
STAGES = {
    "train": (
        "tpu_estimator.py",
        "modes/train_loop.py",
        "modes/step_feed.py",
        "inputs/input_pipeline.py",
        "embedding_stage/embedding_infeed.py",
        "embedding_stage/embedding_bridge.py",
        "embedding_stage/embedding_update.py",
        "modes/shared_stages.py",
        "replicas/stamping.py",
        "replicas/replication.py",
        "specs/spec.py",
    ),
    "evaluate": (
        "modes/eval_loop.py",
        "modes/step_feed.py",
        "inputs/input_pipeline.py",
        "embedding_stage/embedding_bridge.py",
        "modes/shared_stages.py",
        "replicas/stamping.py",
    ),
    "predict": (
        "modes/predict_step.py",
        "modes/step_feed.py",
        "inputs/input_pipeline.py",
        "embedding_stage/embedding_infeed.py",
        "embedding_stage/embedding_bridge.py",
        "modes/shared_stages.py",
        "replicas/stamping.py",
    ),
}


def _example():
    spec = importlib.util.spec_from_file_location(
        "feature_columns_example", os.path.join(REPO, "examples", "feature_columns.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _modules_a_and_b():
    """Two product-like modules: `b.walk(fn)` calls `fn`, `b.leaf()` nothing; `a.main` is given as `a_code`."""
    namespace = {}
    exec(
        compile(
            "def walk(fn):\n    return fn()\n\ndef leaf():\n    return 1\n",
            os.path.join(REPO, "tpu_estimator", "_b.py"),
            "exec",
        ),
        namespace,
    )
    return namespace["walk"], namespace["leaf"]


def _module_a(code_a: str, **names):
    namespace_a = dict(names)
    exec(compile(code_a, os.path.join(REPO, "tpu_estimator", "_a.py"), "exec"), namespace_a)
    return namespace_a["main"]


def test_the_tracer_finds_a_callback_into_a_module_on_the_stack():
    # `a` calls `b.leaf` (down) and `b.walk(visit)`, and `b` calls `a.visit` back.
    walk, leaf = _modules_a_and_b()
    main = _module_a(
        "def visit():\n    return 2\n\ndef main():\n    return leaf() + walk(visit)\n", walk=walk, leaf=leaf
    )
    trace = trace_calls(main)
    assert trace.callbacks == {("tpu_estimator/_b.py", "tpu_estimator/_a.py", "visit")}
    assert {"tpu_estimator/_a.py", "tpu_estimator/_b.py"} <= trace.visited


def test_the_tracer_finds_a_callback_in_a_thread_the_module_started():
    # `a` starts a thread running `b.walk(visit)`: the thread's stack continues with `a`'s, so `b` calling
    # `a.visit` back in the thread is a callback; `b.leaf` in a thread of `a` is not.
    walk, leaf = _modules_a_and_b()
    code_a = (
        "def visit():\n    return 2\n\n"
        "def main():\n"
        "    threads = [threading.Thread(target=walk, args=(visit,)), threading.Thread(target=leaf)]\n"
        "    for thread in threads:\n        thread.start()\n"
        "    for thread in threads:\n        thread.join()\n"
    )
    trace = trace_calls(_module_a(code_a, walk=walk, leaf=leaf, threading=threading))
    assert trace.callbacks == {("tpu_estimator/_b.py", "tpu_estimator/_a.py", "visit")}
    assert len(trace.threads) == 3  # the main thread and both started ones


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """The example's train(), evaluate() and predict(), each traced: `{call: CallTrace}` and the model_dir."""
    example = _example()
    model_dir = str(tmp_path_factory.mktemp("reads_down"))
    estimator = te.TPUEstimator(
        model_fn=example.model_fn,
        config=te.RunConfig(model_dir=model_dir, tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=2)),
        train_batch_size=64,
        eval_batch_size=64,
        predict_batch_size=8,
        embedding_config_spec=tex.EmbeddingConfigSpec(
            feature_columns=example.EMBEDDING_COLUMNS, optimization_parameters=tex.AdagradParameters(learning_rate=0.5)
        ),
    )
    rows, _ = example.make_data(10, seed=4)
    results = {}
    calls = {
        "train": lambda: estimator.train(example.train_input_fn, max_steps=2),
        "evaluate": lambda: results.update(metrics=estimator.evaluate(example.eval_input_fn, steps=2)),
        "predict": lambda: results.update(
            predictions=list(
                estimator.predict(lambda params: tf.data.Dataset.from_tensor_slices(rows).batch(params["batch_size"]))
            )
        ),
    }
    return {name: trace_calls(call) for name, call in calls.items()}, model_dir, results


@pytest.mark.timeout(300)
@pytest.mark.parametrize("call", ["train", "evaluate", "predict"])
def test_a_mode_makes_no_callback_into_a_module_it_was_called_from_in_any_thread(traces, call):
    by_call, model_dir, results = traces
    trace = by_call[call]
    assert trace.callbacks == set()
    for stage in STAGES[call]:
        assert "tpu_estimator/" + stage in trace.visited, stage
    assert {"embedding/engine.py", "embedding/preprocessing.py"} <= trace.visited
    # The calls did what they do; the input's thread was traced where the mode has one.
    if call == "train":
        assert tf.train.load_variable(model_dir, "global_step") == 2
        assert "tensor_infeed" in trace.threads
    elif call == "evaluate":
        assert results["metrics"]["global_step"] == 2 and np.isfinite(results["metrics"]["loss"])
    else:
        assert len(results["predictions"]) == 10
        assert "tensor_infeed" in trace.threads
