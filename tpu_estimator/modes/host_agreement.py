"""With one process per host: before each call's first step, the hosts agree on what must be equal.

Every host runs the program in a process of its own, so nothing makes two hosts run the same program with the same
settings. Hosts that differ compute something wrong without an error (each host's evaluation restores its own
`model_dir`), or fail much later with a raw collective error ("Shape mismatch in the collective instance ..."), or
hang (the chief's session start waits for a broadcast the other host never sends). So before the session of every
`train()`, `evaluate()` and `predict()` is created, each host hands the others a fingerprint of one digest per field
(`fields`): the call, `model_dir` (resolved), the global batch sizes, the shard configuration, the graph's variables
(names, shapes, dtypes, trainable or not), the embedding tables, the TensorFlow and tpu-estimator versions. One
`CollectiveGatherV2` of a fixed-size int64 vector per host does it, in a graph and session of its own (the job's
collective group leader, group `AGREEMENT_GROUP_KEY`, its own instance keys, so the step graphs' keys do not move).
When a field differs, a second gather hands every host the differing fields' texts, and every host raises
`HostsDisagreeError` naming the field, the hosts and their values, before any step.

The wait is bounded: the hosts may reach the agreement `cluster.hosts_wait_secs()` apart at most, and a host whose
server stops answering meanwhile (its process ended: it failed before the agreement) fails the others within seconds,
naming it.
"""

import hashlib
import itertools
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

import tpu_estimator
from tpu_estimator.hosts import cluster as cluster_lib
from tpu_estimator.specs import embedding_spec
from tpu_estimator.tpu_config import input_pipeline_config_name

# The collective group of the agreement: every host's CPU. Not the step graphs' group (`collectives._GROUP_KEY`),
# whose devices may be GPUs, and its own instance keys: a disagreement must not shift the step graphs' keys.
AGREEMENT_GROUP_KEY = 2
# Fields per host: a fixed number, so that hosts of another tpu-estimator version still meet (their protocol field
# then differs).
NUM_SLOTS = 16
_PROTOCOL = "tpu-estimator host agreement 1"
# How much of a differing field's text the second gather carries per host (the variable list of a large model).
_MAX_TEXT_BYTES = 1 << 20
# How often the wait looks for a host whose server no longer accepts connections.
_POLL_SECS = 0.5

_instance_keys = itertools.count(1)
_instance_keys_lock = threading.Lock()


class HostsDisagreeError(cluster_lib.ClusterError):
    """The hosts of a job of one process per host do not run the same program with the same settings."""


# What to do about each field, for the error.
_ADVICE = {
    "protocol": "install the same tpu-estimator version on every host",
    "call": "call train(), evaluate() and predict() in the same order on every host",
    "model_dir": (
        "give every host the same model_dir: one directory that every host reads and writes (a shared file system "
        "mounted at the same path, or a gs:// or hdfs:// URL); each host would otherwise evaluate and predict with "
        "its own directory's checkpoint"
    ),
    "train_batch_size": "give every host the same train_batch_size (the job's global batch, not a host's)",
    "eval_batch_size": "give every host the same eval_batch_size (the job's global batch, not a host's)",
    "predict_batch_size": "give every host the same predict_batch_size (the job's global batch, not a host's)",
    "TPUConfig": "give every host the same TPUConfig (num_shards, iterations_per_loop, input pipeline)",
    "variables": "run the same program (model_fn, params, optimizer) on every host",
    "embedding tables": "run the same program (embedding_config_spec) on every host",
    "TensorFlow version": "install the same TensorFlow version on every host",
    "tpu-estimator version": "install the same tpu-estimator version on every host",
}


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def variables_text(graph: tf.Graph) -> str:
    """One line per variable of `graph` (global and local, by name): name, shape, dtype, trainable or not.

    With one process per host the other hosts' copies of the dense variables are local variables and the chief's
    global ones (`mirrored_variables.py`): both collections are read, so the text is the same on every host.
    """
    trainable = {v.op.name for v in graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)}
    lines = set()
    for key in (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.LOCAL_VARIABLES):
        for variable in graph.get_collection(key):
            name = variable.op.name
            lines.add(
                "{} {} {}{}".format(
                    name,
                    variable.shape.as_list() if variable.shape.rank is not None else "?",
                    variable.dtype.base_dtype.name,
                    " trainable" if name in trainable else "",
                )
            )
    return "\n".join(sorted(lines))


