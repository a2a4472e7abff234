"""The product's state parked beside the values it hands around, listed with a reason each: module-level objects that
hold state (thread-locals, weak dicts, counters, locks, caches, instances of a module's own classes), module-level
containers a function changes, `global` statements, and graph-collection uses (`tests/helpers/module_state.py`
finds them in the source). A new one fails here: hand the value instead (a constructor argument, a return value, a
typed result), or list it with why it cannot be handed."""

from typing import Dict

from tests.helpers.module_state import module_state
from tests.helpers.modules import product_modules, relative

_GRAPH_KEYS = "tf.compat.v1.GraphKeys."

# path -> finding -> why it is kept rather than handed.
STATE: Dict[str, Dict[str, str]] = {
    # ---- process-wide by nature: TensorFlow's own module state, the process's server, its launcher ----------------
    "tpu_estimator/_tf_internal.py": {
        "_CROSS_REPLICA_SUM = _ProcessWidePatch()": "upstream's CrossShardOptimizer calls TensorFlow's module "
        "function: routed to ours while replicas are built, counted over nesting and threads",
        "_CONTROL_FLOW_V2 = _ProcessWidePatch()": "TensorFlow's control-flow switch is a module flag: v1 loops while "
        "a loop is built, counted over nesting and threads",
        "_PREEMPTION_ERRORS = _ProcessWidePatch()": "MonitoredSession's module tuple: no session recovery while a "
        "caller is inside, counted",
        "_close_lock = threading.Lock": "guards the counted patch of Session.close (bounded remote close)",
        "global _close_depth": "callers inside the bounded remote close (the patch is undone by the last)",
        "global _original_close": "Session.close as it was before the bounded remote close patched it",
        "clear_collection(tpu_fc._TPU_FC_TO_SCOPE)": "TensorFlow's TPU feature columns keep their scopes in this "
        "collection: cleared once per bridge, after the loop",
        "get_collection(tpu_fc._TPU_FC_TO_SCOPE)": "the TPU feature columns' scopes TensorFlow parks there",
        "get_collection(key)": "the variables whose initializers the step must not wait for (GLOBAL/LOCAL_VARIABLES)",
    },
    "tpu_estimator/compat/patching.py": {
        "_lock = threading.Lock": "install()/uninstall() change TensorFlow's namespaces for the process",
        "global _patches": "what install() changed, for uninstall() (process-wide by the API's contract)",
        "_added_modules changed by a function": "the legacy module paths install() added to sys.modules, removed by "
        "uninstall()",
    },
    "tpu_estimator/compat/launcher.py": {
        "global _running": "the launcher runs the user's program in this process: TPUEstimators built by it (with no "
        "handle to the launcher) announce their shards",
        "_announced changed by a function": "each shards line is printed once per launcher run, whichever "
        "TPUEstimator prints it",
    },
    "tpu_estimator/hosts/cluster.py": {
        "_host_servers changed by a function": "one tf.distribute.Server per process and host: TensorFlow cannot "
        "start a second on the port, and every TPUEstimator of the process uses it",
        "_ANSWERED changed by a function": "whether this process has had a session with the cluster (the first "
        "waits for starting hosts; later ones check no host is lost), across estimators and calls",
    },
    "tpu_estimator/modes/host_agreement.py": {
        "_instance_keys = itertools.count": "the agreement's collective instance keys, apart from the graphs' (it runs "
        "in a graph of its own before each call's session), advancing identically on every host",
        "_instance_keys_lock = threading.Lock": "guards the agreement's instance-key counter",
        "get_collection(key)": "the graph's variables (GLOBAL/LOCAL_VARIABLES) are what the hosts fingerprint",
        "get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)": "which fingerprinted variables are trainable",
    },
    "tpu_estimator/compat/tpu_hosts.py": {
        "global _joined": "a TF2 program's first TPU call joins the hosts' job once per process (the client connects "
        "to the cluster, TensorFlow's process-wide remote context); later calls get the same devices",
    },
    "tpu_estimator/app/cli.py": {
        "_RUNNING changed by a function": "the command running in this process, for the Ctrl-C line (a signal "
        "handler's thread has no other handle to it)",
    },
    "tpu_estimator/hosts/collectives.py": {
        "_instance_keys = itertools.count": "collective instance keys must be unique in the process and advance "
        "identically on every host (each host builds the same graphs in the same order)",
        "_instance_keys_lock = threading.Lock": "guards the instance-key counter (graphs built in several threads)",
    },
    "tpu_estimator/hosts/shard_devices.py": {
        "num_gpus cached (functools.lru_cache)": "listing the GPUs initialises them once per process; the answer "
        "does not change",
    },
    # ---- ambient scopes a user's code reads without a handle --------------------------------------------------------
    "tpu_estimator/replicas/replica_context.py": {
        "_current = threading.local": "model_fn calls cross_replica_sum/CrossShardOptimizer with no handle: the "
        "replica being built (and its coordinator) is the scope of the thread building it",
    },
    "embedding/graph_constants.py": {
        "_state = threading.local": "`sharing()`/`placed(device)` scopes: the engine's calls deep in a build share "
        "constants without threading a cache through every function, per thread",
    },
    "tpu_estimator/inputs/input_position.py": {
        "_MARKED = weakref.WeakKeyDictionary": "checkpoint_position(dataset) is public API returning the dataset "
        "itself: the mark is kept per graph (weakly) until the input pipeline reads it",
        "add_to_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)": "the Saver (made by the Estimator's "
        "Scaffold) finds what it saves besides variables there",
    },
    "embedding/config.py": {
        "_CONVERTED = weakref.WeakKeyDictionary": "upstream config objects converted once, so that a table shared by "
        "features (converted by separate public calls) stays one table",
    },
    # ---- TensorFlow's graph collections: where TensorFlow (Saver, Scaffold, initialisers) reads -----------------------
    "embedding/checkpointing.py": {
        "_RESOURCE_FILTER = _ResourceSerializationFilter()": "one logging filter added once to TensorFlow's logger",
        "add_to_collection(SHARD_VARIABLES_COLLECTION)": "TF1 graphs: a Saver and meta-graph export find the shard "
        "variables in this collection (registered to serialize as variables)",
        "get_collection(SHARD_VARIABLES_COLLECTION)": "the shard variables of a TF1 graph, for its Saver",
        "register_variable_collection(SHARD_VARIABLES_COLLECTION)": "meta graphs export and import the collection as "
        "variables",
        "add_to_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)": "the Saver reads its saveables there",
    },
    "tpu_estimator/replicas/replication.py": {
        "add_to_collection(key)": "a replica's own view of the collections lists a variable as replica 0's did "
        "(optimizers read them)",
        "get_collection(key)": "the same, checked before adding",
        "graph_collections(graph)": "collections are per replica while replicas are built (model_fn writes them)",
        "graph_collections(self.graph)": "the same, kept when a replica's thread hands over",
        "set_graph_collections(graph)": "the same, merged back after the build",
        "set_graph_collections(self.graph)": "the same, swapped in when a replica's thread resumes",
    },
    "tpu_estimator/modes/eval_loop.py": {
        "add_to_collection(key)": "metric variables moved to LOCAL/METRIC_VARIABLES, where the Estimator's "
        "evaluation initialises them",
        "get_collection(key)": "the same, checked before adding",
        "get_collection_ref(key)": "the same, removed from GLOBAL/TRAINABLE_VARIABLES",
    },
    "tpu_estimator/hosts/mirrored_variables.py": {
        "add_to_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES)": "a host's local copy of the dense variables is "
        "initialised by the session's local init",
        "get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)": "the dense variables the chief saves",
        "get_collection_ref(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)": "the local copies leave the saved set",
    },
    "tpu_estimator/checkpoints/finite_checkpoints.py": {
        "get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)": "what a checkpoint saves, checked finite",
        "get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)": "the same for saveables (embedding tables)",
    },
    "tpu_estimator/app/progress.py": {
        "get_collection(tf.compat.v1.GraphKeys.LOSSES)": "the Estimator puts train()'s loss there (its only "
        "handle for a hook of the command line)",
    },
    "tpu_estimator/estimator_core/estimator.py": {
        "add_to_collection(tf.compat.v1.GraphKeys.LOSSES)": "as upstream's Estimator: the loss for hooks",
        "add_to_collection(tf.compat.v1.GraphKeys.SAVERS)": "as upstream's Estimator: the Scaffold's saver",
        "get_collection(tf.compat.v1.GraphKeys.SAVERS)": "as upstream's Estimator: the saver of the export",
        "get_collection(tf.compat.v1.GraphKeys.SUMMARIES)": "as upstream's Estimator: the summaries written",
    },
    "tpu_estimator/estimator_core/inputs.py": {
        "get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)": "as upstream's Estimator: input_fn's queue runners",
    },
    "tpu_estimator/estimator_core/model_fn.py": {
        "add_to_collection(collection)": "as upstream's EstimatorSpec: Keras metrics' variables into "
        "LOCAL/METRIC_VARIABLES",
        "get_collection(collection)": "the same, checked before adding",
    },
    "tpu_estimator/estimator_core/saved_model_export.py": {
        "get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS)": "as upstream's export: the graph's assets",
    },
    "tpu_estimator/estimator_core/checkpoint_saver.py": {
        "get_collection(_PLUGIN_ASSETS_COLLECTION)": "TensorBoard's plugin assets, written beside the graph as "
        "upstream's hook writes them",
    },
    # ---- the command line ----------------------------------------------------------------------------------------------
    "tpu_estimator/app/data/criteo.py": {
        "_DEFAULT_COUNTER = MalformedLineCounter()": "readers given no counter log the process's first malformed "
        "lines (at most 10 in all)",
    },
    "tpu_estimator/app/models/inputs.py": {
        "_generator cached (functools.lru_cache)": "the synthetic data's generator per seed, built once (pure)",
    },
}


