"""One embedding table and its optimizer slots, split into shard variables placed on devices.

Row placement (`ShardLayout`):

- 'div': shard k holds a contiguous range of rows; the first `vocabulary_size % num_shards` shards hold one row
  more than the others (the layout of `tf.nn.embedding_lookup(partition_strategy='div')`).
- 'mod': shard k holds rows k, k + n, k + 2n, ... (local row = id // n).

Per step, a table costs one gather (lookup) and one sparse update per shard and per variable, proportional to the
number of unique ids of the batch, never to the vocabulary (except Adam with `lazy_adam=False`, whose rule
touches every row by definition).

Checkpoints hold the logical, unsharded layout (see `embedding.checkpointing`), so a checkpoint written with any
number of shards and either strategy restores into any other.
"""

import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from embedding import _tf_internal, checkpointing, graph_constants, optimizers, preprocessing, shard_exchange
from embedding import config as config_lib
from embedding import devices as devices_lib
from embedding.devices import DeviceLike


class ShardLayout:
    """Which global rows each shard holds.

    Args:
      vocabulary_size: Number of rows of the logical table.
      num_shards: Number of shards (>= 1).
      strategy: 'div' or 'mod'.
    """

    def __init__(self, vocabulary_size: int, num_shards: int, strategy: str = "div"):
        if int(vocabulary_size) < 1:
            raise ValueError(f"vocabulary_size must be >= 1, got {vocabulary_size}.")
        self.sizes = preprocessing.shard_sizes(int(vocabulary_size), int(num_shards), strategy)
        self.vocabulary_size = int(vocabulary_size)
        self.num_shards = int(num_shards)
        self.strategy = strategy
        self.offsets = [int(x) for x in np.cumsum([0] + self.sizes[:-1])]

    def row_ids(self, k: int) -> np.ndarray:
        """Global row ids held by shard k, in local row order (int64 NumPy array)."""
        if self.strategy == "div":
            return np.arange(self.offsets[k], self.offsets[k] + self.sizes[k], dtype=np.int64)
        return np.arange(k, self.vocabulary_size, self.num_shards, dtype=np.int64)

    def assemble(self, parts: Sequence[tf.Tensor]) -> tf.Tensor:
        """Full logical tensor from the shard tensors."""
        if self.num_shards == 1:
            return tf.identity(parts[0])
        if self.strategy == "div":
            return tf.concat(list(parts), axis=0)
        indices = [tf.range(k, self.vocabulary_size, self.num_shards) for k in range(self.num_shards)]
        return tf.dynamic_stitch(indices, list(parts))

    def split(self, full: tf.Tensor) -> List[tf.Tensor]:
        """Shard tensors from the full logical tensor."""
        if self.num_shards == 1:
            return [full]
        if self.strategy == "div":
            return tf.split(full, self.sizes, axis=0)
        return [full[k :: self.num_shards] for k in range(self.num_shards)]

    def split_numpy(self, full: np.ndarray) -> List[np.ndarray]:
        """NumPy version of `split` (views, no copy for 'div')."""
        if self.strategy == "div":
            return [full[o : o + s] for o, s in zip(self.offsets, self.sizes)]
        return [full[k :: self.num_shards] for k in range(self.num_shards)]


class _SplitMemo(object):
    """The last shard splits of sorted ids a table built in a graph, and the rows its last lookup gathered (a plain
    holder: tf.Module tracks no tensors).

    One split per ids tensor looked up: a step whose ids were deduplicated on several hosts looks up one tensor per
    host.
    """

    _SIZE = 16

    def __init__(self):
        self.entries = []
        self.rows = None  # (graph, control-flow context, [(local ids, gathered rows)] per shard).

    def get(self, unique_ids, graph, context):
        for entry in self.entries:
            if entry[0] is unique_ids and entry[1] is graph and entry[2] is context:
                return entry
        return None

    def put(self, entry) -> None:
        self.entries = [entry] + self.entries[: self._SIZE - 1]


