"""Restoring SparseCore-layout checkpoints (written by a TPU's `TPUEmbeddingV2`) into our embedding objects.

Such a checkpoint holds, under the embedding object, stacked and shuffled variables named after their stack (`a_b`,
`a_b/accumulators`, ...) and the layouts proto under `_sparse_core_table_layouts` (see
`embedding.sparsecore_layout`). A table alone in its stack is saved under its own name, and when its padded shape
equals its shape, its key and shape coincide with ours: a plain restore would load its rows shuffled. So a
checkpoint that carries layouts is always read through them:

`SparseCoreRestore.lookup` is the owner's `_lookup_dependency`: `tf.train.Checkpoint` asks it for the object of
every child the checkpoint holds under the owner, all before it restores any value. Our own tables and slots
(`LogicalTensor`s) are handed out with a restore hook for this restore, the layouts to a receiver; names we do not
have stay unmatched (TensorFlow keeps them as deferred positions, whose values can be read). When the restore then
delivers the values:

- without layouts, each hook restores its table as before (or, for `TPUEmbeddingForServing` given TF 2.15's
  `experimental_sparsecore_restore_info`, unshuffles it first: one table per key, no rotation);
- with layouts, no hook writes anything: once the layouts and every hooked value have arrived, every table is
  read from its stack (parameters and slots: unstacked, unshuffled, unpadded), all checked before any is written.
  Tables or slots missing on either side are an error naming them, unless the owner allows a partial restore.

The way back: `sparse_core_children` gives the checkpoint children that write an owner's tables in the SparseCore
layout of a described TPU (`SparseCoreTopology`), for `TPUEmbeddingV2(..., sparse_core_topology=...)`.
"""

import dataclasses
import functools
import weakref
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf

from embedding import checkpointing
from embedding import sparsecore_layout as layout_lib
from embedding.sharded_table import ShardedTable

__all__ = [
    "RestoresSparseCoreCheckpoints",
    "SparseCoreRestore",
    "SparseCoreTensor",
    "check_restore_info",
    "sparse_core_children",
]

_KEY = checkpointing.VARIABLE_VALUE_KEY
_Trackable = checkpointing.Trackable


def check_restore_info(info: Optional[Mapping[str, Any]]) -> Optional[int]:
    """Validates TF 2.15's `experimental_sparsecore_restore_info`; returns its number of SparseCores or None.

    Args:
      info: None, or `{"num_tpu_devices": int, "num_sc_chips_per_tpu": int}`.

    Raises:
      ValueError: a key missing or unknown, or a value not a positive int.
    """
    if info is None:
        return None
    if not isinstance(info, Mapping):
        raise ValueError(f"experimental_sparsecore_restore_info must be a dict, got {type(info).__name__}.")
    for key in ("num_tpu_devices", "num_sc_chips_per_tpu"):
        if key not in info:
            raise ValueError(f"Missing `{key}` in `experimental_sparsecore_restore_info`.")
        value = info[key]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(
                f"`{key}` in `experimental_sparsecore_restore_info` must be a positive int, got {value!r}."
            )
    unknown = sorted(set(info) - {"num_tpu_devices", "num_sc_chips_per_tpu"})
    if unknown:
        raise ValueError(
            f"Unknown keys {unknown} in `experimental_sparsecore_restore_info` (it takes `num_tpu_devices` and "
            f"`num_sc_chips_per_tpu`)."
        )
    return int(info["num_tpu_devices"]) * int(info["num_sc_chips_per_tpu"])


class _Pass:
    """One restore's view of the owner's children: what was handed out, what has arrived."""

    def __init__(self):
        self.restoring = False  # A value has arrived: the next lookup starts another restore.
        self.has_layouts = False
        self.layouts: Optional[bytes] = None
        self.waiting = 0  # Handed-out objects whose values have not arrived.
        self.values: Dict[str, Any] = {}  # Our children's checkpoint values (with layouts).
        self.unknown: List[str] = []  # Checkpoint children we have no object for.