def _found() -> Dict[str, set]:
    return {relative(path): module_state(path.read_text()) for path in product_modules()}


def test_every_piece_of_module_state_and_graph_collection_is_listed_with_a_reason():
    unlisted = [
        "{}: {}".format(path, finding)
        for path, findings in sorted(_found().items())
        for finding in sorted(findings - set(STATE.get(path, {})))
    ]
    assert not unlisted, (
        "Module-level state or graph-collection uses not in STATE: hand the value instead (constructor argument, "
        "return value, typed result), or list it with why it cannot be handed:\n" + "\n".join(unlisted)
    )


def test_the_list_names_only_what_is_there_each_with_a_one_line_reason():
    found = _found()
    stale = [
        "{}: {}".format(path, finding)
        for path, reasons in sorted(STATE.items())
        for finding in sorted(set(reasons) - found.get(path, set()))
    ]
    assert not stale, "STATE lists what the code no longer has:\n" + "\n".join(stale)
    for path, reasons in STATE.items():
        for finding, reason in reasons.items():
            assert reason.strip() and "\n" not in reason, (path, finding)


def test_custom_collection_keys_are_few_and_named():
    """Collection keys other than TensorFlow's `GraphKeys`: the embedding shard variables' (TF1 Savers) and
    TensorBoard's plugin assets (read); no stage hands another a value through a collection of its own."""
    custom = sorted(
        "{}: {}".format(path, finding)
        for path, findings in _found().items()
        for finding in findings
        if "collection" in finding.split("(")[0]
        and "(" in finding
        and _GRAPH_KEYS not in finding
        and finding.split("(", 1)[1].rstrip(")").isupper()
    )
    assert custom == [
        "embedding/checkpointing.py: add_to_collection(SHARD_VARIABLES_COLLECTION)",
        "embedding/checkpointing.py: get_collection(SHARD_VARIABLES_COLLECTION)",
        "embedding/checkpointing.py: register_variable_collection(SHARD_VARIABLES_COLLECTION)",
        "tpu_estimator/estimator_core/checkpoint_saver.py: get_collection(_PLUGIN_ASSETS_COLLECTION)",
    ]


