"""Our RunConfig: TF_CONFIG parsing (cluster, task, masters, replica counts, chief) and upstream's validation."""

import json

import pytest
import tensorflow as tf

from tpu_estimator.estimator_core import RunConfig, TaskType, get_default_session_config

CLUSTER = {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "ps": ["host3:2222", "host4:2222"]}


def _with_tf_config(monkeypatch, tf_config):
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    return RunConfig()


def test_defaults_without_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    config = RunConfig()
    assert (config.task_type, config.task_id, config.is_chief, config.master) == ("worker", 0, True, "")
    assert (config.num_ps_replicas, config.num_worker_replicas, config.global_id_in_cluster) == (0, 1, 0)
    assert config.cluster_spec.as_dict() == {} and config.session_config is None
    assert (config.save_checkpoints_secs, config.save_checkpoints_steps) == (600, None)
    assert (config.save_summary_steps, config.keep_checkpoint_max, config.log_step_count_steps) == (100, 5, 100)
    assert config.model_dir is None and config.checkpoint_save_graph_def is True


@pytest.mark.parametrize(
    "task, expected",
    [
        # (task_type, task_id, is_chief, master, global_id, num_ps, num_workers)
        ({"type": "chief", "index": 0}, ("chief", 0, True, "grpc://host0:2222", 0, 2, 3)),
        ({"type": "worker", "index": 1}, ("worker", 1, False, "grpc://host2:2222", 2, 2, 3)),
        ({"type": "ps", "index": 1}, ("ps", 1, False, "grpc://host4:2222", 4, 2, 3)),
        ({"type": "evaluator", "index": 0}, ("evaluator", 0, False, "", None, 0, 0)),
    ],
)
def test_cluster_tasks(monkeypatch, task, expected):
    config = _with_tf_config(monkeypatch, {"cluster": CLUSTER, "task": task})
    got = (
        config.task_type,
        config.task_id,
        config.is_chief,
        config.master,
        config.global_id_in_cluster,
        config.num_ps_replicas,
        config.num_worker_replicas,
    )
    assert got == expected
    if task["type"] == "evaluator":
        assert config.cluster_spec.as_dict() == {} and config.session_config is None
    else:
        assert config.cluster_spec.as_dict() == CLUSTER
        # Device filters keep each task to its own devices (upstream's default distributed session config).
        filters = {
            "chief": ["/job:ps", "/job:chief"],
            "worker": ["/job:ps", "/job:worker/task:1"],
            "ps": ["/job:ps", "/job:worker", "/job:chief", "/job:master"],
        }[task["type"]]
        assert list(config.session_config.device_filters) == filters
        assert config.session_config.allow_soft_placement


