"""The few `tensorflow.python` internals the estimator needs, each wrapped once here.

Everything else in `tpu_estimator` uses public TensorFlow APIs. The process-wide changes of TensorFlow's module state
are made here only, each by a context manager that undoes it when the last caller leaves (`_ProcessWidePatch`):
`v1_control_flow`, `cross_replica_sum_as_ours`, `without_session_recovery`.
"""

import contextlib
import threading
from typing import Any, Callable, ContextManager, Iterator, List, Optional, Sequence

import tensorflow as tf
from tensorflow.python.ops import control_flow_util, resource_variable_ops
from tensorflow.python.ops import variable_scope as _variable_scope
from tensorflow.python.tpu import tpu_function
from tensorflow.python.tpu.ops import tpu_ops
from tensorflow.python.training import evaluation as _evaluation
from tensorflow.python.training.saving import saveable_object as _saveable_object

from tpu_estimator import graph_walk

VARSTORE_KEY = _variable_scope._VARSTORE_KEY


class _ProcessWidePatch(object):
    """A module attribute of TensorFlow replaced while any caller is inside `applied` (nesting and threads counted):
    the first caller in sets it, the last one out puts the original back.

    Args:
      owner: returns the module (imported when first needed).
      name: the attribute.
    """

    def __init__(self, owner: Callable[[], Any], name: str):
        self._owner = owner
        self._name = name
        self._lock = threading.Lock()
        self._depth = 0
        self._original = None

    @contextlib.contextmanager
    def applied(self, value: Callable[[], Any]) -> Iterator[None]:
        """Within the block, the attribute is `value()` (called by the first caller in; later callers share it)."""
        owner = self._owner()
        with self._lock:
            if self._depth == 0:
                self._original = getattr(owner, self._name)
                setattr(owner, self._name, value())
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    setattr(owner, self._name, self._original)
                    self._original = None


def _monitored_session_module():
    from tensorflow.python.training import monitored_session

    return monitored_session


_CROSS_REPLICA_SUM = _ProcessWidePatch(lambda: tpu_ops.gen_tpu_ops, "cross_replica_sum")
_CONTROL_FLOW_V2 = _ProcessWidePatch(lambda: control_flow_util, "ENABLE_CONTROL_FLOW_V2")
_PREEMPTION_ERRORS = _ProcessWidePatch(_monitored_session_module, "_PREEMPTION_ERRORS")


def copy_variable_store(collections: dict):
    """A new `get_variable` store that knows the variables of the store in `collections` (if any)."""
    store = _variable_scope._VariableStore()
    existing = collections.get(VARSTORE_KEY)
    if existing:
        store._vars = dict(existing[0]._vars)
        store._partitioned_vars = dict(existing[0]._partitioned_vars)
    return store


@contextlib.contextmanager
def variable_creator_stack(graph: tf.Graph, stack: list) -> Iterator[None]:
    """Gives the current thread the variable creator stack captured from another thread."""
    old = graph._variable_creator_stack
    graph._variable_creator_stack = list(stack)
    try:
        yield
    finally:
        graph._variable_creator_stack = old


@contextlib.contextmanager
def tpu_shard_context(num_shards: int) -> Iterator[None]:
    """Sets the (thread-local) shard count that upstream's CrossShardOptimizer reads."""
    context = tpu_function.get_tpu_context()
    old = context.number_of_shards
    context.set_number_of_shards(num_shards)
    try:
        yield
    finally:
        context.set_number_of_shards(old)


def cross_replica_sum_as_ours(ours: Callable) -> ContextManager[None]:
    """Routes upstream's `cross_replica_sum` op (no CPU/GPU kernel) to `ours` while replicas are built.

    `tf.compat.v1.tpu.cross_replica_sum` and upstream's `CrossShardOptimizer` both end in
    `gen_tpu_ops.cross_replica_sum`, which we replace for the duration (process-wide: `_ProcessWidePatch`).
    """

    def routed(input, group_assignment, name=None):
        return ours(input, _groups_as_list(group_assignment), name)

    return _CROSS_REPLICA_SUM.applied(lambda: routed)


def _groups_as_list(group_assignment):
    if group_assignment is None:
        return None
    if isinstance(group_assignment, (tf.Tensor, tf.Variable)):
        group_assignment = tf.get_static_value(group_assignment)
        if group_assignment is None:
            raise ValueError("group_assignment of cross_replica_sum must be a constant.")
    return [list(map(int, group)) for group in group_assignment]


