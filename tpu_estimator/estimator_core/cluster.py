"""Reading a task's place in the cluster from `TF_CONFIG` (as upstream's `RunConfig` does)."""

import json
import os
from typing import Any, Dict, Optional

import tensorflow as tf

TF_CONFIG_ENV = "TF_CONFIG"
TASK_ENV_KEY = "task"
TASK_TYPE_KEY = "type"
TASK_ID_KEY = "index"
CLUSTER_KEY = "cluster"
SERVICE_KEY = "service"
SESSION_MASTER_KEY = "session_master"
EVAL_SESSION_MASTER_KEY = "eval_session_master"
MODEL_DIR_KEY = "model_dir"
LOCAL_MASTER = ""
GRPC_SCHEME = "grpc://"


class TaskType(object):
    """The job names of an Estimator cluster."""

    MASTER = "master"
    PS = "ps"
    WORKER = "worker"
    CHIEF = "chief"
    EVALUATOR = "evaluator"


def load_tf_config() -> Dict[str, Any]:
    """The parsed `TF_CONFIG` environment variable (`{}` when unset).

    Raises:
      ValueError: `TF_CONFIG` is not valid JSON.
    """
    raw = os.environ.get(TF_CONFIG_ENV, "{}")
    try:
        return json.loads(raw or "{}")
    except ValueError as e:
        raise ValueError("The TF_CONFIG environment variable is not valid JSON ({}): {!r}".format(e, raw))


def session_master(cluster_spec, task_type: str, task_id: int, tf_config: Dict[str, Any]) -> str:
    """The session target of a training task: `session_master`, '' for a one-task cluster, else its grpc address."""
    if SESSION_MASTER_KEY in tf_config:
        return tf_config[SESSION_MASTER_KEY]
    jobs = cluster_spec.jobs
    if len(jobs) == 1 and len(cluster_spec.job_tasks(jobs[0])) == 1:
        return LOCAL_MASTER
    return GRPC_SCHEME + cluster_spec.job_tasks(task_type)[task_id]


def eval_session_master(task_type: str, tf_config: Dict[str, Any]) -> str:
    if task_type == TaskType.EVALUATOR:
        return tf_config.get(EVAL_SESSION_MASTER_KEY, LOCAL_MASTER)
    return LOCAL_MASTER


def count_ps(cluster_spec) -> int:
    return len(cluster_spec.as_dict().get(TaskType.PS, []))


def count_workers(cluster_spec, chief_task_type: str) -> int:
    jobs = cluster_spec.as_dict()
    return len(jobs.get(TaskType.WORKER, [])) + len(jobs.get(chief_task_type, []))


def validate_service(service: Optional[Any]) -> Optional[Dict[str, Any]]:
    if service is not None and not isinstance(service, dict):
        raise TypeError('If "service" is set in TF_CONFIG, it must be a dict. Given %s' % type(service))
    return service


def validate_task_type_and_task_id(cluster_spec, task_env: Dict[str, Any], chief_task_type: str):
    """`(task_type, task_id)` of this task, checked against the cluster.

    Raises:
      ValueError: no (or several) chief tasks, missing task type/index, a negative index, or a task not in the
        cluster.
    """
    if chief_task_type not in cluster_spec.jobs:
        raise ValueError('If "cluster" is set in TF_CONFIG, it must have one "%s" node.' % chief_task_type)
    if len(cluster_spec.job_tasks(chief_task_type)) > 1:
        raise ValueError('The "cluster" in TF_CONFIG must have only one "%s" node.' % chief_task_type)
    task_type = task_env.get(TASK_TYPE_KEY, None)
    task_id = task_env.get(TASK_ID_KEY, None)
    if not task_type:
        raise ValueError('If "cluster" is set in TF_CONFIG, task type must be set.')
    if task_id is None:
        raise ValueError('If "cluster" is set in TF_CONFIG, task index must be set.')
    task_id = int(task_id)
    if task_id < 0:
        raise ValueError("Task index must be non-negative number.")
    if task_type == TaskType.EVALUATOR:
        return task_type, task_id
    if task_type not in cluster_spec.jobs:
        raise ValueError(
            "%s is not a valid task_type in the cluster_spec:\n%s\n\n"
            "Note that these values may be coming from the TF_CONFIG environment variable." % (task_type, cluster_spec)
        )
    if not 0 <= task_id < len(cluster_spec.job_tasks(task_type)):
        raise ValueError(
            "%d is not a valid task_id for task_type %s in the cluster_spec:\n%s\n\n"
            "Note that these values may be coming from the TF_CONFIG environment variable."
            % (task_id, task_type, cluster_spec)
        )
    return task_type, task_id


def global_id_in_cluster(cluster_spec, task_type: str, task_id: int, chief_task_type: str) -> int:
    """The task's index when tasks are ordered chief first, then other jobs by name, then `ps`."""
    ordered = [chief_task_type]
    ordered.extend(t for t in sorted(cluster_spec.jobs) if t not in (chief_task_type, TaskType.PS))
    if TaskType.PS in cluster_spec.jobs:
        ordered.append(TaskType.PS)
    next_id = 0
    for job in ordered:
        if job == task_type:
            return next_id + task_id
        next_id += len(cluster_spec.job_tasks(job))
    raise RuntimeError("Internal Error: `task_type` ({}) is not in cluster_spec ({}).".format(task_type, cluster_spec))


def model_dir_from_tf_config(tf_config: Dict[str, Any], model_dir: Optional[str]) -> Optional[str]:
    """`model_dir`, or `TF_CONFIG['model_dir']`; both set must agree.

    Raises:
      ValueError: an empty `model_dir` (argument or TF_CONFIG), or two different ones.
    """
    if model_dir == "":
        raise ValueError("model_dir should be non-empty.")
    from_tf_config = tf_config.get(MODEL_DIR_KEY)
    if from_tf_config == "":
        raise ValueError("model_dir in TF_CONFIG should be non-empty.")
    if from_tf_config:
        if model_dir and from_tf_config != model_dir:
            raise ValueError(
                "`model_dir` provided in RunConfig construct, if set, must have the same value as the model_dir in "
                'TF_CONFIG. model_dir: {}\nTF_CONFIG["model_dir"]: {}.\n'.format(model_dir, from_tf_config)
            )
        tf.compat.v1.logging.info("Using model_dir in TF_CONFIG: %s", from_tf_config)
    return model_dir or from_tf_config


def path_to_str(path):
    """A `PathLike` as `str`; anything else unchanged."""
    if hasattr(path, "__fspath__"):
        path = tf.compat.as_str_any(path.__fspath__())
    return path
