"""Logical (unsharded) checkpoint layout for sharded embedding variables.

A table and each of its optimizer slots are stored in checkpoints as ONE full tensor `[vocabulary_size, dim]`
under a configurable key, whatever the number of shards and the partition strategy used in memory. This module
builds that on the few TensorFlow internals it needs (TF1 `SaveableObject`, TF2 `Trackable` serialization, graph
resource registration; each in `embedding/_tf_internal.py`) behind a small API:

- `LogicalTensor`: a view of one logical tensor spread over shard variables. It is a `Trackable` whose
  `_serialize_to_tensors` / `_restore_from_tensors` use the full tensor under the local name `VARIABLE_VALUE` (the
  name a plain `tf.Variable` uses, so checkpoints interoperate with unsharded variables), and it produces a TF1
  `SaveableObject` (`saveable()`) saved under the exact key.
- `create_shard_variable`: a plain resource variable on an exact device, bypassing variable creator scopes
  (a distribution strategy's scope would otherwise mirror the shard on every replica device).
- `register_shard_variable`: in a TF1 graph, makes a shard variable initialised by the default `Scaffold`
  init op (and checked by its ready op) without putting it in `GLOBAL_VARIABLES`, so that the default
  `tf.compat.v1.train.Saver()` does not save the physical shards.
- `initializer_op`: the op initialising every registered shard variable of the current graph.
"""

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import tensorflow as tf

from embedding import _tf_internal

#: Graph collection holding the physical shard variables of every ShardedTable (TF1 graphs only).
SHARD_VARIABLES_COLLECTION = "tpu_estimator_embedding_shard_variables"

# Shard variables survive meta-graph export / import as variables (like GLOBAL_VARIABLES).
_tf_internal.register_variable_collection(SHARD_VARIABLES_COLLECTION)

#: Local name under which a logical tensor is serialized by `tf.train.Checkpoint` (same as tf.Variable).
VARIABLE_VALUE_KEY = _tf_internal.VARIABLE_VALUE_KEY

#: The base class of objects `tf.train.Checkpoint` saves and restores.
Trackable = _tf_internal.Trackable


def create_shard_variable(
    initial_value: Union[tf.Tensor, Callable[[], tf.Tensor]], name: str, device: Any
) -> tf.Variable:
    """Creates a non-trainable float32 resource variable on `device`, outside any graph collection.

    The variable is constructed directly (not through `tf.Variable`), so variable creator scopes, in particular
    those of `tf.distribute` strategies, do not turn it into a mirrored or per-replica variable. Call under
    `tf.init_scope()` when the caller may be inside a `tf.function`.

    Args:
      initial_value: The initial value, or a zero-argument callable returning it (run on `device`).
      name: Variable name.
      device: Device string / DeviceSpec, or None.
    """
    with tf.device(device):
        return _tf_internal.resource_variable(
            initial_value, trainable=False, name=name, dtype=tf.float32, collections=[]
        )