class _LayoutsReceiver(_Trackable):
    """Receives the checkpoint's layouts proto."""

    def __init__(self, restore: "SparseCoreRestore", restore_pass: _Pass):
        self._restore, self._pass = restore, restore_pass

    def _serialize_to_tensors(self):
        with tf.device("/cpu:0"):
            return {_KEY: tf.constant("", tf.string)}

    def _restore_from_tensors(self, restored_tensors):
        return self._restore._arrived(self._pass, layout_lib.LAYOUTS_CHECKPOINT_KEY, None, restored_tensors)


class SparseCoreRestore:
    """The checkpoint-restore side of an embedding object that may be given SparseCore-layout checkpoints.

    Args:
      owner: The embedding object (`TPUEmbeddingV2`, `TPUEmbedding`, `TPUEmbeddingForServing`); its class name
        names it in errors.
      tables: `{table name: ShardedTable}` of the owner.
      num_sparse_cores: For TF 2.15's `experimental_sparsecore_restore_info`: checkpoints without layouts hold one
        table per key, shuffled over this many SparseCores (None: they hold the logical layout).

    Attributes:
      partial: Allow a SparseCore checkpoint to lack tables or slots of the owner (they keep their values) and
        to hold tables the owner does not configure (ignored).
    """

    def __init__(self, owner: Any, tables: Mapping[str, ShardedTable], num_sparse_cores: Optional[int] = None):
        self._owner_name = type(owner).__name__
        self._owner_ref = weakref.ref(owner)  # Its deferred checkpoint children hold the stacked values.
        self._tables = dict(tables)
        self._num_sparse_cores = num_sparse_cores
        self._pass: Optional[_Pass] = None
        self.partial = False

    def lookup(self, name: str, children: Mapping[str, Any]) -> Optional[Any]:
        """The owner's `_lookup_dependency(name, children)` for a restore (see the module docstring)."""
        if self._pass is None or self._pass.restoring:
            self._pass = _Pass()
        restore_pass = self._pass
        if name == layout_lib.LAYOUTS_CHECKPOINT_KEY:
            restore_pass.has_layouts = True
            restore_pass.waiting += 1
            return _LayoutsReceiver(self, restore_pass)
        child = children.get(name)
        if isinstance(child, (checkpointing.LogicalTensor, SparseCoreTensor)):
            restore_pass.waiting += 1
            child.restore_hook = functools.partial(self._arrived, restore_pass, name)
            return child
        if child is None:
            restore_pass.unknown.append(name)
        return child

    # ------------------------------------------------------------------------------------------- arrivals
    def _arrived(self, restore_pass: _Pass, name: str, child: Any, restored: Mapping[str, Any]) -> Any:
        """A value of the checkpoint: restored at once without layouts, else kept until all have arrived."""
        restore_pass.restoring = True
        restore_pass.waiting -= 1
        value = restored[_KEY]
        if not restore_pass.has_layouts:
            if self._num_sparse_cores is not None:
                return self._restore_unshuffled(name, child, value)
            return child._restore_from_tensors(restored)
        if not tf.executing_eagerly():
            raise ValueError(
                f"The checkpoint holds SparseCore layouts ({self._owner_name}); restore it executing eagerly "
                f"(tf.train.Checkpoint(...).restore in TF2): its tables are read through the layouts in Python."
            )
        restore_pass.values[name] = value.numpy() if name != layout_lib.LAYOUTS_CHECKPOINT_KEY else value
        if restore_pass.waiting == 0:
            self._restore_from_layouts(restore_pass)
        return None

    def _restore_unshuffled(self, name: str, child: checkpointing.LogicalTensor, value: Any) -> Any:
        if not tf.executing_eagerly():
            raise ValueError(
                f"experimental_sparsecore_restore_info: restore '{name}' executing eagerly (tf.train.Checkpoint(...)"
                f".restore in TF2)."
            )
        value = value.numpy()
        layout = layout_lib.unshuffled_layout(name, value.shape, child.shape.as_list(), self._num_sparse_cores)
        return child.assign(layout_lib.unstack_table(value, layout))

    # ------------------------------------------------------------------------------------ through layouts
    def _restore_from_layouts(self, restore_pass: _Pass) -> None:
        raw = restore_pass.values.pop(layout_lib.LAYOUTS_CHECKPOINT_KEY)
        layouts = {lay.table_name: lay for lay in layout_lib.parse_layouts(raw.numpy())}
        tables = self._tables
        if self._num_sparse_cores is not None:
            counts = sorted({lay.num_sparse_cores for lay in layouts.values()})
            if counts != [self._num_sparse_cores]:
                raise ValueError(
                    f"experimental_sparsecore_restore_info says {self._num_sparse_cores} SparseCores, the "
                    f"checkpoint's layouts say {counts}: drop the argument (the layouts describe the checkpoint)."
                )
        missing = sorted(set(tables) - set(layouts))
        extra = sorted(set(layouts) - set(tables))
        if (missing or extra) and not self.partial:
            raise ValueError(
                f"The SparseCore checkpoint does not match this {self._owner_name}: tables {missing} are configured "
                f"but not in the checkpoint, tables {extra} are in the checkpoint but not configured. Configure the "
                f"same tables, or set `partial_restore = True` on the {self._owner_name} to restore the tables both "
                f"have."
            )
        stacked: Dict[str, Optional[np.ndarray]] = {}

        def stacked_value(key: str) -> Optional[np.ndarray]:
            if key not in stacked:
                if key in restore_pass.values:
                    stacked[key] = restore_pass.values[key]
                elif key in restore_pass.unknown:
                    value = checkpointing.take_deferred_value(self._owner_ref(), key)
                    stacked[key] = None if value is None else value.numpy()
                else:
                    stacked[key] = None
            return stacked[key]

        writes = []  # (table, slot or None, value): all read and checked before any write.
        for name in sorted(set(tables) & set(layouts)):
            table, layout = tables[name], layouts[name]
            if tuple(layout.unsharded_shape) != (table.vocabulary_size, table.dim):
                raise ValueError(
                    f"Table '{name}' is {[table.vocabulary_size, table.dim]} here, "
                    f"{list(layout.unsharded_shape)} in the SparseCore checkpoint."
                )
            for slot in [None] + list(table.slot_names):
                key = layout.stacked_table_name + ("" if slot is None else f"/{slot}")
                value = stacked_value(key)
                if value is None:
                    if slot is not None and self.partial:
                        continue
                    raise ValueError(
                        f"The SparseCore checkpoint has no '{key}' for table '{name}'"
                        + (" (the optimizers differ?)" if slot is not None else "")
                        + f"; set `partial_restore = True` on the {self._owner_name} to keep this object's values."
                    )
                writes.append((table, slot, layout_lib.unstack_table(value, layout, repr(key))))
        for table, slot, value in writes:
            if slot is None:
                table.assign_full_table(value)
            else:
                table.assign_full_slot(slot, value)