def nccl_all_sum(values: Sequence[tf.Tensor], devices: Sequence[str]) -> List[tf.Tensor]:
    """NCCL all-reduce sum of one tensor per GPU."""
    from tensorflow.python.ops import nccl_ops

    placed = []
    for value, device in zip(values, devices):
        with tf.device(device):
            placed.append(tf.identity(value))
    return nccl_ops.all_sum(placed)


# TF1 `Saver` objects that save what is not a variable (the training input's position, `input_position.py`).
SaveableObject = _saveable_object.SaveableObject
SaveSpec = _saveable_object.SaveSpec


def v1_control_flow() -> ContextManager[None]:
    """Builds `tf.compat.v1.while_loop`/`cond` as TF1 dataflow control flow for the duration.

    The training loop needs TF1 loops: the loop body holds whole replicas, with `tf.gradients`, optimizer updates
    of resource variables, and Python-side collections, and a session prunes what replica 0 does not need.
    Process-wide (`_ProcessWidePatch`, counted over nesting and threads): on a cluster built from one client the
    replica threads of `build_replicas` build inside it.
    """
    return _CONTROL_FLOW_V2.applied(lambda: False)


def summary_writer_initializer_ops() -> list:
    """The initialisers of the `tf.compat.v2.summary` writers created in the default graph."""
    from tensorflow.python.ops import summary_ops_v2

    return summary_ops_v2.summary_writer_initializer_op()


def summary_writer_flush_ops(init_ops: list) -> list:
    """Flush ops for the writers whose initialisers are `init_ops`."""
    from tensorflow.python.ops import summary_ops_v2

    return [summary_ops_v2.legacy_raw_flush(writer=op.inputs[0]) for op in init_ops]


_VARIABLE_WRITE_PREFIXES = ("Assign", "ResourceApply", "ResourceSparseApply", "ResourceScatter")


def order_variable_writes_after(tensors, candidate_ops) -> int:
    """Makes the variable writes among `candidate_ops` wait for `tensors`, unless they feed them.

    On a TPU, every variable read inside a step sees the value from before the step, so a `host_call` that is
    passed `global_step` sees the step being run. In a dataflow graph the read races with the update; this adds
    control edges from the host-call tensors to the writes (skipping writes the tensors depend on).

    Returns:
      The number of writes that were ordered.
    """
    roots = [t.op if hasattr(t, "op") else t for t in tensors]
    ancestors = set(graph_walk.ancestor_ops(roots))
    graph = roots[0].graph if roots else None
    initializers = set()
    if graph is not None:
        for key in (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.LOCAL_VARIABLES):
            initializers.update(v.initializer for v in graph.get_collection(key))
    context = roots[0]._get_control_flow_context() if roots else None
    count = 0
    for op in candidate_ops:
        if (
            op in ancestors
            or op in initializers
            or not op.type.startswith(_VARIABLE_WRITE_PREFIXES)
            or op._get_control_flow_context() is not context
        ):
            continue
        op._add_control_inputs(roots)
        count += 1
    return count


def is_tpu_embedding_column(column) -> bool:
    """Whether `column` comes from `tf.tpu.experimental.embedding_column` / `shared_embedding_columns`."""
    from tensorflow.python.tpu import feature_column as tpu_fc
    from tensorflow.python.tpu import feature_column_v2 as tpu_fc_v2

    classes = (
        tpu_fc._TPUEmbeddingColumn,
        tpu_fc._TPUSharedEmbeddingColumn,
        tpu_fc_v2._TPUEmbeddingColumnV2,
        tpu_fc_v2._TPUSharedEmbeddingColumnV2,
    )
    return isinstance(column, classes)


def categorical_input_keys(categorical_column) -> list:
    """The input feature keys a categorical column reads."""
    spec = getattr(categorical_column, "parse_example_spec", None)
    if spec is None:
        spec = categorical_column._parse_example_spec
    return list(spec)


