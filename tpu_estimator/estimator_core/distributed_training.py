"""`train_and_evaluate` on a cluster described by `TF_CONFIG`: one role per task, as upstream's `_TrainingExecutor`.

Between-graph replication on TensorFlow's own runtime: every training task (chief, master, worker) starts its
`tf.distribute.Server` and calls `Estimator.train`, which places variables on the `ps` tasks
(`replica_device_setter`) and opens a `MonitoredTrainingSession` on its own server (`RunConfig.master`); only the
chief (or master) initialises, checkpoints and writes summaries. A `ps` task serves until it is stopped. The
`evaluator` task runs outside the training cluster and evaluates each new checkpoint.

`TPUEstimator` is not run this way: it replicates in-graph from one client (docs/DISTRIBUTED.md), so
`train_and_evaluate` runs its local loop in that client (`replicates_in_graph`, `check_in_graph_client_task`).
"""

import time
from typing import Callable, Dict, Optional

import tensorflow as tf

from tpu_estimator.estimator_core import cluster as cluster_lib
from tpu_estimator.estimator_core import evaluator as evaluator_lib
from tpu_estimator.estimator_core.cluster import TaskType

MAX_DELAY_SECS = 60
DELAY_SECS_PER_WORKER = 5
_TRAINER_JOBS = (TaskType.CHIEF, TaskType.MASTER, TaskType.WORKER)
_ENVIRONMENT_KEY = "environment"
_GOOGLE_ENVIRONMENT = "google"


def replicates_in_graph(estimator) -> bool:
    """Whether `estimator` builds one graph over the whole cluster from one client (`TPUEstimator` does).

    Args:
      estimator: the `Estimator`.

    Returns:
      The estimator's `_REPLICATES_IN_GRAPH` class attribute (False when it has none).
    """
    return bool(getattr(estimator, "_REPLICATES_IN_GRAPH", False))


def check_in_graph_client_task(estimator=None) -> None:
    """Refuses a `TF_CONFIG` task that is not the client of an in-graph (`TPUEstimator`) cluster.

    Args:
      estimator: the estimator; one whose config runs one process per host (`config.tpu_cluster.process_per_host`)
        is refused with what to call instead (the seam's `train_and_evaluate` runs its loop).

    Raises:
      ValueError: `TF_CONFIG`'s task is a `worker`, `ps` or `evaluator`: says what runs on each task instead; or
        the estimator runs one process per host.
    """
    cluster = getattr(getattr(estimator, "config", None), "tpu_cluster", None)
    if cluster is not None and getattr(cluster, "process_per_host", False):
        raise ValueError(
            "train_and_evaluate(TPUEstimator) with one process per host (TF_CONFIG naming this host's task in the "
            "hosts' job) runs through tpu_estimator.estimator.train_and_evaluate (or tf.estimator.train_and_evaluate "
            "with tpu_estimator.compat installed), which runs the loop on every host; this core's function does not."
        )
    task_type = cluster_lib.load_tf_config().get(cluster_lib.TASK_ENV_KEY, {}).get(cluster_lib.TASK_TYPE_KEY)
    if task_type in (TaskType.WORKER, TaskType.PS, TaskType.EVALUATOR):
        raise ValueError(
            "train_and_evaluate(TPUEstimator) runs in its cluster's client only, but TF_CONFIG makes this a {!r} "
            "task. TPUEstimator replicates in-graph over its hosts from one process (docs/DISTRIBUTED.md), which "
            "trains and evaluates after each checkpoint itself: run `tpu-estimator-server` (or a "
            "tf.distribute.Server) on the hosts, the tasks of TPUConfig.tpu_job_name, instead of this program; it "
            "uses no ps or evaluator task. Run this program in the client only, with TF_CONFIG's task type "
            "'chief'.".format(task_type)
        )


def run_task(estimator, train_spec, eval_spec) -> None:
    """Runs this task's part of distributed training and evaluation, chosen by `estimator.config.task_type`.

    Args:
      estimator: the `Estimator`; its `RunConfig` holds the cluster and task read from `TF_CONFIG`.
      train_spec: the `TrainSpec`.
      eval_spec: the `EvalSpec`.

    Raises:
      ValueError: no task type, the task type `local`, or a task type without a role.
    """
    config = estimator.config
    if not config.task_type:
        raise ValueError(
            "`estimator.config` must have task_type set. This usually means TF_CONFIG environment is not set correctly."
        )
    if config.task_type == "local":
        raise ValueError(
            "`task.type` in TF_CONFIG cannot be `local`. Leaving `cluster` and `task` properties in TF_CONFIG "
            "absent triggers train and evaluate `Estimator` locally (non-distributed)."
        )
    roles = _roles()
    if config.task_type not in roles:
        raise ValueError(
            "Task type {} is not supported. Supported task types are {}".format(config.task_type, sorted(roles))
        )
    roles[config.task_type](estimator, train_spec, eval_spec)