class RestoresSparseCoreCheckpoints:
    """Mixin of the embedding API objects: their checkpoint restores read SparseCore layouts (module docstring).

    The class calls `_init_sparsecore_restore(engine.tables)` in its constructor.
    """

    _sparsecore_restore: SparseCoreRestore

    def _init_sparsecore_restore(
        self, tables: Mapping[str, ShardedTable], num_sparse_cores: Optional[int] = None
    ) -> None:
        object.__setattr__(self, "_sparsecore_restore", SparseCoreRestore(self, tables, num_sparse_cores))

    @property
    def partial_restore(self) -> bool:
        """Whether a SparseCore-layout checkpoint may lack tables or slots of this object, or hold others.

        False (default): any difference is a `ValueError` naming the tables. True: the tables both have are
        restored; the others keep their values, and the checkpoint's other tables are ignored.
        """
        return self._sparsecore_restore.partial

    @partial_restore.setter
    def partial_restore(self, value: bool) -> None:
        self._sparsecore_restore.partial = bool(value)

    def _lookup_dependency(self, name, cached_dependencies=None):
        # A restore passes the children it listed (TF 2.15 and 2.21); other callers (attribute tracking) do not.
        restore = getattr(self, "_sparsecore_restore", None)
        if cached_dependencies is None or restore is None:
            return super()._lookup_dependency(name, cached_dependencies)
        return restore.lookup(name, cached_dependencies)