def embedding_tables_text(resolved: Any) -> str:
    """The tables and features of a resolved embedding config (`embedding_spec.ResolvedEmbeddingConfig`), or
    "none"."""
    if resolved is None:
        return "none"
    lines = []
    for name, table in resolved.tables.items():
        lines.append(
            "table {} [{}, {}] combiner={} optimizer={}".format(
                name, table.vocabulary_size, table.dim, table.combiner, type(table.optimizer).__name__
            )
        )
    for key, feature in resolved.feature_config.items():
        lines.append(
            "feature {} -> {} max_sequence_length={}".format(key, feature.table.name, feature.max_sequence_length)
        )
    return "\n".join(lines)


def resolved_model_dir(model_dir: str) -> str:
    """`model_dir` as one host sees it: its real absolute path, or the URL (`gs://...`) unchanged."""
    if "://" in model_dir:
        return model_dir
    return os.path.realpath(os.path.abspath(os.path.expanduser(model_dir)))


def fields(
    call: str,
    model_dir: str,
    batch_sizes: Dict[str, Optional[int]],
    tpu_config_text: str,
    graph: tf.Graph,
    tables_text: str,
) -> List[Tuple[str, str]]:
    """The fingerprint of one call on one host: `(field, text)` pairs, in a fixed order.

    Args:
      call: "train()", "evaluate()" or "predict()".
      model_dir: the estimator's `model_dir`.
      batch_sizes: `{"train_batch_size": ..., "eval_batch_size": ..., "predict_batch_size": ...}`.
      tpu_config_text: the shard configuration (num_shards, iterations_per_loop, input pipeline).
      graph: the call's graph, built.
      tables_text: `embedding_tables_text` of the estimator's embedding config.
    """
    result = [
        ("protocol", _PROTOCOL),
        ("call", call),
        ("model_dir", resolved_model_dir(model_dir)),
    ]
    result += [
        (name, str(batch_sizes.get(name))) for name in ("train_batch_size", "eval_batch_size", "predict_batch_size")
    ]
    result += [
        ("TPUConfig", tpu_config_text),
        ("variables", variables_text(graph)),
        ("embedding tables", tables_text),
        ("TensorFlow version", "{} ({})".format(tf.__version__, tf.version.GIT_VERSION)),
        ("tpu-estimator version", tpu_estimator.__version__),
    ]
    assert len(result) <= NUM_SLOTS
    return result


def _next_instance_key() -> int:
    with _instance_keys_lock:
        return next(_instance_keys)


def _gather(cluster: cluster_lib.Cluster, config: tf.compat.v1.ConfigProto, values: np.ndarray, wait_secs: float):
    """Returns a function that gathers every host's int64 `values` (the same length on every host) in host order."""
    instance_key = _next_instance_key()

    def run() -> np.ndarray:
        with tf.Graph().as_default():
            with tf.device(cluster.host_device(cluster.this_host)):
                gathered = tf.raw_ops.CollectiveGatherV2(
                    input=tf.constant(values, tf.int64),
                    group_size=cluster.num_hosts,
                    group_key=AGREEMENT_GROUP_KEY,
                    instance_key=instance_key,
                    ordering_token=[],
                    timeout_seconds=wait_secs,
                )
            options = tf.compat.v1.RunOptions(timeout_in_ms=int((wait_secs + 5) * 1000))
            with tf.compat.v1.Session(cluster.target, config=config) as session:
                return session.run(gathered, options=options).reshape(cluster.num_hosts, -1)

    return run