def _roles() -> Dict[str, Callable]:
    return {
        TaskType.CHIEF: _run_chief,
        TaskType.EVALUATOR: _run_evaluator,
        TaskType.MASTER: _run_master,
        TaskType.PS: _run_ps,
        TaskType.WORKER: _run_worker,
    }


def _run_chief(estimator, train_spec, eval_spec) -> None:
    """The chief: trains (initialises, checkpoints, writes summaries) with the train spec's saving listeners."""
    del eval_spec
    _start_distributed_training(estimator, train_spec, saving_listeners=train_spec.saving_listeners)


def _run_worker(estimator, train_spec, eval_spec) -> None:
    """A worker: trains after a start delay; no checkpoints, no saving listeners."""
    del eval_spec
    _start_distributed_training(estimator, train_spec)


def _run_master(estimator, train_spec, eval_spec) -> None:
    """The TF1 `master`: trains as the chief and evaluates (then exports) after its checkpoints, throttled."""
    evaluator = evaluator_lib.Evaluator(estimator, eval_spec, train_spec.max_steps)
    listener = evaluator_lib.EvaluateAfterCheckpoint(evaluator, eval_spec.throttle_secs)
    _start_distributed_training(estimator, train_spec, saving_listeners=train_spec.saving_listeners + (listener,))


def _run_ps(estimator, train_spec, eval_spec) -> None:
    """A parameter server: serves the variables placed on it until the process is stopped (never returns)."""
    del train_spec, eval_spec
    server = start_std_server(estimator.config)
    server.join()


def _run_evaluator(estimator, train_spec, eval_spec) -> None:
    """The evaluator: evaluates each new checkpoint until one reaches the train spec's `max_steps`."""
    evaluator_lib.evaluate_continuously(estimator, eval_spec, train_spec.max_steps)


def start_std_server(config) -> Optional[tf.distribute.Server]:
    """Starts this task's `tf.distribute.Server` (None for a one-task cluster, whose session is in-process).

    Args:
      config: the `RunConfig` (cluster spec, task type and index, master, protocol).

    Returns:
      The started server, or None when the cluster has one training task only.

    Raises:
      RuntimeError: no cluster spec, task type or index; or no master for a task of a larger cluster.
    """
    if not config.cluster_spec or not config.task_type or config.task_id is None:
        raise RuntimeError(
            "Could not start server; be sure to specify cluster_spec, task_type, and task in RunConfig or set the "
            "TF_CONFIG environment variable."
        )
    if not config.master:
        jobs = config.cluster_spec.jobs
        if len(jobs) == 1 and len(config.cluster_spec.job_tasks(jobs[0])) == 1 and config.task_type in _TRAINER_JOBS:
            tf.compat.v1.logging.info("Skip starting Tensorflow server as there is only one node in the cluster.")
            return None
        raise RuntimeError(
            "Could not start server; be sure to specify master in RunConfig or set the TF_CONFIG environment variable."
        )
    tf.compat.v1.logging.info("Start Tensorflow server.")
    session_config = tf.compat.v1.ConfigProto(log_device_placement=False)
    if config.session_config is not None:
        session_config.gpu_options.CopyFrom(config.session_config.gpu_options)
    server = tf.distribute.Server(
        config.cluster_spec,
        job_name=config.task_type,
        task_index=config.task_id,
        config=session_config,
        start=False,
        protocol=config.protocol,
    )
    server.start()
    return server


def worker_start_delay_secs(config) -> int:
    """How long a task waits before training: 0 for the chief; `(task_id + 1) * 5` s for a worker, at most 60 s
    (or `RunConfig.experimental_max_worker_delay_secs`). Asynchronous training usually converges better so.

    Args:
      config: the `RunConfig`.

    Returns:
      Seconds to wait.
    """
    if config.task_type != TaskType.WORKER:
        return 0
    max_delay_secs = MAX_DELAY_SECS
    if config.experimental_max_worker_delay_secs is not None:
        max_delay_secs = int(config.experimental_max_worker_delay_secs)
    return min(max_delay_secs, (config.task_id + 1) * DELAY_SECS_PER_WORKER)


def _start_distributed_training(estimator, train_spec, saving_listeners=None) -> None:
    config = estimator.config
    # The server starts before the delay: the other tasks wait for it to connect. It lives while this task trains.
    server = None
    if cluster_lib.load_tf_config().get(_ENVIRONMENT_KEY) != _GOOGLE_ENVIRONMENT:
        server = start_std_server(config)
    delay_secs = worker_start_delay_secs(config)
    if delay_secs > 0:
        tf.compat.v1.logging.info("Waiting %d secs before starting training.", delay_secs)
        time.sleep(delay_secs)
    estimator.train(
        input_fn=train_spec.input_fn,
        max_steps=train_spec.max_steps,
        hooks=list(train_spec.hooks),
        saving_listeners=saving_listeners,
    )
    del server