# ------------------------------------------------------------------------------------------------ the way back
def _stack(value: tf.Tensor, layout: layout_lib.TableLayout) -> tf.Tensor:
    """The stacked variable's value `[N * R, padded width]` holding `value` `[rows, dim]` (zero padding)."""
    n = layout.num_sparse_cores
    rows, dim = layout.unsharded_shape
    r = tf.range(rows, dtype=tf.int64)
    index = ((r % n + layout.sparse_core_shard_rotation) % n) * layout.total_rows_per_sparse_core_shard
    index += layout.sparse_core_shard_row_offset + r // n
    padded = tf.pad(value, [[0, 0], [0, layout.unsharded_padded_shape[1] - dim]])
    return tf.scatter_nd(index[:, None], padded, layout.stacked_shape)


class SparseCoreTensor(_Trackable):
    """A table or slot saved in its SparseCore layout (restored through `SparseCoreRestore`, like a LogicalTensor).

    Args:
      logical: The table's or slot's `LogicalTensor`.
      layout: The table's layout.
    """

    def __init__(self, logical: checkpointing.LogicalTensor, layout: layout_lib.TableLayout):
        self.logical, self.layout = logical, layout
        self.restore_hook = None  # As LogicalTensor's.

    @property
    def shape(self) -> tf.TensorShape:
        return self.logical.shape

    def assign(self, value: Any) -> Any:
        return self.logical.assign(value)

    def _serialize_to_tensors(self):
        full = self.logical.read()
        with tf.device(self.logical.host_device):
            return {_KEY: _stack(full, self.layout)}

    def _restore_from_tensors(self, restored_tensors):
        hook, self.restore_hook = self.restore_hook, None
        if hook is not None:
            return hook(self, restored_tensors)
        return self.logical.assign(restored_tensors[_KEY])  # A checkpoint without layouts: the logical layout.


class _LayoutsValue(_Trackable):
    """Saves the layouts proto (restores are handed a `_LayoutsReceiver` instead)."""

    def __init__(self, data: bytes):
        self._data = data

    def _serialize_to_tensors(self):
        with tf.device("/cpu:0"):
            return {_KEY: tf.constant(self._data, tf.string)}

    def _restore_from_tensors(self, restored_tensors):
        del restored_tensors


def sparse_core_children(
    tables: Mapping[str, ShardedTable], topology: layout_lib.SparseCoreTopology
) -> Dict[str, _Trackable]:
    """Checkpoint children writing `tables` in the SparseCore layout of `topology`.

    Each table is alone in its stack, named by its checkpoint name (its slots under `{name}/{slot}`), laid out as
    TensorFlow's stacker lays it out with table stacking disabled; the layouts proto goes under
    `_sparse_core_table_layouts`. A TPU's `TPUEmbeddingV2` restores this (TensorFlow's checkpoint adapter restacks
    the tables as that TPU stacks them), and so do `TPUEmbeddingForServing` and our objects.

    Raises:
      ValueError: a slot saved under another key than `{name}/{slot}` (TensorFlow would not find it).
    """
    out: Dict[str, _Trackable] = {}
    layouts = []
    for name, table in tables.items():
        layout = dataclasses.replace(
            layout_lib.table_layout(name, table.vocabulary_size, table.dim, topology),
            stacked_table_name=table.checkpoint_name,
        )
        layouts.append(layout)
        logical = table.logical_tensors()
        for slot, key in table.slot_checkpoint_names.items():
            if key != f"{table.checkpoint_name}/{slot}":
                raise ValueError(
                    f"Table '{name}': slot '{slot}' is saved as '{key}'; a SparseCore checkpoint needs "
                    f"'{table.checkpoint_name}/{slot}'."
                )
        for key, tensor in logical.items():
            out[key] = SparseCoreTensor(tensor, layout)
    out[layout_lib.LAYOUTS_CHECKPOINT_KEY] = _LayoutsValue(layout_lib.serialize_layouts(layouts))
    return out