def categorical_ids(categorical_column, features: dict):
    """`(ids, weights)` SparseTensors of a categorical column on raw `features` (weights may be None).

    Raises:
      ValueError: the column needs a lookup table (vocabulary columns), which cannot be built per step.
    """
    from tensorflow.python.feature_column import feature_column_v2 as fc_lib

    name = type(categorical_column).__name__
    inner = getattr(categorical_column, "categorical_column", None)
    while inner is not None:
        name = type(inner).__name__
        inner = getattr(inner, "categorical_column", None)
    if "Vocabulary" in name:
        raise ValueError(
            "TPU embedding column over {} ({}): vocabulary lookups cannot run in the training loop. Map strings to "
            "ids in input_fn (e.g. with a tf.lookup table in Dataset.map) and use "
            "categorical_column_with_identity.".format(categorical_column.name, name)
        )
    cache = fc_lib.FeatureTransformationCache(features)
    pair = categorical_column.get_sparse_tensors(cache, None)
    return pair.id_tensor, pair.weight_tensor


def embedding_variable_scopes(graph: tf.Graph) -> dict:
    """`{embedding var name: (scope name, var name)}` that TPU embedding columns recorded in `model_fn`.

    Upstream's columns record where their CPU-path variable would live, so TPU checkpoints use CPU names.
    """
    from tensorflow.python.tpu import feature_column as tpu_fc

    collection = graph.get_collection(tpu_fc._TPU_FC_TO_SCOPE)
    return dict(collection[0]) if collection else {}


def clear_embedding_variable_scopes(graph: tf.Graph) -> None:
    from tensorflow.python.tpu import feature_column as tpu_fc

    graph.clear_collection(tpu_fc._TPU_FC_TO_SCOPE)


def mark_for_xla_compilation(ops) -> None:
    """Asks TensorFlow's XLA auto-clustering to compile `ops` (what `tf.xla.experimental.jit_scope` marks).

    Ops XLA cannot compile (input, queues, summaries) stay TensorFlow ops; each device gets its own clusters.
    """
    from tensorflow.core.framework import attr_value_pb2

    for op in ops:
        op._set_attr("_XlaCompile", attr_value_pb2.AttrValue(b=True))
        scope = op.device or "host"
        op._set_attr("_XlaScope", attr_value_pb2.AttrValue(s=scope.encode()))


def set_colocation(op: tf.Operation, names: Sequence[bytes]) -> None:
    """Sets the op's colocation list (its `_class` attribute of `b"loc:@<op name>"` entries)."""
    from tensorflow.core.framework import attr_value_pb2

    op._set_attr("_class", attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(s=list(names))))


def chrome_trace(step_stats) -> str:
    """The Chrome trace (JSON text, chrome://tracing) of a `RunMetadata`'s `step_stats`."""
    from tensorflow.python.client import timeline

    return timeline.Timeline(step_stats).generate_chrome_trace_format()


def variable_reading_through(variable, read: Callable[[], tf.Tensor]):
    """A second Python object for the same resource variable whose dense reads call `read`, or None.

    The view shares the variable's handle, initializer and everything else; only `value()` (which conversion to
    a tensor, e.g. by `tf.matmul`, calls) returns `read()` instead of a new `ReadVariableOp`. Gradients with
    respect to the view are gradients with respect to the variable (the same handle). `read_value()`,
    `sparse_read()` and assignments are the variable's own. None for anything that is not a plain resource
    variable (reference variables, wrappers such as mixed-precision variables).
    """
    if type(variable) is not resource_variable_ops.ResourceVariable:
        return None
    view = object.__new__(type(variable))
    view.__dict__.update(variable.__dict__)
    view.value = read
    return view


@contextlib.contextmanager
def without_control_dependencies(graph: tf.Graph) -> Iterator[None]:
    """Builds ops with no control dependencies, in the current control-flow context (loop or cond).

    `graph.control_dependencies(None)` also leaves the control-flow context; this stays in it.
    """
    context = control_flow_context(graph)
    with graph.control_dependencies(None):
        set_control_flow_context(graph, context)
        yield


# ---- graph state that has no public API ----------------------------------------------------------------------------


def graph_collections(graph: tf.Graph) -> dict:
    """The graph's collections dict itself (`{key: list}`), to be swapped per replica while replicas are built."""
    return graph._collections


def set_graph_collections(graph: tf.Graph, collections: dict) -> None:
    graph._collections = collections


def control_flow_context(graph: tf.Graph):
    """The graph's current (TF1) control-flow context: None at the root, else the innermost loop/cond."""
    return graph._get_control_flow_context()


def set_control_flow_context(graph: tf.Graph, context) -> None:
    graph._set_control_flow_context(context)


