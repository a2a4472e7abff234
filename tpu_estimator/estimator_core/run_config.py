"""`RunConfig`: where and how an `Estimator` runs (model_dir, checkpoint and summary cadence, cluster)."""

import copy
from typing import Any, Dict

import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

from tpu_estimator.estimator_core import cluster as cluster_lib
from tpu_estimator.estimator_core.cluster import TaskType
from tpu_estimator.estimator_core.inputs import fn_args

_USE_DEFAULT = object()
_VALID_DEVICE_FN_ARGS = {"op"}
_SAVE_CKPT_ERR = "`save_checkpoints_steps` and `save_checkpoints_secs` cannot be both set."
_DEFAULT_REPLACEABLE_LIST = [
    "model_dir",
    "tf_random_seed",
    "save_summary_steps",
    "save_checkpoints_steps",
    "save_checkpoints_secs",
    "session_config",
    "keep_checkpoint_max",
    "keep_checkpoint_every_n_hours",
    "log_step_count_steps",
    "train_distribute",
    "device_fn",
    "protocol",
    "eval_distribute",
    "experimental_distribute",
    "experimental_max_worker_delay_secs",
    "session_creation_timeout_secs",
    "checkpoint_save_graph_def",
]


def get_default_session_config() -> tf.compat.v1.ConfigProto:
    """The session config Estimators use by default: soft placement, one meta-optimizer iteration."""
    rewrite_opts = rewriter_config_pb2.RewriterConfig(meta_optimizer_iterations=rewriter_config_pb2.RewriterConfig.ONE)
    graph_opts = tf.compat.v1.GraphOptions(rewrite_options=rewrite_opts)
    return tf.compat.v1.ConfigProto(allow_soft_placement=True, graph_options=graph_opts)


def _validate_properties(config: "RunConfig") -> None:
    """Raises ValueError (upstream's messages) for the first property that is set and invalid."""

    def check(name, cond, message):
        value = getattr(config, name)
        if value is not None and not cond(value):
            raise ValueError(message)

    check("model_dir", lambda d: d, "model_dir should be non-empty")
    check("save_summary_steps", lambda s: s >= 0, "save_summary_steps should be >= 0")
    check("save_checkpoints_steps", lambda s: s >= 0, "save_checkpoints_steps should be >= 0")
    check("save_checkpoints_secs", lambda s: s >= 0, "save_checkpoints_secs should be >= 0")
    check(
        "session_config",
        lambda sc: isinstance(sc, tf.compat.v1.ConfigProto),
        "session_config must be instance of ConfigProto",
    )
    check("keep_checkpoint_max", lambda k: k >= 0, "keep_checkpoint_max should be >= 0")
    check("keep_checkpoint_every_n_hours", lambda h: h > 0, "keep_checkpoint_every_n_hours should be > 0")
    check("log_step_count_steps", lambda n: n > 0, "log_step_count_steps should be > 0")
    check("tf_random_seed", lambda seed: isinstance(seed, int), "tf_random_seed must be integer.")
    check(
        "experimental_max_worker_delay_secs",
        lambda d: isinstance(d, int),
        "experimental_max_worker_delay_secs must be an integer if set.",
    )
    check("session_creation_timeout_secs", lambda t: t > 0, "session_creation_timeout_secs should be > 0")
    check(
        "device_fn",
        lambda fn: callable(fn) and set(fn_args(fn)) == _VALID_DEVICE_FN_ARGS,
        'device_fn must be callable with exactly one argument "op".',
    )
    check("protocol", lambda p: p in (None, "grpc", "grpc+verbs"), "protocol should be grpc or grpc+verbs")


def _validate_save_ckpt_with_replaced_keys(config: "RunConfig", replaced_keys) -> None:
    """Setting one of the checkpoint cadences clears the other; setting both is an error."""
    steps = config.save_checkpoints_steps
    secs = config.save_checkpoints_secs
    if "save_checkpoints_steps" in replaced_keys and "save_checkpoints_secs" in replaced_keys:
        if steps is not None and secs is not None:
            raise ValueError(_SAVE_CKPT_ERR)
    elif "save_checkpoints_steps" in replaced_keys and steps is not None:
        config._save_checkpoints_secs = None
    elif "save_checkpoints_secs" in replaced_keys and secs is not None:
        config._save_checkpoints_steps = None