def test_master_job_layout_and_session_masters(monkeypatch):
    cluster = {"master": ["m:1"], "worker": ["w:1"], "ps": ["p:1"]}
    config = _with_tf_config(
        monkeypatch,
        {"cluster": cluster, "task": {"type": "master", "index": 0}, "session_master": "grpc://override:1"},
    )
    assert (config.task_type, config.is_chief, config.master, config.num_worker_replicas) == (
        "master",
        True,
        "grpc://override:1",
        2,
    )
    config = _with_tf_config(monkeypatch, {"cluster": {"chief": ["c:1"]}, "task": {"type": "chief", "index": 0}})
    assert config.master == ""  # A one-task cluster runs in process.
    config = _with_tf_config(
        monkeypatch,
        {"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}, "eval_session_master": "grpc://e:1"},
    )
    assert config.evaluation_master == "grpc://e:1"
    config = _with_tf_config(monkeypatch, {"model_dir": "/tmp/from_tf_config", "service": {"a": 1}})
    assert config.model_dir == "/tmp/from_tf_config" and config.service == {"a": 1}


@pytest.mark.parametrize(
    "tf_config, message",
    [
        ({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 0}}, 'must have one "chief" node'),
        ({"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}, 'only one "chief" node'),
        ({"cluster": CLUSTER, "task": {"index": 0}}, "task type must be set"),
        ({"cluster": CLUSTER, "task": {"type": "worker"}}, "task index must be set"),
        ({"cluster": CLUSTER, "task": {"type": "worker", "index": -1}}, "Task index must be non-negative"),
        ({"cluster": CLUSTER, "task": {"type": "trainer", "index": 0}}, "trainer is not a valid task_type"),
        ({"cluster": CLUSTER, "task": {"type": "worker", "index": 2}}, "2 is not a valid task_id for task_type worker"),
        ({"task": {"type": "chief", "index": 0}}, 'If "cluster" is not set in TF_CONFIG, task type must be WORKER.'),
        ({"task": {"type": "worker", "index": 1}}, 'If "cluster" is not set in TF_CONFIG, task index must be 0.'),
        ({"cluster": {"master": ["m:1"], "chief": ["c:1"]}, "task": {"type": "master", "index": 0}}, "job `chief`"),
        ({"model_dir": ""}, "model_dir in TF_CONFIG should be non-empty."),
    ],
)
def test_invalid_tf_config(monkeypatch, tf_config, message):
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunConfig()


def test_tf_config_that_is_not_json(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{cluster:")
    with pytest.raises(ValueError, match="TF_CONFIG environment variable is not valid JSON"):
        RunConfig()


def test_service_must_be_a_dict(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"service": "tpu"}))
    with pytest.raises(TypeError, match='If "service" is set in TF_CONFIG, it must be a dict'):
        RunConfig()


def test_model_dir_in_tf_config_and_argument_must_agree(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"model_dir": "/a"}))
    with pytest.raises(ValueError, match="must have the same value as the model_dir in TF_CONFIG"):
        RunConfig(model_dir="/b")
    assert RunConfig(model_dir="/a").model_dir == "/a"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"save_checkpoints_steps": 10, "save_checkpoints_secs": 10}, "cannot be both set"),
        ({"model_dir": ""}, "model_dir should be non-empty"),
        ({"save_summary_steps": -1}, "save_summary_steps should be >= 0"),
        ({"save_checkpoints_steps": -1}, "save_checkpoints_steps should be >= 0"),
        ({"save_checkpoints_secs": -1}, "save_checkpoints_secs should be >= 0"),
        ({"session_config": {}}, "session_config must be instance of ConfigProto"),
        ({"keep_checkpoint_max": -1}, "keep_checkpoint_max should be >= 0"),
        ({"keep_checkpoint_every_n_hours": 0}, "keep_checkpoint_every_n_hours should be > 0"),
        ({"log_step_count_steps": 0}, "log_step_count_steps should be > 0"),
        ({"tf_random_seed": 1.5}, "tf_random_seed must be integer."),
        ({"experimental_max_worker_delay_secs": 1.5}, "experimental_max_worker_delay_secs must be an integer"),
        ({"session_creation_timeout_secs": 0}, "session_creation_timeout_secs should be > 0"),
        ({"device_fn": lambda x: x}, 'device_fn must be callable with exactly one argument "op".'),
        ({"protocol": "http"}, "protocol should be grpc or grpc\\+verbs"),
        ({"train_distribute": object()}, "RunConfig\\(train_distribute=...\\) is not supported"),
    ],
)
def test_validation_messages(monkeypatch, kwargs, message):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match=message):
        RunConfig(**kwargs)


def test_replace(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    config = RunConfig(save_checkpoints_steps=5, tf_random_seed=3)
    replaced = config.replace(save_checkpoints_secs=30, model_dir="/m")
    # Setting one checkpoint cadence clears the other; the original is unchanged.
    assert (replaced.save_checkpoints_secs, replaced.save_checkpoints_steps, replaced.model_dir) == (30, None, "/m")
    assert (config.save_checkpoints_secs, config.save_checkpoints_steps, config.model_dir) == (None, 5, None)
    assert replaced.tf_random_seed == 3
    with pytest.raises(ValueError, match="Replacing task_type is not supported"):
        config.replace(task_type="chief")
    with pytest.raises(ValueError, match="cannot be both set"):
        config.replace(save_checkpoints_steps=1, save_checkpoints_secs=1)


def test_default_session_config():
    config = get_default_session_config()
    assert isinstance(config, tf.compat.v1.ConfigProto) and config.allow_soft_placement
    assert config.graph_options.rewrite_options.meta_optimizer_iterations == 1  # RewriterConfig.ONE
    assert TaskType.CHIEF == "chief" and TaskType.EVALUATOR == "evaluator"