def variable_creator_stack_of(graph: tf.Graph) -> list:
    """A copy of the current thread's variable creator stack of `graph` (see `variable_creator_stack`)."""
    return list(graph._variable_creator_stack)


def get_or_create_eval_step() -> tf.Variable:
    """The Estimator's evaluation step counter (`tensorflow.python.training.evaluation`, which both Estimator
    cores use to stop evaluation after `steps`)."""
    return _evaluation._get_or_create_eval_step()


@contextlib.contextmanager
def outside_control_flow(graph: Optional[tf.Graph] = None) -> Iterator[None]:
    """Builds ops in the graph's root control-flow context, for the duration, from inside a TF1 loop or cond.

    A queue created while a loop body is traced must live outside the loop (once per graph, not per iteration);
    its enqueue and dequeue ops are then built back in the loop.
    """
    graph = graph or tf.compat.v1.get_default_graph()
    context = control_flow_context(graph)
    set_control_flow_context(graph, None)
    try:
        yield
    finally:
        set_control_flow_context(graph, context)


def without_session_recovery() -> ContextManager[None]:
    """`MonitoredSession` raises Aborted/Unavailable errors instead of re-creating its session.

    Its recovery (meant for preempted parameter servers) retries session creation for as long as a worker is down;
    on a cluster a lost host must surface as an error the caller can act on (cluster.py). Process-wide while any
    caller is inside (`_ProcessWidePatch`).
    """
    return _PREEMPTION_ERRORS.applied(lambda: ())


def variable_value(variable) -> tf.Tensor:
    """A tensor of `variable`'s current value, reusing the read op its constructor built where it can.

    A graph variable keeps the read it built at its creation (`_graph_element`: a resource variable's
    `Read/ReadVariableOp`, a reference variable's snapshot); each `value()` of a resource variable would add one
    more. That read is used only when it was built at the graph's root (not inside a loop or a cond branch).
    """
    element = getattr(variable, "_graph_element", None)
    if isinstance(element, tf.Tensor) and element.op._get_control_flow_context() is None:
        return element
    return variable.value() if hasattr(variable, "value") else tf.convert_to_tensor(variable)


# ---- copying ops (replicas traced once, `stamping.py`) --------------------------------------------------------------


def op_id(op: tf.Operation) -> int:
    """The op's position in its graph's creation order (increasing, unique in the graph)."""
    return op._id


def op_control_flow_context(op: tf.Operation):
    """The (TF1) control-flow context the op was built in, or None at the root."""
    return op._get_control_flow_context()


def adopt_into_control_flow_context(op: tf.Operation, context) -> None:
    """Puts a copied op in `context` as if built there: later ops of the context use its outputs as its own.

    The op's inputs must already be valid in the context (a copy of an op of the context, whose inputs were
    entered when the original was built).
    """
    op._set_control_flow_context(context)
    add_values_to_control_flow_context(context, [output.name for output in op.outputs])


def add_values_to_control_flow_context(context, tensor_names: Sequence[str]) -> None:
    """Makes `context` (and its outer contexts) take these tensors as built inside it (none are entered again)."""
    while context is not None:
        context._values.update(tensor_names)
        context = context.outer_context


def while_frame_name(context) -> Optional[str]:
    """The frame name of a TF1 while loop's context (the `frame_name` of its `Enter` ops), or None."""
    return getattr(context, "name", None) if type(context).__name__ == "WhileContext" else None


def graph_device_scope_depth(graph: tf.Graph) -> int:
    """How many device scopes ops built now are in."""
    return len(graph._snapshot_device_function_stack_metadata())


def device_scope_depth(op: tf.Operation) -> int:
    """How many device scopes the op was built in (0 under a colocation, which sets the device itself)."""
    return len(op._device_code_locations or ())


def update_input(op: tf.Operation, index: int, tensor: tf.Tensor) -> None:
    """Makes `tensor` the op's input `index` (the graph edge is replaced)."""
    op._update_input(index, tensor)


def add_control_inputs(op: tf.Operation, control_inputs: Sequence[tf.Operation]) -> None:
    op._add_control_inputs(list(control_inputs))


def parse_checkpoint_state(text: str):
    """The `CheckpointState` proto of the text of a `checkpoint` state file (TensorFlow's public API reads it only
    through `tf.train.get_checkpoint_state`, which logs and returns None when it does not parse).

    Raises:
      google.protobuf.text_format.ParseError: the text does not parse.
    """
    from google.protobuf import text_format
    from tensorflow.python.training import checkpoint_state_pb2

    state = checkpoint_state_pb2.CheckpointState()
    text_format.Merge(text, state)
    return state


