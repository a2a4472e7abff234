"""The `RunConfig` an `Estimator` runs with: model_dir and session config filled in, default device function."""

import tempfile

import tensorflow as tf

from tpu_estimator.estimator_core import _tf_internal
from tpu_estimator.estimator_core import run_config as run_config_lib
from tpu_estimator.estimator_core.cluster import path_to_str


def config_with_model_dir_and_session_config(config, model_dir):
    """`config` (default `RunConfig()`) with `model_dir` and a default session config filled in.

    Raises:
      ValueError: `config` is not a `RunConfig`, or `model_dir` differs from `config.model_dir`.
    """
    if config is None:
        config = run_config_lib.RunConfig()
        tf.compat.v1.logging.info("Using default config.")
    if not isinstance(config, run_config_lib.RunConfig):
        raise ValueError("config must be an instance of `RunConfig`, but provided %s." % config)
    if config.session_config is None:
        config = run_config_lib.RunConfig.replace(config, session_config=run_config_lib.get_default_session_config())
    model_dir = path_to_str(model_dir)
    if model_dir is not None and getattr(config, "model_dir", None) is not None and config.model_dir != model_dir:
        raise ValueError(
            "`model_dir` are set both in constructor and `RunConfig`, but with different values. In constructor: "
            "'{}', in `RunConfig`: '{}' ".format(model_dir, config.model_dir)
        )
    if model_dir:
        config = run_config_lib.RunConfig.replace(config, model_dir=model_dir)
    elif getattr(config, "model_dir", None) is None:
        model_dir = tempfile.mkdtemp()
        tf.compat.v1.logging.warn("Using temporary folder as model directory: %s", model_dir)
        config = run_config_lib.RunConfig.replace(config, model_dir=model_dir)
    return config


def replica_device_setter(config):
    """A replica device setter placing variables on the ps tasks, when the cluster has some; else None."""
    if config.num_ps_replicas <= 0:
        return None
    if config.task_type:
        worker_device = "/job:%s/task:%d" % (config.task_type, config.task_id)
    else:
        worker_device = "/job:worker"
    return tf.compat.v1.train.replica_device_setter(
        ps_tasks=config.num_ps_replicas,
        worker_device=worker_device,
        merge_devices=True,
        ps_ops=list(_tf_internal.STANDARD_PS_OPS),
        cluster=config.cluster_spec,
    )