def _bounded(cluster: cluster_lib.Cluster, what: str, run: Callable[[], Any], wait_secs: float) -> Any:
    """`run()` in a thread of its own, while this thread looks every `_POLL_SECS` for a host that stopped answering.

    Raises:
      ClusterError: a host's server no longer accepts connections (its process ended), the hosts did not all come
        within `wait_secs`, or the gather failed.
    """
    outcome: Dict[str, Any] = {}

    def target():
        try:
            outcome["value"] = run()
        except BaseException as error:  # noqa: BLE001 (handed to the caller's thread)
            outcome["error"] = error

    thread = threading.Thread(target=target, name="hosts_agree", daemon=True)
    thread.start()
    deadline = time.monotonic() + wait_secs + 10
    while True:
        thread.join(_POLL_SECS)
        if "value" in outcome:
            return outcome["value"]
        lost = cluster_lib.unreachable_hosts(cluster, timeout_secs=2.0)
        if lost:
            raise cluster_lib.ClusterError(
                "{} on the cluster failed: host {} stopped answering before the hosts compared their settings (its "
                "process ended: its own output says why). Fix that host's failure, then start every host's process "
                "again with the same TF_CONFIG.".format(what, ", ".join(cluster.describe(h) for h in lost))
            )
        if not thread.is_alive() or time.monotonic() > deadline:
            break
    error = outcome.get("error")
    detail = "" if error is None else " ({}: {})".format(type(error).__name__, _first_line(error))
    raise cluster_lib.ClusterError(
        "{} on the cluster failed before its first step: the hosts could not compare their settings{}. Every host "
        "answers: is a host still busy before its call, or does its program not make this call? The hosts wait for "
        "each other {:.0f} s at most (the environment variable {}). Start every host's process again with the same "
        "TF_CONFIG.".format(what, detail, wait_secs, cluster_lib.HOSTS_WAIT_ENV)
    ) from (error if isinstance(error, Exception) else None)


# Lines of a TensorFlow error's message that say where, not what.
_WHERE = ("Graph execution error", "Detected at node", "File ", "Node:", "From /job", "[[", "defined at")


def _first_line(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error)
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(_WHERE)]
    return lines[0] if lines else ""


def _pack(text: str, length: int) -> np.ndarray:
    data = text.encode("utf-8")[:length].ljust(length, b"\0")
    return np.frombuffer(data, dtype=np.int64)


def _unpack(row: np.ndarray, size: int) -> str:
    return row.astype(np.int64).tobytes()[:size].decode("utf-8", errors="replace")


def _describe_difference(name: str, texts: Sequence[str], cluster: cluster_lib.Cluster) -> str:
    """`name`: each group of hosts with its value (for line lists, the lines only some hosts have)."""
    groups: Dict[str, List[int]] = {}
    for host, text in enumerate(texts):
        groups.setdefault(text, []).append(host)
    ordered = sorted(groups.items(), key=lambda item: item[1][0])

    def hosts_named(hosts: List[int]) -> str:
        return "host{} {}".format("s" if len(hosts) > 1 else "", ", ".join(cluster.task(h) for h in hosts))

    if "\n" not in "".join(groups) and all(len(t) < 300 for t in groups):
        parts = ["{} has {!r}".format(hosts_named(hosts), text) for text, hosts in ordered]
        return "{} differs: {}".format(name, ", ".join(parts))
    # Multi-line fields (variables, tables): what each group has that the first group (the chief's) has not.
    reference = set(ordered[0][0].splitlines())
    parts = []
    for text, hosts in ordered[1:]:
        lines = set(text.splitlines())
        parts.append(
            "{} has {} where {} has {}".format(
                hosts_named(hosts),
                _some(sorted(lines - reference)),
                hosts_named(ordered[0][1]),
                _some(sorted(reference - lines)),
            )
        )
    return "{} differ: {}".format(name, "; ".join(parts))


def _some(lines: List[str], most: int = 4) -> str:
    if not lines:
        return "nothing more"
    shown = ", ".join(repr(line) for line in lines[:most])
    return shown + (" and {} more".format(len(lines) - most) if len(lines) > most else "")


