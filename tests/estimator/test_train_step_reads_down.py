"""A TRAIN step read from `TPUEstimator.train()` to `Session.run` goes down the stack: no product module calls back
into a module it was called from (issue 33). Traced on the TPU-embedding example (embedding columns, an Adam
`CrossShardOptimizer`, 2 shards), with a profiler over every Python call (`call_tracer.py`)."""

import importlib.util
import os

import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator.call_tracer import REPO, trace_calls
from tpu_estimator import experimental as tex


def _example():
    spec = importlib.util.spec_from_file_location(
        "feature_columns_example", os.path.join(REPO, "examples", "feature_columns.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tracer_finds_a_callback_into_a_module_on_the_stack():
    # Two product-like modules: `a` calls `b.leaf` (down) and `b.walk(visit)`, and `b` calls `a.visit` back.
    namespace = {}
    exec(
        compile(
            "def walk(fn):\n    return fn()\n\ndef leaf():\n    return 1\n",
            os.path.join(REPO, "tpu_estimator", "_b.py"),
            "exec",
        ),
        namespace,
    )
    walk, leaf = namespace["walk"], namespace["leaf"]
    code_a = "def visit():\n    return 2\n\ndef main():\n    return leaf() + walk(visit)\n"
    namespace_a = {"walk": walk, "leaf": leaf}
    exec(compile(code_a, os.path.join(REPO, "tpu_estimator", "_a.py"), "exec"), namespace_a)
    trace = trace_calls(namespace_a["main"])
    assert trace.callbacks == {("tpu_estimator/_b.py", "tpu_estimator/_a.py", "visit")}
    assert {"tpu_estimator/_a.py", "tpu_estimator/_b.py"} <= trace.visited


@pytest.mark.timeout(300)
def test_a_training_step_makes_no_callback_into_a_module_it_was_called_from(tmp_path):
    example = _example()
    estimator = te.TPUEstimator(
        model_fn=example.model_fn,
        config=te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=2)),
        train_batch_size=64,
        embedding_config_spec=tex.EmbeddingConfigSpec(
            feature_columns=example.EMBEDDING_COLUMNS, optimization_parameters=tex.AdagradParameters(learning_rate=0.5)
        ),
    )
    trace = trace_calls(lambda: estimator.train(example.train_input_fn, max_steps=2))
    assert tf.train.load_variable(str(tmp_path), "global_step") == 2
    assert trace.callbacks == set()
    # The stages of the step were traced (the check is not vacuous).
    for stage in (
        "modes/train_loop",
        "modes/step_feed",
        "inputs/input_pipeline",
        "embedding_stage/embedding_infeed",
        "embedding_stage/embedding_bridge",
        "modes/shared_stages",
        "replicas/stamping",
        "replicas/replication",
        "specs/spec",
    ):
        assert "tpu_estimator/{}.py".format(stage) in trace.visited, stage
    assert {"embedding/engine.py", "embedding/preprocessing.py"} <= trace.visited