def _partition_ids(unique_ids: tf.Tensor, layout: ShardLayout):
    """(shard int32 [U], local row int64 [U]) using the shared preprocessing partitioner."""
    shard, local = preprocessing.partition_ids(unique_ids, layout.num_shards, layout.vocabulary_size, layout.strategy)
    return tf.cast(shard, tf.int32), tf.cast(local, tf.int64)


def _call_params(fn: Callable) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def _constant_value(initializer: Any):
    """The value of a `tf.constant_initializer`-style initializer, or None."""
    if "Constant" in type(initializer).__name__:  # tf.constant_initializer, keras Constant, v1 Constant.
        return getattr(initializer, "value", None)
    return None


def make_shard_initial_value(
    initializer: Callable, layout: ShardLayout, k: int, dim: int, dtype: tf.DType = tf.float32
) -> Callable[[], tf.Tensor]:
    """Returns a zero-argument callable building the initial value of shard k only.

    Supported initializers, in order:
    - one accepting a `row_ids` keyword: called as `initializer([rows, dim], dtype, row_ids=<int64 global ids>)`
      (any strategy; for row-id dependent initializers);
    - one accepting a `shard_info` keyword (`tf.train`-style ShardInfo(shape, offset)): 'div' (or 1 shard) only;
    - `embedding.config.RowIdInitializer` (row i -> i + offset): evaluated on the shard's global rows;
    - a constant initializer holding a full `[vocabulary_size, dim]` value: the shard's rows are sliced from it;
    - any other `initializer(shape, dtype)` (random or scalar-constant initializers), called with the shard shape.
    """
    shape = [layout.sizes[k], dim]
    params = _call_params(initializer)
    if "row_ids" in params:
        row_ids = layout.row_ids(k)
        return lambda: initializer(shape, dtype=dtype, row_ids=tf.constant(row_ids, tf.int64))
    if "shard_info" in params:
        if layout.strategy != "div" and layout.num_shards > 1:
            raise ValueError(
                "An initializer taking `shard_info` (a contiguous offset) cannot initialise 'mod' shards; give it "
                "a `row_ids` keyword argument instead."
            )
        info = _tf_internal.shard_info(shape, (layout.offsets[k], 0))
        return lambda: initializer(shape, dtype=dtype, shard_info=info)
    if type(initializer).__name__ == "RowIdInitializer" and isinstance(getattr(initializer, "offset", None), int):
        # embedding.config.RowIdInitializer (row i -> i + offset) takes no row ids yet: evaluate it per shard.
        values = layout.row_ids(k) + initializer.offset
        return lambda: tf.cast(tf.constant(values), dtype)[:, None] * tf.ones(shape, dtype)
    value = _constant_value(initializer)
    if value is not None and np.ndim(value) == 2:
        full = np.asarray(value)
        if full.shape != (layout.vocabulary_size, dim):
            raise ValueError(f"Constant initializer has shape {full.shape}, expected {(layout.vocabulary_size, dim)}.")
        part = layout.split_numpy(full)[k]
        return lambda: tf.constant(part, dtype=dtype)
    if value is not None and np.ndim(value) == 0:
        # A scalar constant: tf.fill of a non-foldable value (see optimizers.ConstantInitializer) instead of a
        # full-size Const node, which would stay alive and make the variable copy itself on its first update.
        fill = optimizers.ConstantInitializer(float(value))
        return lambda: fill(shape, dtype=dtype)
    return lambda: initializer(shape, dtype=dtype)


def _scatter_update(var: tf.Variable, indices: tf.Tensor, values: tf.Tensor):
    return tf.raw_ops.ResourceScatterUpdate(resource=var.handle, indices=indices, updates=values)