class RunConfig(object):
    """Configuration of an `Estimator` run, with the cluster read from the `TF_CONFIG` environment variable.

    Args:
      model_dir: directory for checkpoints, summaries and the graph; may come from `TF_CONFIG['model_dir']`.
      tf_random_seed: graph-level random seed.
      save_summary_steps: write summaries every this many steps (0: never).
      save_checkpoints_steps: checkpoint every this many steps; exclusive with `save_checkpoints_secs`.
      save_checkpoints_secs: checkpoint every this many seconds (default 600 when neither is given).
      session_config: a `tf.compat.v1.ConfigProto`; default `get_default_session_config()` in the `Estimator`.
      keep_checkpoint_max: number of recent checkpoints kept (0 or None: all).
      keep_checkpoint_every_n_hours: additionally keep one checkpoint every this many hours.
      log_step_count_steps: log loss and global_step/sec every this many steps.
      train_distribute: not supported by this core (a `tf.distribute` strategy needs upstream's Estimator).
      device_fn: `device_fn(op)` returning a device for each op; default: a replica device setter with ps tasks.
      protocol: server protocol, `grpc` or `grpc+verbs`.
      eval_distribute: not supported by this core.
      experimental_distribute: not supported by this core.
      experimental_max_worker_delay_secs: cap on the start delay of non-chief workers.
      session_creation_timeout_secs: how long workers wait for the chief's session.
      checkpoint_save_graph_def: write `graph.pbtxt` and the graph into checkpoints' meta files.

    Raises:
      ValueError: both checkpoint cadences set, invalid values (upstream's messages), a distribution strategy, or an
        invalid `TF_CONFIG`.
    """

    def __init__(
        self,
        model_dir=None,
        tf_random_seed=None,
        save_summary_steps=100,
        save_checkpoints_steps=_USE_DEFAULT,
        save_checkpoints_secs=_USE_DEFAULT,
        session_config=None,
        keep_checkpoint_max=5,
        keep_checkpoint_every_n_hours=10000,
        log_step_count_steps=100,
        train_distribute=None,
        device_fn=None,
        protocol=None,
        eval_distribute=None,
        experimental_distribute=None,
        experimental_max_worker_delay_secs=None,
        session_creation_timeout_secs=7200,
        checkpoint_save_graph_def=True,
    ):
        if save_checkpoints_steps is _USE_DEFAULT and save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_steps = None
            save_checkpoints_secs = 600
        elif save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_secs = None
        elif save_checkpoints_steps is _USE_DEFAULT:
            save_checkpoints_steps = None
        elif save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise ValueError(_SAVE_CKPT_ERR)
        for name, value in (
            ("train_distribute", train_distribute),
            ("eval_distribute", eval_distribute),
            ("experimental_distribute", experimental_distribute),
        ):
            if value is not None:
                raise ValueError(
                    "RunConfig({}=...) is not supported by tpu_estimator's Estimator core (TensorFlow without "
                    "tf.estimator): distribution strategies need upstream's Estimator. Use TPUEstimator with "
                    "tpu_config.RunConfig to run on several devices, or leave {} unset.".format(name, name)
                )
        tf_config = cluster_lib.load_tf_config()
        if tf_config:
            tf.compat.v1.logging.info("TF_CONFIG environment variable: %s", tf_config)
        model_dir = cluster_lib.model_dir_from_tf_config(tf_config, cluster_lib.path_to_str(model_dir))
        RunConfig._replace(
            self,
            allowed_properties_list=_DEFAULT_REPLACEABLE_LIST,
            model_dir=model_dir,
            tf_random_seed=tf_random_seed,
            save_summary_steps=save_summary_steps,
            save_checkpoints_steps=save_checkpoints_steps,
            save_checkpoints_secs=save_checkpoints_secs,
            session_config=session_config,
            keep_checkpoint_max=keep_checkpoint_max,
            keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
            log_step_count_steps=log_step_count_steps,
            train_distribute=train_distribute,
            device_fn=device_fn,
            protocol=protocol,
            eval_distribute=eval_distribute,
            experimental_distribute=experimental_distribute,
            experimental_max_worker_delay_secs=experimental_max_worker_delay_secs,
            session_creation_timeout_secs=session_creation_timeout_secs,
            checkpoint_save_graph_def=checkpoint_save_graph_def,
        )
        self._init_distributed_setting_from_environment_var(tf_config)
        self._maybe_overwrite_session_config_for_distributed_training()

    # ---- cluster ----------------------------------------------------------------------------------------------

    def _maybe_overwrite_session_config_for_distributed_training(self) -> None:
        """In a cluster without a user session config: device filters that keep each task to its own devices."""
        if not self._session_config and self._cluster_spec:
            RunConfig._replace(
                self,
                allowed_properties_list=_DEFAULT_REPLACEABLE_LIST,
                session_config=self._get_default_session_config_distributed(),
            )

    def _get_default_session_config_distributed(self):
        device_filters = {
            TaskType.MASTER: ["/job:ps", "/job:master"],
            TaskType.CHIEF: ["/job:ps", "/job:chief"],
            TaskType.WORKER: ["/job:ps", "/job:worker/task:%d" % (self._task_id or 0)],
            TaskType.PS: ["/job:ps", "/job:worker", "/job:chief", "/job:master"],
        }.get(self._task_type)
        if device_filters is None:
            return None
        config = get_default_session_config()
        config.device_filters.extend(device_filters)
        return config

    def _init_distributed_setting_from_environment_var(self, tf_config: Dict[str, Any]) -> None:
        """Sets the task, masters, replica counts and chief flag from `TF_CONFIG` (upstream's rules).

        Raises:
          ValueError: an inconsistent `TF_CONFIG` (the message says which part).
        """
        self._service = cluster_lib.validate_service(tf_config.get(cluster_lib.SERVICE_KEY))
        self._cluster_spec = tf.train.ClusterSpec(tf_config.get(cluster_lib.CLUSTER_KEY, {}))
        task_env = tf_config.get(cluster_lib.TASK_ENV_KEY, {})
        if self._cluster_spec and TaskType.MASTER in self._cluster_spec.jobs:
            self._init_with_master_job(tf_config)
            return
        if self._cluster_spec:
            self._task_type, self._task_id = cluster_lib.validate_task_type_and_task_id(
                self._cluster_spec, task_env, TaskType.CHIEF
            )
            self._evaluation_master = cluster_lib.eval_session_master(self._task_type, tf_config)
            if self._task_type != TaskType.EVALUATOR:
                self._master = cluster_lib.session_master(self._cluster_spec, self._task_type, self._task_id, tf_config)
                self._num_ps_replicas = cluster_lib.count_ps(self._cluster_spec)
                self._num_worker_replicas = cluster_lib.count_workers(self._cluster_spec, TaskType.CHIEF)
                self._global_id_in_cluster = cluster_lib.global_id_in_cluster(
                    self._cluster_spec, self._task_type, self._task_id, TaskType.CHIEF
                )
            else:
                # The evaluator runs outside the training cluster.
                self._cluster_spec = tf.train.ClusterSpec({})
                self._master = cluster_lib.LOCAL_MASTER
                self._num_ps_replicas = 0
                self._num_worker_replicas = 0
                self._global_id_in_cluster = None
            self._is_chief = self._task_type == TaskType.CHIEF
            return
        self._task_type = task_env.get(cluster_lib.TASK_TYPE_KEY, TaskType.WORKER)
        self._task_id = int(task_env.get(cluster_lib.TASK_ID_KEY, 0))
        self._global_id_in_cluster = 0
        if self._task_type != TaskType.WORKER:
            raise ValueError('If "cluster" is not set in TF_CONFIG, task type must be WORKER.')
        if self._task_id != 0:
            raise ValueError('If "cluster" is not set in TF_CONFIG, task index must be 0.')
        self._master = tf_config.get(cluster_lib.SESSION_MASTER_KEY, cluster_lib.LOCAL_MASTER)
        self._evaluation_master = tf_config.get(cluster_lib.EVAL_SESSION_MASTER_KEY, cluster_lib.LOCAL_MASTER)
        self._is_chief = True
        self._num_ps_replicas = 0
        self._num_worker_replicas = 1

    def _init_with_master_job(self, tf_config: Dict[str, Any]) -> None:
        """The TF1 layout with a `master` job (which is the chief) instead of `chief`."""
        if TaskType.CHIEF in self._cluster_spec.jobs:
            raise ValueError("If `master` node exists in `cluster`, job `chief` is not supported.")
        task_env = tf_config.get(cluster_lib.TASK_ENV_KEY, {})
        self._task_type, self._task_id = cluster_lib.validate_task_type_and_task_id(
            self._cluster_spec, task_env, TaskType.MASTER
        )
        if self._task_type == TaskType.EVALUATOR:
            raise ValueError("If `master` node exists in `cluster`, task_type `evaluator` is not supported.")
        self._global_id_in_cluster = cluster_lib.global_id_in_cluster(
            self._cluster_spec, self._task_type, self._task_id, TaskType.MASTER
        )
        self._master = cluster_lib.session_master(self._cluster_spec, self._task_type, self._task_id, tf_config)
        self._evaluation_master = cluster_lib.eval_session_master(self._task_type, tf_config)
        self._num_ps_replicas = cluster_lib.count_ps(self._cluster_spec)
        self._num_worker_replicas = cluster_lib.count_workers(self._cluster_spec, TaskType.MASTER)
        self._is_chief = self._task_type == TaskType.MASTER

    # ---- properties -------------------------------------------------------------------------------------------

    @property
    def cluster_spec(self):
        return self._cluster_spec

    @property
    def device_fn(self):
        """`device_fn(op)`, or None for the default (a replica device setter when there are ps tasks)."""
        return self._device_fn

    @property
    def evaluation_master(self):
        return self._evaluation_master

    @property
    def is_chief(self):
        return self._is_chief

    @property
    def master(self):
        return self._master

    @property
    def num_ps_replicas(self):
        return self._num_ps_replicas

    @property
    def num_worker_replicas(self):
        return self._num_worker_replicas

    @property
    def task_id(self):
        return self._task_id

    @property
    def global_id_in_cluster(self):
        """The task's unique index in the cluster (chief 0, then workers, then ps); None for the evaluator."""
        return self._global_id_in_cluster

    @property
    def experimental_max_worker_delay_secs(self):
        return self._experimental_max_worker_delay_secs

    @property
    def task_type(self):
        return self._task_type

    @property
    def tf_random_seed(self):
        return self._tf_random_seed

    @property
    def save_summary_steps(self):
        return self._save_summary_steps

    @property
    def save_checkpoints_secs(self):
        return self._save_checkpoints_secs

    @property
    def session_config(self):
        return self._session_config

    @property
    def save_checkpoints_steps(self):
        return self._save_checkpoints_steps

    @property
    def checkpoint_save_graph_def(self):
        return self._checkpoint_save_graph_def

    @property
    def keep_checkpoint_max(self):
        return self._keep_checkpoint_max

    @property
    def session_creation_timeout_secs(self):
        return self._session_creation_timeout_secs

    @property
    def keep_checkpoint_every_n_hours(self):
        return self._keep_checkpoint_every_n_hours

    @property
    def log_step_count_steps(self):
        return self._log_step_count_steps

    @property
    def model_dir(self):
        return self._model_dir

    @property
    def service(self):
        """`TF_CONFIG['service']`: a dict, or None."""
        return self._service

    @property
    def train_distribute(self):
        return self._train_distribute

    @property
    def eval_distribute(self):
        return self._eval_distribute

    @property
    def protocol(self):
        return self._protocol

    def replace(self, **kwargs) -> "RunConfig":
        """A copy with the given properties replaced, validated again.

        Raises:
          ValueError: a property that cannot be replaced, or an invalid value.
        """
        return RunConfig._replace(copy.deepcopy(self), allowed_properties_list=_DEFAULT_REPLACEABLE_LIST, **kwargs)

    @staticmethod
    def _replace(config, allowed_properties_list=None, **kwargs):
        allowed_properties_list = allowed_properties_list or []
        for key, new_value in kwargs.items():
            if key not in allowed_properties_list:
                raise ValueError(
                    "Replacing {} is not supported. Allowed properties are {}.".format(key, allowed_properties_list)
                )
            if key in ("train_distribute", "eval_distribute", "experimental_distribute") and new_value is not None:
                raise ValueError(
                    "RunConfig.replace({}=...) is not supported by tpu_estimator's Estimator core: distribution "
                    "strategies need upstream's Estimator.".format(key)
                )
            setattr(config, "_" + key, new_value)
        _validate_save_ckpt_with_replaced_keys(config, kwargs.keys())
        _validate_properties(config)
        return config