class _ResourceSerializationFilter(logging.Filter):
    """Drops TF's warning that the shared-resources collection cannot go into a MetaGraphDef.

    Shard variables are registered as shared resources (so the default Scaffold initialises them); every checkpoint
    then warns that this collection is not serializable, which is expected and harmless.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "Issue encountered when serializing resources" not in record.getMessage()


_RESOURCE_FILTER = _ResourceSerializationFilter()


def register_shard_variable(variable: tf.Variable) -> None:
    """Registers a physical shard variable in the current TF1 graph (no-op when executing eagerly).

    The variable goes into `SHARD_VARIABLES_COLLECTION` and is registered as a shared resource, so that the
    default `tf.compat.v1.train.Scaffold` initialises it (`init_op`) and reports it when uninitialised
    (`ready_op`). It must not be in `GLOBAL_VARIABLES`: the logical tensor is saved instead.

    Args:
      variable: A resource variable created with `collections=[]` (or any collections but GLOBAL_VARIABLES).
    """
    if tf.executing_eagerly():
        return
    graph = variable.graph
    logger = tf.get_logger()
    if _RESOURCE_FILTER not in logger.filters:
        logger.addFilter(_RESOURCE_FILTER)
    with graph.as_default():
        graph.add_to_collection(SHARD_VARIABLES_COLLECTION, variable)
        _tf_internal.register_shared_resource(variable)


def shard_variables(graph: Optional[tf.Graph] = None) -> List[tf.Variable]:
    """Returns the registered physical shard variables of `graph` (default: current graph)."""
    graph = graph or tf.compat.v1.get_default_graph()
    return list(graph.get_collection(SHARD_VARIABLES_COLLECTION))


def initializer_op(graph: Optional[tf.Graph] = None) -> tf.Operation:
    """Returns an op initialising every registered shard variable of `graph` (TF1 graphs).

    `tf.compat.v1.global_variables_initializer()` does not cover shard variables; the Estimator's default
    Scaffold does (shared resources). Plain `Session` users run this op as well.
    """
    graph = graph or tf.compat.v1.get_default_graph()
    with graph.as_default():
        return tf.group(*[v.initializer for v in shard_variables(graph)], name="embedding_shards_initializer")


def read_shard(variable: tf.Variable) -> tf.Tensor:
    """Reads a shard variable for saving without copying it.

    After a sparse update (scatter, gather-free sparse apply) a resource variable is in "copy-on-read" mode, in
    which every read copies the whole tensor: saving a checkpoint would then need a second copy of every table.
    `DisableCopyOnRead` switches the variable back (under its lock), so the read aliases the buffer; the next
    sparse update switches it on again, copying only if the read tensor is still alive (TensorFlow's own rule).
    """
    disable = getattr(tf.raw_ops, "DisableCopyOnRead", None)
    with tf.device(variable.device):
        op = disable(resource=variable.handle) if disable is not None else None
        with tf.control_dependencies([op] if op is not None else None):
            # The read op alone (`read_value()` adds an identity).
            return tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype)


_SAVER_SCOPE = "save/"  # The name scope of `tf.compat.v1.train.Saver`'s ops (its default name), absolute.


class _SavedRead:
    """The tensor a SaveSpec saves: in a graph, built once and shared by every user of the spec.

    The Saver builds its save op from `spec.tensor`, and so may others before it (the check that no checkpoint
    holds NaN or Inf): one read per graph instead of one per use. It is built at the graph's root, outside any
    control dependencies and control flow (a read op runs each time it is fetched, so it always reads the current
    value). Executing eagerly, each call reads anew.
    """

    def __init__(self, read: Callable[[], tf.Tensor]):
        self._read = read
        self._tensor: Optional[tf.Tensor] = None

    def __call__(self) -> tf.Tensor:
        if tf.executing_eagerly():
            return self._read()
        graph = tf.compat.v1.get_default_graph()
        if self._tensor is None or self._tensor.graph is not graph:
            # Named as the default Saver's own ops ("save/"), whoever builds it first (the finite-checkpoint check
            # does, before the Saver exists). An absolute scope: the Saver's `name_scope("save")` stays "save".
            with graph.control_dependencies(None), graph.name_scope(_SAVER_SCOPE):
                self._tensor = self._read()
        return self._tensor


class _LogicalSaveable(_tf_internal.SaveableObject):
    """TF1 SaveableObject saving a LogicalTensor as one full tensor under checkpoint key `key`.

    The checkpoint key is the SaveSpec name. The object's own `name` (used by the Saver only to sort and
    de-duplicate, and written to exported meta graphs for the SAVEABLE_OBJECTS collection) is the op name of the
    first shard variable, so that `tf.compat.v1.train.import_meta_graph` can resolve it (as for TF lookup tables).
    """

    def __init__(self, logical: "LogicalTensor", key: str):
        if logical.row_slices is not None:
            # One slice of the full tensor per shard: nothing is assembled on save (no full-size copy), and restore
            # reads each shard's rows only. The checkpoint still holds ONE tensor under `key` (as for a
            # partitioned variable), which every reader (RestoreV2, tf.train.load_variable) sees whole.
            rows, dim = logical.shape.as_list()
            specs = []
            for read, (offset, size) in zip(logical.saved_reads, logical.row_slices):
                specs.append(
                    _tf_internal.SaveSpec(
                        read,
                        f"{rows} {dim} {offset},{size}:-",
                        key,
                        dtype=logical.dtype,
                        device=logical.host_device,
                    )
                )  # One device per saveable (sharded Savers group by it).
        else:
            specs = [
                _tf_internal.SaveSpec(logical.saved_reads[0], "", key, dtype=logical.dtype, device=logical.host_device)
            ]
        name = key
        if not tf.executing_eagerly():
            name = logical.shards[0].handle.op.name
        super().__init__(logical, specs, name)
        self._logical = logical

    def restore(self, restored_tensors, restored_shapes):
        del restored_shapes  # The logical shape is fixed; checked in assign().
        check = _not_sparsecore_check(restored_tensors[0])
        if check is not None:
            with tf.control_dependencies([check]):
                restored_tensors = [tf.identity(t) for t in restored_tensors]
        if self._logical.row_slices is not None:
            return self._logical.assign_shards(restored_tensors)
        return self._logical.assign(restored_tensors[0])


_ATTRIBUTES = "/.ATTRIBUTES/"
_SPARSECORE_LAYOUTS = "_sparse_core_table_layouts"  # embedding.sparsecore_layout.LAYOUTS_CHECKPOINT_KEY


def _not_sparsecore_check(restored: tf.Tensor) -> Optional[tf.Tensor]:
    """For a TF1 Saver restoring an object-based checkpoint by name: a check that the object holding the key has
    no SparseCore layouts (its tables are stacked and shuffled: only `tf.train.Checkpoint` reads them, through the
    layouts); None for name-based keys (the usual case) and eagerly.
    """
    op = restored.op
    if tf.executing_eagerly() or op.type != "RestoreV2":
        return None
    names = tf.get_static_value(op.inputs[1])
    if names is None:
        return None
    key = names[restored.value_index].decode("utf-8")
    if _ATTRIBUTES not in key:
        return None
    owner = key.split(_ATTRIBUTES)[0].rpartition("/")[0]
    layouts_key = f"{owner}/{_SPARSECORE_LAYOUTS}" if owner else _SPARSECORE_LAYOUTS
    layouts_key += f"{_ATTRIBUTES}{VARIABLE_VALUE_KEY}"

    def check(prefix: tf.Tensor) -> bool:
        if tf.train.load_checkpoint(prefix.numpy().decode("utf-8")).has_tensor(layouts_key):
            raise ValueError(
                f"Checkpoint key '{key}' belongs to a SparseCore-layout checkpoint (it holds '{layouts_key}'): its "
                f"tables are stacked and shuffled. Restore it with tf.train.Checkpoint (eagerly) into an embedding "
                f"object, which reads it through its layouts; a name-based Saver would load the rows shuffled."
            )
        return True

    with tf.device("/cpu:0"):
        return tf.py_function(check, [op.inputs[0]], tf.bool, name="check_not_sparsecore")


class LogicalTensor(_tf_internal.Trackable):
    """A full `[rows, dim]` tensor stored as shard variables, saved in the logical layout.

    Args:
      key: Checkpoint key of the full tensor (TF1 Saver key; `tf.train.Checkpoint` child name chosen by the
        owner).
      shards: The shard variables, in shard order.
      shape: Logical shape `[rows, dim]`.
      assemble: `assemble(list of shard tensors) -> full tensor`.
      split: `split(full tensor) -> list of shard tensors`.
      host_device: Device on which the full tensor is assembled / split (a host CPU), or "".
      row_slices: Optional `[(first row, rows)]` per shard when the shards are contiguous row ranges of the full
        tensor (one shard, or 'div' partitioning): TF1 checkpoints then save and restore each shard as a slice of
        the logical tensor, without assembling it.
    """

    def __init__(
        self,
        key: str,
        shards: Sequence[tf.Variable],
        shape: Sequence[int],
        assemble: Callable[[List[tf.Tensor]], tf.Tensor],
        split: Callable[[tf.Tensor], List[tf.Tensor]],
        host_device: str = "",
        row_slices: Optional[Sequence[Sequence[int]]] = None,
    ):
        self.key = key
        self.shards = list(shards)
        self.shape = tf.TensorShape(shape)
        self.row_slices = None
        if row_slices is not None and len(self.shards) > 1:
            self.row_slices = [(int(o), int(n)) for o, n in row_slices]
        self.dtype = self.shards[0].dtype
        self.host_device = host_device or ""
        self._assemble = assemble
        self._split = split
        # Set by the owner for one `tf.train.Checkpoint` restore: `hook(self, restored_tensors)` restores instead.
        self.restore_hook: Optional[Callable[["LogicalTensor", Dict[str, Any]], Any]] = None
        # What a TF1 Saver saves: one read per shard (`row_slices`) or of the assembled tensor, built once per graph
        # for every saveable of this tensor.
        if self.row_slices is not None:
            self.saved_reads = [_SavedRead(lambda shard=shard: read_shard(shard)) for shard in self.shards]
        else:
            self.saved_reads = [_SavedRead(self.read)]

    def read(self) -> tf.Tensor:
        """Returns the full logical tensor (assembled on the host device)."""
        parts = [read_shard(s) for s in self.shards]
        with tf.device(self.host_device):
            return self._assemble(parts)

    def assign(self, full) -> Optional[tf.Operation]:
        """Assigns a full logical tensor to the shards. Returns an op in graph mode.

        Raises:
          ValueError: if the static shape of `full` is not the logical shape.
        """
        full = tf.convert_to_tensor(full, dtype=self.dtype)
        if not full.shape.is_compatible_with(self.shape):
            raise ValueError(
                f"Cannot restore '{self.key}': checkpoint tensor has shape {full.shape}, expected {self.shape}."
            )
        with tf.device(self.host_device):
            full = tf.ensure_shape(full, self.shape)
            parts = self._split(full)
        ops = []
        for var, part in zip(self.shards, parts):
            with tf.device(var.device):
                ops.append(var.assign(part, read_value=False))
        if tf.executing_eagerly():
            return None
        # One op after the assigns (tf.group adds a NoOp per device and one joining them: three per table and slot
        # in a Saver's restore).
        with tf.control_dependencies(ops):
            return tf.no_op()

    def assign_shards(self, parts: Sequence[tf.Tensor]) -> Optional[tf.Operation]:
        """Assigns one restored slice per shard (`row_slices` layout)."""
        ops = []
        for var, part, (_, size) in zip(self.shards, parts, self.row_slices):
            with tf.device(var.device):
                # No shape op: `RestoreV2` returns exactly the slice `[size, dim]`, and fails when the checkpoint's
                # tensor is not `[rows, dim]`.
                part = tf.convert_to_tensor(part, dtype=self.dtype)
                part.shape.assert_is_compatible_with([size, self.shape[1]])
                ops.append(var.assign(part, read_value=False))
        if tf.executing_eagerly():
            return None
        # One op after the assigns (tf.group adds a NoOp per device and one joining them: three per table and slot
        # in a Saver's restore).
        with tf.control_dependencies(ops):
            return tf.no_op()

    # TF1 tf.compat.v1.train.Saver.
    def saveable(self) -> _tf_internal.SaveableObject:
        """Returns a TF1 SaveableObject saving the full tensor under `self.key`."""
        return _LogicalSaveable(self, self.key)

    # TF2 tf.train.Checkpoint.
    def _serialize_to_tensors(self):
        return {VARIABLE_VALUE_KEY: self.read()}

    def _restore_from_tensors(self, restored_tensors):
        hook, self.restore_hook = self.restore_hook, None
        if hook is not None:
            return hook(self, restored_tensors)
        return self.assign(restored_tensors[VARIABLE_VALUE_KEY])

    def _gather_saveables_for_checkpoint(self):
        # TF1 Saver given this object directly in var_list: save under the exact key.
        return {VARIABLE_VALUE_KEY: lambda name=None: _LogicalSaveable(self, self.key)}


def take_deferred_value(trackable: Any, name: str) -> Optional[tf.Tensor]:
    """The checkpoint value of `trackable`'s child `name` that a restore found no object for, or None.

    A `tf.train.Checkpoint` restore keeps each checkpoint child its object does not have (`_lookup_dependency`
    returned None) as a deferred position; this reads that child's value (eagerly) and drops the position.
    """
    values = _tf_internal.take_deferred_restore(trackable, name)
    return None if values is None else values.get(VARIABLE_VALUE_KEY)


def add_saveables_to_graph(saveables: Sequence[_tf_internal.SaveableObject]) -> None:
    """Adds saveables to the current graph's SAVEABLE_OBJECTS collection (no-op eagerly).

    The default `tf.compat.v1.train.Saver()` (and the Estimator's Scaffold saver) then saves them.
    """
    if tf.executing_eagerly():
        return
    for s in saveables:
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS, s)