class ShardedTable(tf.Module):
    """An embedding table and its optimizer slots, as `num_shards` resource variables each.

    Args:
      table_config: A TableConfig (`vocabulary_size`, `dim`, `initializer`, `name`).
      optimizer: The table's embedding optimizer (see `embedding.optimizers`) or None (no slots; inference only).
      num_shards: Number of shards.
      devices: Devices of the shards (shard k on `devices[k % len(devices)]`); None leaves placement to TF.
      partition_strategy: 'div' or 'mod'.
      name: Table name; defaults to `table_config.name`.
      checkpoint_name: Checkpoint key of the table (TF1 Saver key and `tf.train.Checkpoint` child name);
        defaults to the table name.
      slot_checkpoint_names: Optional mapping slot name -> checkpoint key; defaults to `{checkpoint_name}/{slot}`.
      register_in_graph: In a TF1 graph, register the shards as shared resources (initialised by the Scaffold,
        not in GLOBAL_VARIABLES) and add the logical saveables to SAVEABLE_OBJECTS, so that the default
        `tf.compat.v1.train.Saver()` writes the logical layout. Set False to manage this yourself with
        `saveables()` / `shard_variables()`.

    Shards are plain resource variables on the given devices, also when created under a distribution strategy's
    scope (never mirrored); creation inside a `tf.function` is lifted out of it (`tf.init_scope`). In a TF1
    graph, run `initializer` (or `embedding.checkpointing.initializer_op()`, or the default Scaffold init op):
    `tf.compat.v1.global_variables_initializer()` does not cover the shards.
    """

    def __init__(
        self,
        table_config: Any,
        optimizer: Any,
        num_shards: int = 1,
        devices: Optional[Sequence[DeviceLike]] = None,
        partition_strategy: str = "div",
        name: Optional[str] = None,
        checkpoint_name: Optional[str] = None,
        slot_checkpoint_names: Optional[Mapping[str, str]] = None,
        register_in_graph: bool = True,
    ):
        table_name = name or getattr(table_config, "name", None)
        if not table_name:
            raise ValueError("ShardedTable needs a name (table_config.name or name=).")
        super().__init__(name=None)
        self._table_name = table_name
        self._scope = config_lib.scope_name(table_name)
        self._table_config = table_config
        if optimizer is not None and not hasattr(optimizer, "apply_rows"):
            from embedding import optimizers

            optimizer = optimizers.to_optimizer(optimizer)  # Estimator-style *Parameters or upstream objects.
        self._optimizer = optimizer
        self._dim = int(table_config.dim)
        self._layout = ShardLayout(table_config.vocabulary_size, num_shards, partition_strategy)
        devices = list(devices) if devices else [None]
        self._devices = [devices[k % len(devices)] for k in range(self._layout.num_shards)]
        self._host_device = devices_lib.host_device(self._devices[0])
        self._slot_names = list(optimizer.slot_names()) if optimizer is not None else []
        self._set_names(checkpoint_name or table_name, slot_checkpoint_names)

        initializer = getattr(table_config, "initializer", None)
        if initializer is None:
            initializer = tf.initializers.TruncatedNormal(0.0, 1.0 / np.sqrt(self._dim))
        self._shards = self._create_shards("shard", initializer)
        self._slot_shards = {}
        if optimizer is not None:
            for slot, slot_init in zip(self._slot_names, optimizer.slot_initializers()):
                self._slot_shards[slot] = self._create_shards(f"{slot}/shard", slot_init)

        self._split_memo = _SplitMemo()
        self._build_logical()
        if register_in_graph and not tf.executing_eagerly():
            for v in self.shard_variables():
                checkpointing.register_shard_variable(v)
            with self._shards[0].graph.as_default():
                checkpointing.add_saveables_to_graph(self.saveables())

    # ------------------------------------------------------------------------------------- checkpoint names
    def _set_names(self, checkpoint_name: str, slot_checkpoint_names: Optional[Mapping[str, str]]) -> None:
        self.checkpoint_name = checkpoint_name
        slot_checkpoint_names = dict(slot_checkpoint_names or {})
        unknown = set(slot_checkpoint_names) - set(self._slot_names)
        if unknown:
            raise ValueError(
                f"Table '{self._table_name}': slot_checkpoint_names has unknown slots {sorted(unknown)}; "
                f"slots are {self._slot_names}."
            )
        self.slot_checkpoint_names = {
            s: slot_checkpoint_names.get(s, f"{self.checkpoint_name}/{s}") for s in self._slot_names
        }

    def _build_logical(self) -> None:
        assemble, split = self._layout.assemble, self._layout.split
        slices = None
        if self._layout.strategy == "div":
            slices = list(zip(self._layout.offsets, self._layout.sizes))
        self._logical = {
            self.checkpoint_name: checkpointing.LogicalTensor(
                self.checkpoint_name,
                self._shards,
                [self.vocabulary_size, self._dim],
                assemble,
                split,
                self._host_device,
                row_slices=slices,
            )
        }
        for slot in self._slot_names:
            key = self.slot_checkpoint_names[slot]
            self._logical[key] = checkpointing.LogicalTensor(
                key,
                self._slot_shards[slot],
                [self.vocabulary_size, self._dim],
                assemble,
                split,
                self._host_device,
                row_slices=slices,
            )

    def set_checkpoint_names(
        self, checkpoint_name: str, slot_checkpoint_names: Optional[Mapping[str, str]] = None
    ) -> None:
        """Renames the checkpoint keys of the table and its slots (before any saveable is registered).

        The estimator learns the names upstream's CPU path would use only after `model_fn` ran.

        Raises:
          ValueError: unknown slot names.
        """
        self._set_names(checkpoint_name, slot_checkpoint_names)
        self._build_logical()

    # ----------------------------------------------------------------------------------------------- creation
    def _create_shards(self, prefix: str, initializer: Callable) -> List[tf.Variable]:
        shards = []
        with tf.init_scope(), graph_constants.sharing():
            with tf.name_scope(self._scope + "/"):
                for k in range(self._layout.num_shards):
                    init = make_shard_initial_value(initializer, self._layout, k, self._dim)
                    if not tf.executing_eagerly():
                        # The initial value built here, on the shard's device, not by the variable: its ops then
                        # carry no colocation attribute and shorter names, and share their constants.
                        with tf.device(self._devices[k]):
                            init = init()
                    shards.append(checkpointing.create_shard_variable(init, f"{prefix}_{k}", self._devices[k]))
        return shards

    # --------------------------------------------------------------------------------------------- properties
    @property
    def name(self) -> str:
        """Table name."""
        return self._table_name

    @property
    def table_config(self) -> Any:
        return self._table_config

    @property
    def optimizer(self) -> Any:
        return self._optimizer

    @property
    def vocabulary_size(self) -> int:
        return self._layout.vocabulary_size

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def num_shards(self) -> int:
        return self._layout.num_shards

    @property
    def partition_strategy(self) -> str:
        return self._layout.strategy

    @property
    def layout(self) -> ShardLayout:
        return self._layout

    @property
    def devices(self) -> List[DeviceLike]:
        """Device of each shard."""
        return list(self._devices)

    @property
    def slot_names(self) -> List[str]:
        return list(self._slot_names)

    @property
    def shards(self) -> List[tf.Variable]:
        """The parameter shard variables, in shard order."""
        return list(self._shards)

    def slot_shards(self, slot: str) -> List[tf.Variable]:
        """The shard variables of optimizer slot `slot`."""
        return list(self._slot_shards[self._check_slot(slot)])

    def shard_variables(self) -> List[tf.Variable]:
        """All physical variables (parameters, then slots): exclude them from a TF1 Saver's var_list."""
        out = list(self._shards)
        for slot in self._slot_names:
            out.extend(self._slot_shards[slot])
        return out

    @property
    def initializer(self) -> Optional[tf.Operation]:
        """Op initialising every shard variable (TF1 graphs); None when executing eagerly."""
        if tf.executing_eagerly():
            return None
        return tf.group(*[v.initializer for v in self.shard_variables()])

    def _check_slot(self, slot: str) -> str:
        if slot not in self._slot_shards:
            raise KeyError(f"Table '{self._table_name}' has no slot {slot!r}; slots: {self._slot_names}.")
        return slot

    # ------------------------------------------------------------------------------------------ lookup/apply
    def _split_by_shard(self, unique_ids: tf.Tensor, *values: tf.Tensor, sorted_ids: bool = False):
        """[(local ids, values...)] per shard, and how to put per-shard results back in input order.

        The second result is None (one shard), the string "concat" (ascending ids under 'div': every shard's ids
        are a contiguous run, split by a binary search instead of a partition and joined by a concat), or the
        per-shard positions in the input for `tf.dynamic_stitch`.
        """
        n = self._layout.num_shards
        if n == 1:
            return [(unique_ids,) + tuple(values)], None
        if sorted_ids and self._layout.strategy == "div":
            sizes, local_ids = self._split_sorted_ids(unique_ids)
            axis = graph_constants.constant(0, tf.int32)
            pieces = [tf.split(t, sizes, num=n, axis=axis) for t in values]
            return [(local_ids[k],) + tuple(p[k] for p in pieces) for k in range(n)], "concat"
        shard, local = _partition_ids(unique_ids, self._layout)
        positions = tf.range(tf.size(unique_ids, out_type=tf.int32))
        parts = [tf.dynamic_partition(t, shard, n) for t in (local,) + tuple(values)]
        pos_parts = tf.dynamic_partition(positions, shard, n)
        return [tuple(p[k] for p in parts) for k in range(n)], pos_parts

    def _split_sorted_ids(self, unique_ids: tf.Tensor) -> Tuple[tf.Tensor, List[tf.Tensor]]:
        """Ascending ids under 'div': the number of ids of each shard `[n]` and each shard's local ids.

        In a graph, the apply of the ids a lookup just split reuses the lookup's split (same ids tensor, graph and
        control flow context: one split per table and step, not two).
        """
        graph = context = None
        if not tf.executing_eagerly():
            graph = tf.compat.v1.get_default_graph()
            context = _tf_internal.control_flow_context(graph)  # The split's ops must be usable where we are.
            memo = self._split_memo.get(unique_ids, graph, context)
            if memo is not None:
                return memo[3], memo[4]
        n = self._layout.num_shards
        # Shard k holds ids [offsets[k], offsets[k] + sizes[k]): its run in the sorted ids starts at the first
        # id >= its first row and ends at the first id >= its end. LowerBound on a [1, U] batch directly
        # (tf.searchsorted would add some twenty shape ops per call, per table, to the graph).
        constant = graph_constants.constant  # Shared by the tables in the engine's calls.
        starts = constant([self._layout.offsets], unique_ids.dtype)
        ends = constant([[o + s for o, s in zip(self._layout.offsets, self._layout.sizes)]], unique_ids.dtype)
        row = tf.reshape(unique_ids, constant([1, -1], tf.int32))
        sizes = tf.reshape(
            tf.raw_ops.LowerBound(sorted_inputs=row, values=ends, out_type=tf.int32)
            - tf.raw_ops.LowerBound(sorted_inputs=row, values=starts, out_type=tf.int32),
            constant([n], tf.int32),
        )
        pieces = tf.split(unique_ids, sizes, num=n, axis=constant(0, tf.int32))
        offsets = self._layout.offsets
        local_ids = [p - constant(offsets[k], p.dtype) if offsets[k] else p for k, p in enumerate(pieces)]
        if graph is not None:
            self._split_memo.put((unique_ids, graph, context, sizes, local_ids))
        return sizes, local_ids

    def lookup(self, unique_ids, sorted_ids: bool = False) -> tf.Tensor:
        """Rows of the given ids: one gather per shard on its device.

        Args:
          unique_ids: int `[U]` ids (unique ids of a batch; duplicates are allowed but cost extra rows).
          sorted_ids: the ids are ascending (as `TableBatch.unique_ids`): 'div' shards are then found by a binary
            search instead of a partition.

        Returns:
          float32 `[U, dim]`.
        """
        ids = tf.cast(tf.convert_to_tensor(unique_ids), tf.int64)
        with tf.name_scope(f"{self._scope}_lookup"):
            parts, positions = self._split_by_shard(ids, sorted_ids=sorted_ids)
            rows = []
            for k, (local,) in enumerate(parts):
                with tf.device(self._devices[k]):
                    rows.append(tf.gather(self._shards[k], local))
            self._remember_rows([local for (local,) in parts], rows)
            if positions is None:
                return rows[0]
            if isinstance(positions, str):
                out = tf.concat(rows, axis=graph_constants.constant(0, tf.int32))
            else:
                out = tf.dynamic_stitch(positions, rows)
            out.set_shape([ids.shape[0], self._dim])
            return out

    def apply_gradients(
        self, unique_ids, grads, learning_rate=None, sorted_ids: bool = False
    ) -> Optional[tf.Operation]:
        """Applies the optimizer to the rows of `unique_ids`: `apply_gradient_ops` grouped in one op.

        Args:
          unique_ids: int `[U]` UNIQUE ids.
          grads: float `[U, dim]` gradients, already accumulated per unique id.
          learning_rate: Scalar; default `optimizer.learning_rate_tensor()`.
          sorted_ids: the ids are ascending (see `lookup`).

        Returns:
          The update op in graph mode (None when executing eagerly, where it has run).

        Raises:
          ValueError: if the table has no optimizer.
        """
        ops = self.apply_gradient_ops(unique_ids, grads, learning_rate, sorted_ids)
        if tf.executing_eagerly():
            return None
        return tf.group(*ops)

    def apply_gradient_ops(self, unique_ids, grads, learning_rate=None, sorted_ids: bool = False) -> List[tf.Operation]:
        """Applies the optimizer to the rows of `unique_ids`; returns the update ops of the shards (not grouped,
        so that a caller updating many tables groups all of them at once).

        Args:
          unique_ids: int `[U]` UNIQUE ids.
          grads: float `[U, dim]` gradients, already accumulated per unique id.
          learning_rate: Scalar; default `optimizer.learning_rate_tensor()`.
          sorted_ids: the ids are ascending (see `lookup`).

        Returns:
          The update ops in graph mode (eagerly they have run).

        Raises:
          ValueError: if the table has no optimizer.
        """
        self._require_optimizer()
        opt = self._optimizer
        ids = tf.cast(tf.convert_to_tensor(unique_ids), tf.int64)
        grads = tf.convert_to_tensor(grads, dtype=tf.float32)
        with tf.name_scope(f"{self._scope}_apply"):
            lr = opt.learning_rate_tensor() if learning_rate is None else learning_rate
            lr = tf.cast(tf.convert_to_tensor(lr), tf.float32)
            parts, _ = self._split_by_shard(ids, grads, sorted_ids=sorted_ids)
            ops = []
            for k, (local, g) in enumerate(parts):
                with tf.device(self._devices[k]):
                    ops.extend(self._apply_shard(k, local, g, lr))
            return [op for op in ops if op is not None]

    def apply_summed_gradient_ops(
        self,
        parts: Sequence[Tuple[Any, Any, DeviceLike]],
        learning_rate=None,
        sorted_ids: bool = False,
        exchange: Optional["shard_exchange.ShardExchange"] = None,
    ) -> List[tf.Operation]:
        """Applies the optimizer ONCE per unique id to the gradients of several parts of a batch, summed per id.

        Each part (e.g. the replicas of one host) deduplicated its own ids, so an id may come from several parts.
        Each part's ids and gradients are split by shard on the part's device; on each shard's device the pieces
        of all parts are joined, deduplicated and summed per id (in part order), and the shard is updated once per
        id: an id's gradient is the sum over all its occurrences in the batch, as with one part (up to the float
        summation order).

        Args:
          parts: per part, `(ids [U_p], gradients [U_p, dim], device)`: ids unique within the part, gradients
            accumulated per id, and where the part's split runs.
          learning_rate: Scalar; default `optimizer.learning_rate_tensor()`.
          sorted_ids: each part's ids are ascending (see `lookup`).
          exchange: when each host has a process and graph of its own, carries this process's pieces to the
            processes that own the shards (`shard_exchange.py`); only the shards this process owns are updated here.
            None: every part is in this graph.

        Returns:
          The update ops in graph mode (eagerly they have run), with an exchange also the ops that send its pieces.

        Raises:
          ValueError: if the table has no optimizer.
        """
        self._require_optimizer()
        with tf.name_scope(f"{self._scope}_apply"):
            lr = self._optimizer.learning_rate_tensor() if learning_rate is None else learning_rate
            lr = tf.cast(tf.convert_to_tensor(lr), tf.float32)
            split = []
            for ids, grads, device in parts:
                ids = tf.cast(tf.convert_to_tensor(ids), tf.int64)
                grads = tf.convert_to_tensor(grads, dtype=tf.float32)
                with graph_constants.placed(device):
                    split.append(self._split_by_shard(ids, grads, sorted_ids=sorted_ids)[0])
            ops = []
            for k in range(self._layout.num_shards):
                pieces = [(p[k][0], p[k][1]) for p in split]
                if exchange is not None:
                    joined = [(tf.concat([i for i, _ in pieces], 0), tf.concat([g for _, g in pieces], 0))]
                    pieces = exchange.route(self._table_name, k, self._devices[k], joined[0], self._dim)
                    if pieces is None:  # Another process owns the shard: the piece is sent, no update here.
                        continue
                with tf.device(self._devices[k]):
                    # Constants of their own (not graph_constants'): per shard, on its device.
                    axis = tf.constant(0, tf.int32)
                    local = tf.concat([ids for ids, _ in pieces], axis=axis)
                    grads = tf.concat([g for _, g in pieces], axis=axis)
                    local, index = tf.unique(local, out_idx=tf.int32)
                    grads = tf.math.unsorted_segment_sum(grads, index, tf.size(local, out_type=tf.int32))
                    ops.extend(self._apply_shard(k, local, grads, lr))
            if exchange is not None:
                ops.extend(exchange.sent_ops())
            return [op for op in ops if op is not None]

    def _require_optimizer(self) -> None:
        if self._optimizer is None:
            raise ValueError(
                f"Table '{self._table_name}' has no optimizer: pass an optimizer to the table config "
                f"or a global one to train it."
            )

    def _apply_shard(self, k: int, local: tf.Tensor, g: tf.Tensor, lr: tf.Tensor) -> list:
        """The update of shard k (on its device) from unique local rows and their gradients."""
        if bool(getattr(self._optimizer, "lazy", True)):
            return self._apply_rows(k, local, g, lr)
        return self._apply_dense(k, local, g, lr)

    def _slot_vars(self, k: int) -> Dict[str, tf.Variable]:
        return {s: self._slot_shards[s][k] for s in self._slot_names}

    def _remember_rows(self, locals_: List[tf.Tensor], rows: List[tf.Tensor]) -> None:
        """Keeps the rows a lookup gathered for the update of the same ids (TF1 graphs only, see `_looked_up`)."""
        if tf.executing_eagerly():
            return
        graph = tf.compat.v1.get_default_graph()
        if graph.building_function:
            return
        self._split_memo.rows = (graph, _tf_internal.control_flow_context(graph), list(zip(locals_, rows)))

    def _looked_up(self, k: int, local: tf.Tensor) -> Optional[tf.Tensor]:
        """The rows of shard k the lookup of these very ids gathered in this graph and loop body, once, or None.

        In a TF1 graph the update's gather would read the same values: within one `Session.run` nothing writes a
        shard between a step's lookup and its update but that update (a pipelined update of the previous step has
        other ids). Not in functions, whose automatic control dependencies order the reads after any write in
        between. One use: a second update of the same ids reads what the first one wrote.
        """
        memo = self._split_memo.rows
        if memo is None or tf.executing_eagerly():
            return None
        graph = tf.compat.v1.get_default_graph()
        if memo[0] is not graph or memo[1] is not _tf_internal.control_flow_context(graph) or k >= len(memo[2]):
            return None
        looked_up_ids, rows = memo[2][k]
        if looked_up_ids is not local:
            return None
        memo[2][k] = (None, None)
        return rows

    def _apply_rows(self, k: int, local: tf.Tensor, g: tf.Tensor, lr: tf.Tensor) -> list:
        """Lazy update of the touched rows of shard k: a fused kernel, or gather (or the lookup's rows of the same
        ids), pure rule, scatter."""
        var, slot_vars = self._shards[k], self._slot_vars(k)
        supports_fused = getattr(self._optimizer, "supports_fused_sparse_apply", None)
        if supports_fused is not None and supports_fused() and optimizers.prefer_fused_sparse_apply():
            op = self._optimizer.fused_sparse_apply(var, slot_vars, local, g, lr)
            if op is not None:  # None: the fused path did not apply and nothing ran.
                return [op]
        rows = self._looked_up(k, local)
        if rows is None:
            rows = tf.gather(var, local)
        slot_rows = {s: tf.gather(v, local) for s, v in slot_vars.items()}
        new_rows, new_slots = self._optimizer.apply_rows(rows, slot_rows, g, lr)
        # All reads before any write (TF1 graphs have no automatic control dependencies).
        with tf.control_dependencies([rows] + list(slot_rows.values())):
            ops = [_scatter_update(var, local, new_rows)]
            ops += [_scatter_update(v, local, new_slots[s]) for s, v in slot_vars.items()]
        return ops

    def _apply_dense(self, k: int, local: tf.Tensor, g: tf.Tensor, lr: tf.Tensor) -> list:
        """Non-lazy update of the whole shard k (zero gradient on untouched rows)."""
        var, slot_vars = self._shards[k], self._slot_vars(k)
        dense_g = tf.scatter_nd(local[:, None], g, [self._layout.sizes[k], self._dim])
        params = var.read_value()
        slots = {s: v.read_value() for s, v in slot_vars.items()}
        new_params, new_slots = self._optimizer.apply_rows(params, slots, dense_g, lr)
        with tf.control_dependencies([params] + list(slots.values())):
            ops = [var.assign(new_params, read_value=False)]
            ops += [v.assign(new_slots[s], read_value=False) for s, v in slot_vars.items()]
        return ops

    # ---------------------------------------------------------------------------------------- logical layout
    def logical_tensors(self) -> Dict[str, checkpointing.LogicalTensor]:
        """Checkpoint key -> LogicalTensor (the table first, then its slots)."""
        return dict(self._logical)

    def read_full_table(self) -> tf.Tensor:
        """The full logical table `[vocabulary_size, dim]` (e.g. for serving export)."""
        return self._logical[self.checkpoint_name].read()

    def read_full_slot(self, slot: str) -> tf.Tensor:
        """The full logical slot `[vocabulary_size, dim]`."""
        return self._logical[self.slot_checkpoint_names[self._check_slot(slot)]].read()

    def assign_full_table(self, value) -> Optional[tf.Operation]:
        """Assigns a full logical table (split onto the shards)."""
        return self._logical[self.checkpoint_name].assign(value)

    def assign_full_slot(self, slot: str, value) -> Optional[tf.Operation]:
        """Assigns a full logical slot."""
        return self._logical[self.slot_checkpoint_names[self._check_slot(slot)]].assign(value)

    def saveables(self) -> list:
        """TF1 SaveableObjects writing the table and each slot under their checkpoint keys."""
        return [t.saveable() for t in self._logical.values()]

    def _trackable_children(self, save_type=None, **kwargs):
        # tf.train.Checkpoint: only the logical tensors, never the physical shards.
        del save_type, kwargs
        return dict(self._logical)