def agree(
    cluster: cluster_lib.Cluster,
    config: tf.compat.v1.ConfigProto,
    what: str,
    host_fields: List[Tuple[str, str]],
    wait_secs: Optional[float] = None,
) -> None:
    """Compares this host's `host_fields` with every other host's; returns when they are equal on every host.

    Args:
      cluster: a cluster of one process per host.
      config: the session config (with the collective group leader).
      what: the call, for the errors ("train()").
      host_fields: this host's `fields(...)`.
      wait_secs: how long the hosts may reach the agreement apart (default `cluster.hosts_wait_secs()`).

    Raises:
      HostsDisagreeError: a field differs between the hosts (every host raises it, naming the fields, the hosts and
        their values).
      ClusterError: a host stopped answering before the comparison, or did not reach it within `wait_secs`.
    """
    wait_secs = cluster_lib.hosts_wait_secs() if wait_secs is None else wait_secs
    digests = np.zeros([2 * NUM_SLOTS], np.int64)
    for slot, (_, text) in enumerate(host_fields):
        digests[slot] = _digest(text)
        digests[NUM_SLOTS + slot] = len(text.encode("utf-8"))
    table = _bounded(cluster, what, _gather(cluster, config, digests, wait_secs), wait_secs)
    differing = [slot for slot in range(NUM_SLOTS) if len(set(table[:, slot].tolist())) > 1]
    if not differing:
        return
    # Every host found the same differing slots and lengths: the texts' gather has the same shape on every host.
    sizes = [min(int(table[:, NUM_SLOTS + slot].max()), _MAX_TEXT_BYTES) for slot in differing]
    padded = [(size + 7) // 8 * 8 for size in sizes]
    texts_of = dict(host_fields)
    names = [host_fields[slot][0] if slot < len(host_fields) else "field {}".format(slot) for slot in differing]
    mine = np.concatenate(
        [_pack(texts_of.get(name, ""), length) for name, length in zip(names, padded)] or [np.zeros([0], np.int64)]
    )
    gathered = _bounded(cluster, what, _gather(cluster, config, mine, wait_secs), wait_secs)
    differences, advice = [], []
    offset = 0
    for slot, name, length in zip(differing, names, padded):
        words = length // 8
        texts = [
            _unpack(gathered[h, offset : offset + words], int(table[h, NUM_SLOTS + slot]))
            for h in range(cluster.num_hosts)
        ]
        offset += words
        differences.append(_describe_difference(name, texts, cluster))
        if _ADVICE.get(name) and _ADVICE[name] not in advice:
            advice.append(_ADVICE[name])
    raise HostsDisagreeError(
        "{} on the cluster refused before its first step: the hosts of this job (one process per host) do not agree. "
        "{}. What to do: {}; then start every host's process again.".format(
            what, ". ".join(differences), "; ".join(advice)
        )
    )


def fields_of_call(
    what: str,
    config: Any,
    num_shards: int,
    batch_sizes: Dict[str, Optional[int]],
    embedding_config_spec: Any,
) -> Callable[[tf.Graph], List[Tuple[str, str]]]:
    """`fields_of_graph(graph)` for one call of a `TPUEstimator`: its settings now, its graph once built.

    Args:
      what: the call ("train()").
      config: the estimator's `RunConfig`.
      num_shards: the job's shards (every host's).
      batch_sizes: the estimator's global batch sizes, by argument name.
      embedding_config_spec: the estimator's `EmbeddingConfigSpec`, or None.
    """
    tpu_config = config.tpu_config
    tpu_text = "num_shards={} iterations_per_loop={} per_host_input_for_training={} eval_input={}".format(
        num_shards,
        tpu_config.iterations_per_loop,
        input_pipeline_config_name(tpu_config.per_host_input_for_training),
        input_pipeline_config_name(tpu_config.eval_training_input_configuration),
    )
    tables = embedding_tables_text(
        embedding_spec.resolve_embedding_config(embedding_config_spec) if embedding_config_spec else None
    )
    return lambda graph: fields(what, config.model_dir, batch_sizes, tpu_text, graph, tables)


class HostsAgree(tf.compat.v1.train.SessionRunHook):
    """Before the call's session is created: the hosts agree on the call's fingerprint (`agree`).

    Args:
      cluster: a cluster of one process per host.
      config: the session config.
      what: the call ("train()", "evaluate()", "predict()").
      fields_of_graph: `fields_of_graph(graph)`: this host's fingerprint of the built graph.

    Raises:
      HostsDisagreeError, ClusterError (from `begin`): see `agree`.
    """

    def __init__(
        self,
        cluster: cluster_lib.Cluster,
        config: tf.compat.v1.ConfigProto,
        what: str,
        fields_of_graph: Callable[[tf.Graph], List[Tuple[str, str]]],
    ):
        self._cluster = cluster
        self._config = config
        self._what = what
        self._fields_of_graph = fields_of_graph

    def begin(self) -> None:
        agree(self._cluster, self._config, self._what, self._fields_of_graph(tf.compat.v1.get_default_graph()))