_close_lock = threading.Lock()
_close_depth = 0
_original_close = None


@contextlib.contextmanager
def bounded_remote_session_close(timeout_secs: float) -> Iterator[None]:
    """`Session.close()` of a remote (`grpc://`) session returns after at most `timeout_secs`.

    Closing sends `CloseSession` to the session's master and waits for the master to be reachable again (gRPC
    wait-for-ready) up to the session's operation timeout, and on a lost master (task 0) the close of a
    `MonitoredSession` then blocks the error that names the lost host. The close runs in a daemon thread, which
    ends when the master answers or its deadline passes. Local sessions close as before. Process-wide while any
    caller is inside (nesting and threads counted).
    """
    global _close_depth, _original_close
    from tensorflow.python.client import session as session_lib

    with _close_lock:
        if _close_depth == 0:
            _original_close = original = session_lib.BaseSession.close

            def close(self):
                target = self.sess_str.decode() if isinstance(self.sess_str, bytes) else str(self.sess_str)
                if not target.startswith("grpc://"):
                    return original(self)
                thread = threading.Thread(target=original, args=(self,), name="remote_session_close", daemon=True)
                thread.start()
                thread.join(timeout_secs)
                if thread.is_alive():
                    tf.get_logger().warning(
                        "Closing the session on %s did not end within %.0f s (its master is unreachable); left to "
                        "end in the background.",
                        target,
                        timeout_secs,
                    )

            session_lib.BaseSession.close = close
        _close_depth += 1
    try:
        yield
    finally:
        with _close_lock:
            _close_depth -= 1
            if _close_depth == 0:
                session_lib.BaseSession.close = _original_close


def summary_ops_v2():
    """TensorFlow's graph-mode summary API (`summary_ops_v2`), which TF1 programs know as `tf.contrib.summary`."""
    from tensorflow.python.ops import summary_ops_v2 as module

    return module


def is_lazy_loader(obj: Any) -> bool:
    """Whether `obj` is one of TensorFlow's lazily loaded modules (a `LazyLoader`: it copies its module's names into
    itself when it loads)."""
    return hasattr(type(obj), "_load")


def loaded_module(obj: Any) -> Any:
    """`obj`, or the module it stands for when it is one of TensorFlow's lazily loaded modules (a `LazyLoader`,
    which its parent replaces by the real module once loaded)."""
    if is_lazy_loader(obj):
        return obj._load()
    return obj


def is_module_wrapper(obj: Any) -> bool:
    """Whether `obj` is one of TensorFlow's API module wrappers (`tf`, `tf.compat.v1`, ...: deprecation warnings and
    lazily imported names around the module they wrap)."""
    return hasattr(obj, "_tfmw_wrapped_module")


def module_wrapper_attribute(wrapper: Any, name: str, missing: Any) -> Any:
    """The attribute `name` of an API module wrapper as the wrapped module holds it, without the wrapper's
    deprecation warning; a lazily imported public name imported as the wrapper would; `missing` when it has none."""
    wrapped = wrapper._tfmw_wrapped_module
    if name in wrapped.__dict__:
        return wrapped.__dict__[name]
    if name in (wrapper._tfmw_public_apis or {}):
        return wrapper._tfmw_import_module(name)
    return missing


def module_wrapper_remove(wrapper: Any, name: str) -> None:
    """Removes the attribute `name` from an API module wrapper: from the wrapped module, the wrapper and the wrapper's
    attribute cache."""
    wrapper._tfmw_wrapped_module.__dict__.pop(name, None)
    wrapper.__dict__.pop(name, None)
    if wrapper._fastdict_key_in(name):
        wrapper._fastdict_pop(name)


def dataset_variant(dataset: Any) -> Optional[tf.Tensor]:
    """The variant tensor a graph-mode `tf.data.Dataset` is built on (None when it has none)."""
    return getattr(dataset, "_variant_tensor", None)


def iterator_resource(iterator: Any) -> tf.Tensor:
    """The resource handle of a TF1 `tf.compat.v1.data.Iterator` (for `SerializeIterator`/`DeserializeIterator`)."""
    return iterator._iterator_resource