# ---- the finder finds what it names (planted in a module's source) -----------------------------------------------

_PLANTED = """
import functools, itertools, threading, typing, weakref
import tensorflow as tf

_LOCAL = threading.local()
_BY_GRAPH = weakref.WeakKeyDictionary()
_KEYS = itertools.count()
_SEEN = set()
_TABLE = {"a": 1}  # read only: not state
_LIMIT = 3


class Thing:
    pass


_THING = Thing()


class Point(typing.NamedTuple):  # a value: not state
    x: int


_ORIGIN = Point(0)


def remember(x):
    global _LIMIT
    _SEEN.add(x)
    _LIMIT = x


@functools.lru_cache(maxsize=None)
def expensive():
    return next(_KEYS)


def park(tensor):
    tf.compat.v1.add_to_collection("my_loop_length", tensor)
    return tf.compat.v1.get_collection("my_loop_length")
"""


def test_the_finder_finds_each_kind_of_parked_state():
    assert module_state(_PLANTED) == {
        "_LOCAL = threading.local",
        "_BY_GRAPH = weakref.WeakKeyDictionary",
        "_KEYS = itertools.count",
        "_SEEN changed by a function",
        "_THING = Thing()",
        "global _LIMIT",
        "expensive cached (functools.lru_cache)",
        "add_to_collection('my_loop_length')",
        "get_collection('my_loop_length')",
    }
