"""`TPUEmbedding`: the TF2 mid-level embedding API (`tf.tpu.experimental.embedding.TPUEmbedding`) on our engine.

Usage is upstream's, with any `tf.distribute` strategy in place of `TPUStrategy`:

    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
      embedding = TPUEmbedding(feature_config, SGD(0.1))

    @tf.function
    def training_step(iterator, num_steps):
      def step(_):
        with tf.GradientTape() as tape:
          activations = embedding.dequeue()
          tape.watch(activations)
          loss = ...
        embedding.apply_gradients(tape.gradient(loss, activations))
      for _ in tf.range(num_steps):
        features, labels = next(iterator)
        embedding.enqueue(features, training=True)
        strategy.run(step, args=(labels,))

How one step runs across replicas (the "multi-replica path"):

- The tables are ONE logical copy, sharded ('div') over the strategy's replica devices (one shard per device; one
  shard without devices under the default strategy).
- `enqueue` (cross-replica context) takes every replica's inputs (`PerReplica` values, or one call per replica
  with `device=`), preprocesses each replica's batch, merges the per-table unique ids of all replicas, does ONE
  lookup per table (one gather per shard), and combines each replica's activations on that replica's device.
  Called inside `strategy.run`, it gathers the replicas' inputs with `merge_call` first.
- `dequeue` (inside `strategy.run`) returns the calling replica's activations.
- `apply_gradients` (inside `strategy.run`) checks the replica's gradients, then `merge_call` hands every
  replica's gradients to one cross-replica function: per table, each replica's activation gradients are mapped
  back onto its unique ids, summed into the global unique ids, and the optimizer is applied ONCE per unique id
  (one sparse update per shard and variable). The result equals one engine step on the global batch.

The state between `enqueue`, `dequeue` and `apply_gradients` is the step's tensors, kept on this object while a
trace or an eager step runs: `enqueue` and `strategy.run` must run in the same `tf.function` (or both eagerly),
as in upstream's examples.
"""

import contextlib
import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import tensorflow as tf

from embedding import combiners, preprocessing
from embedding import config as config_lib
from embedding import devices as devices_lib
from embedding.engine import EmbeddingEngine
from embedding.sparsecore_checkpoint import RestoresSparseCoreCheckpoints

# Python control flow on Python values only: AutoGraph conversion would just cost tracing time.
_do_not_convert = tf.autograph.experimental.do_not_convert

__all__ = ["TPUEmbedding"]


# ------------------------------------------------------------------------------------------------- strategy helpers
def replica_devices(strategy: tf.distribute.Strategy) -> Optional[List[str]]:
    """The strategy's replica devices, or None for the default strategy (no placement)."""
    try:
        return list(strategy.extended.worker_devices)
    except (RuntimeError, AttributeError, NotImplementedError):
        return None


def local_values(
    strategy: tf.distribute.Strategy, structure: Any, num_replicas: int, what: str, replicate_plain: bool
) -> List[Any]:
    """Splits a nest whose leaves may be per-replica values into one nest per replica.

    Args:
      strategy: The strategy owning the values.
      structure: A nest of `PerReplica`/`Mirrored` values, plain values or None.
      num_replicas: Number of replicas.
      what: Name of the argument, for errors.
      replicate_plain: Use a plain (non-distributed) leaf for every replica (values that `merge_call` did not
        wrap because every replica passed the same object). Otherwise a plain leaf is an error with > 1 replica.

    Returns:
      A list of `num_replicas` nests.
    """
    flat = tf.nest.flatten(structure)
    columns = []
    for leaf in flat:
        if leaf is None:
            columns.append([None] * num_replicas)
            continue
        values = list(strategy.experimental_local_results(leaf))
        if len(values) == 1 and num_replicas > 1:
            if not replicate_plain:
                raise ValueError(
                    f"The {what} hold a non-distributed value but the strategy has {num_replicas} replicas. Pass "
                    f"per-replica values (e.g. from strategy.distribute_datasets_from_function), or call enqueue "
                    f"once per replica with device=."
                )
            values = values * num_replicas
        if len(values) != num_replicas:
            raise ValueError(f"The {what} have {len(values)} per-replica values, expected {num_replicas}.")
        columns.append(values)
    return [tf.nest.pack_sequence_as(structure, [col[r] for col in columns]) for r in range(num_replicas)]


def current_replica_id() -> int:
    """The calling replica's index (0 outside `strategy.run` for single-replica strategies)."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        return 0
    rid = tf.get_static_value(ctx.replica_id_in_sync_group)
    if rid is None:
        raise RuntimeError("Cannot determine the replica id statically in this replica context.")
    return int(rid)


def _graph_or_none() -> Optional[tf.Graph]:
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def graph_is_reachable(graph: Optional[tf.Graph]) -> bool:
    """Whether tensors created in `graph` (None: eagerly) can be used where we are now."""
    if graph is None:
        return tf.executing_eagerly()
    current = tf.compat.v1.get_default_graph()
    while current is not None:
        if current is graph:
            return True
        current = getattr(current, "outer_graph", None)
    return False


def device_scope(devices: Optional[Sequence[str]], r: int):
    """`tf.device(devices[r])`, or no scope without devices."""
    if not devices:
        return contextlib.nullcontext()
    return tf.device(devices[r])


def merge_unique_ids(per_replica_ids: Sequence[tf.Tensor]):
    """Global unique ids of a table over replicas, and each replica's position map into them.

    Returns:
      `(unique_ids, remaps)`; `remaps[r]` maps replica r's unique ids into `unique_ids` (None: identity).
    """
    if len(per_replica_ids) == 1:
        return per_replica_ids[0], [None]
    sizes = tf.stack([tf.size(u, out_type=tf.int32) for u in per_replica_ids])
    unique_ids, index = tf.unique(tf.concat(list(per_replica_ids), 0), out_idx=tf.int32)
    return unique_ids, tf.split(index, sizes, num=len(per_replica_ids))


def global_table_gradient(
    per_replica_grads: Sequence[tf.Tensor], remaps: Sequence[Optional[tf.Tensor]], unique_ids: tf.Tensor
) -> tf.Tensor:
    """Sums per-replica `[U_r, dim]` table gradients into the global unique ids `[U, dim]`."""
    if len(per_replica_grads) == 1:
        return per_replica_grads[0]
    return tf.math.unsorted_segment_sum(
        tf.concat(list(per_replica_grads), 0), tf.concat(list(remaps), 0), tf.size(unique_ids, out_type=tf.int32)
    )


def replicated_engine(
    feature_config: Any, optimizer: Any, pipeline_execution_with_tensor_core: bool, partition_strategy: str
):
    """The set-up shared by the TF2 mid-level APIs: the current strategy, its replica devices and the engine.

    Returns:
      `(strategy, devices, num_replicas, engine)`; the engine has one table shard per replica device.

    Raises:
      ValueError: `pipeline_execution_with_tensor_core=True` (only TPUEstimator implements it), or bad configs.
    """
    if pipeline_execution_with_tensor_core:
        raise ValueError(
            "pipeline_execution_with_tensor_core=True (one-step-stale activations) is not implemented by the "
            "TF2 mid-level API here; pass False. TPUEstimator's EmbeddingConfigSpec supports it."
        )
    strategy = tf.distribute.get_strategy()
    devices = replica_devices(strategy)
    with tf.init_scope():
        engine = EmbeddingEngine(
            feature_config,
            optimizer,
            num_shards=len(devices) if devices else 1,
            devices=devices,
            partition_strategy=partition_strategy,
        )
    return strategy, devices, int(strategy.num_replicas_in_sync), engine


def check_gradients(
    flat_grads: Sequence[Any], paths: Sequence[str], expected: Sequence[tf.TensorShape]
) -> List[Optional[tf.Tensor]]:
    """Upstream's gradient checks: tensors (or None) of the activation shape. IndexedSlices are densified."""
    out = []
    for grad, path, shape in zip(flat_grads, paths, expected):
        if grad is None:
            out.append(None)
            continue
        if isinstance(grad, tf.IndexedSlices):
            grad = tf.convert_to_tensor(grad)
        if not isinstance(grad, tf.Tensor):
            raise ValueError(f"found non-tensor type: {type(grad)} at path {path}.")
        if not grad.shape.is_compatible_with(shape):
            raise ValueError(
                "Found gradient of shape {} at path {}. Expected shape {}.".format(
                    grad.shape, path, shape.as_list() if shape.rank is not None else shape
                )
            )
        out.append(grad)
    return out


def table_key(table: Any) -> Any:
    """The user's table object (upstream's when the config was converted)."""
    source = getattr(table, "source", None)
    return source if source is not None else table


# ----------------------------------------------------------------------------------------------------- the step
@dataclasses.dataclass
class _Step:
    """One enqueued step: everything dequeue / apply_gradients need."""

    training: bool
    graph: Optional[tf.Graph]
    batches: List[Dict[str, preprocessing.TableBatch]]  # per replica
    unique_ids: Dict[str, tf.Tensor]  # per table, global
    remaps: Dict[str, List[Optional[tf.Tensor]]]  # per table, per replica
    activations: List[Any]  # per replica, nest like feature_config
    applied: bool = False


class TPUEmbedding(RestoresSparseCoreCheckpoints, tf.Module):
    """The mid-level TPU embedding API on CPU/GPU devices under any `tf.distribute` strategy.

    Args:
      feature_config: A nest of `FeatureConfig` (ours or `tf.tpu.experimental.embedding`'s).
      optimizer: Global embedding optimizer (`embedding.SGD`, `Adagrad`, `AdagradMomentum`, `Adam`, `FTRL` or
        upstream's) for tables without their own, or None (no slots; lookups only).
      pipeline_execution_with_tensor_core: must be False: one-step-stale pipelining is implemented by the
        estimator path only (ValueError otherwise).

    Raises:
      ValueError: unsupported optimizer, duplicate table names, bad configs.
    """

    def __init__(self, feature_config: Any, optimizer: Any, pipeline_execution_with_tensor_core: bool = False):
        super().__init__(name=None)
        self._strategy, self._devices, self._num_replicas, self._engine = replicated_engine(
            feature_config, optimizer, pipeline_execution_with_tensor_core, self._partition_strategy()
        )
        self._paths = self._engine.feature_keys
        self._features_of_table = self._engine.features_by_table
        configured = [f.output_shape for _, f in config_lib.feature_paths(self._engine.feature_config)]
        self._output_shapes: List[tf.TensorShape] = [tf.TensorShape(s) for s in configured]
        self._built = False
        self._step: Optional[_Step] = None
        self._partial: Optional[Dict[str, Any]] = None
        self._table_views: Dict[str, Any] = {}
        self._init_sparsecore_restore(self._engine.tables)

    @staticmethod
    def _partition_strategy() -> str:
        return "div"

    # ------------------------------------------------------------------------------------------- properties
    @property
    def engine(self) -> EmbeddingEngine:
        """The underlying `EmbeddingEngine`."""
        return self._engine

    @property
    def embedding_tables(self) -> Dict[Any, Any]:
        """`{TableConfig: table}`: a `tf.Variable` (one shard) or a `ShardedVariable` ('div' shards).

        Keys are the user's table objects. Use the values with `serving_embedding_lookup`, `tf.nn.embedding_lookup`
        or `tf.convert_to_tensor` (full table).
        """
        return {table_key(t.table_config): self._table_view(name) for name, t in self._engine.tables.items()}

    def _table_view(self, name: str) -> Any:
        if name not in self._table_views:
            self._table_views[name] = _as_variable(self._engine.tables[name].shards, name)
        return self._table_views[name]

    # ------------------------------------------------------------------------------------------------ build
    def build(self, per_replica_input_shapes: Any = None, per_replica_batch_size: Optional[int] = None) -> None:
        """Fixes the per-replica output shapes (tables already exist; this never creates variables).

        Args:
          per_replica_input_shapes: A nest like `feature_config` of per-replica input shapes, or an int batch size.
          per_replica_batch_size: Deprecated upstream: the per-replica batch size.

        Raises:
          ValueError: shapes inconsistent with the feature configs.
        """
        shapes = None
        if per_replica_input_shapes is not None:
            if isinstance(per_replica_input_shapes, int):
                shapes = self._shapes_from_batch_size(per_replica_input_shapes)
            else:
                try:
                    flat = tf.__internal__.nest.flatten_up_to(self._engine.feature_config, per_replica_input_shapes)
                except (ValueError, TypeError) as e:
                    raise ValueError(
                        f"per_replica_input_shapes must have the structure of feature_config: {e}"
                    ) from None
                shapes = self._shapes_from_input_shapes([tf.TensorShape(s) for s in flat])
        elif per_replica_batch_size is not None:
            shapes = self._shapes_from_batch_size(per_replica_batch_size)
        if shapes is not None:
            self._check_output_shapes(shapes)
            self._update_output_shapes(shapes)
        self._built = True

    def _features(self):
        return [f for _, f in config_lib.feature_paths(self._engine.feature_config)]

    def _shapes_from_batch_size(self, batch_size: int) -> List[tf.TensorShape]:
        out = []
        for f in self._features():
            if f.output_shape.rank is None and f.max_sequence_length > 0:
                out.append(tf.TensorShape([batch_size, f.max_sequence_length]))
            else:
                out.append(tf.TensorShape([batch_size]))
        return out

    def _shapes_from_input_shapes(self, input_shapes: List[tf.TensorShape]) -> List[tf.TensorShape]:
        out = []
        for shape, f in zip(input_shapes, self._features()):
            if shape.rank is None or shape.rank < 1:
                raise ValueError(f"Received input tensor of shape {shape}. Rank must be 1 and above")
            out.append(self._shapes_from_input_shapes_one(shape, f))
        return out

    def _check_output_shapes(self, incoming: List[tf.TensorShape]) -> None:
        for path, old, new in zip(self._paths, self._output_shapes, incoming):
            if old.rank is None or new.rank is None or old.rank == 0 or new.rank == 0:
                continue
            if new.rank in (1, 2) and old.rank > new.rank:
                continue  # Ragged/sequence inputs: checked when preprocessing.
            if old.rank != new.rank or not old.is_compatible_with(new):
                raise ValueError(
                    f"Inconsistent shape founded for input feature {path}, Output shape is set to be "
                    f"{old}, But got incoming output shape {new}"
                )

    def _update_output_shapes(self, incoming: List[tf.TensorShape]) -> None:
        self._output_shapes = [old if old.rank else new for old, new in zip(self._output_shapes, incoming)]

    def _input_output_shapes(self, features: Any) -> List[tf.TensorShape]:
        """Static per-replica output shapes implied by one replica's inputs (unknown where not implied)."""
        out = []
        for value, f in zip(tf.nest.flatten(features), self._features()):
            shape = tf.TensorShape(getattr(value, "shape", None))
            rank = shape.rank
            bad = (
                rank is None
                or rank == 0
                or (isinstance(value, tf.SparseTensor) and rank < 2)
                or (isinstance(value, tf.RaggedTensor) and rank != 2)
                or (
                    isinstance(value, tf.Tensor)
                    and rank > 1
                    and shape[-1] != 1
                    and not (rank == 2 and f.max_sequence_length > 0)
                )
            )
            # Bad inputs are reported, naming the feature, by preprocessing.
            out.append(tf.TensorShape(None) if bad else self._shapes_from_input_shapes_one(shape, f))
        return out

    @staticmethod
    def _shapes_from_input_shapes_one(shape: tf.TensorShape, f: Any) -> tf.TensorShape:
        if shape.rank == 2 and shape[-1] != 1 and f.output_shape.rank is None and f.max_sequence_length > 0:
            return tf.TensorShape([shape[0], f.max_sequence_length])
        return shape if shape.rank == 1 else shape[:-1]

    # ---------------------------------------------------------------------------------------------- enqueue
    @_do_not_convert
    def enqueue(
        self,
        features: Any,
        weights: Any = None,
        training: bool = True,
        name: Optional[str] = None,
        device: Optional[str] = None,
    ) -> None:
        """Enqueues one step's ids: preprocessing and the table lookups of every replica.

        Call it outside `strategy.run` with per-replica values (e.g. from `distribute_datasets_from_function`),
        once per replica with `device=` set to that replica's device, or inside `strategy.run` with the replica's
        inputs (they are gathered with `merge_call`). With one replica, plain tensors are accepted anywhere.

        Args:
          features: A nest like `feature_config` of dense / sparse / ragged int ids (per replica batch).
          weights: None or a matching nest of weights (None entries allowed; not for dense ids).
          training: False for a forward-only step: `apply_gradients` is then an error.
          name: Optional name scope.
          device: The replica device this batch belongs to (per-replica form); None otherwise.

        Raises:
          ValueError / TypeError: structure, rank, shape, weight or device errors (naming the feature).
        """
        with tf.name_scope(name or "embedding_enqueue"):
            if self._in_replica_context() and device is None:
                ctx = tf.distribute.get_replica_context()
                ctx.merge_call(
                    lambda _, f, w: self._enqueue_all(f, w, training, replicate_plain=True), args=(features, weights)
                )
                return
            if device is not None:
                self._enqueue_one(features, weights, training, device)
                return
            self._enqueue_all(features, weights, training, replicate_plain=False)

    def _check_structure(self, features: Any, weights: Any) -> None:
        try:
            tf.nest.assert_same_structure(self._engine.feature_config, features)
            if weights is not None:
                tf.nest.assert_same_structure(self._engine.feature_config, weights)
        except (ValueError, TypeError) as e:
            raise type(e)(f"features/weights must have the structure of feature_config: {e}") from None

    def _enqueue_all(self, features: Any, weights: Any, training: bool, replicate_plain: bool) -> None:
        self._check_structure(features, weights)
        per_features = local_values(self._strategy, features, self._num_replicas, "features", replicate_plain)
        per_weights = (
            local_values(self._strategy, weights, self._num_replicas, "weights", replicate_plain)
            if weights is not None
            else [None] * self._num_replicas
        )
        self._run_enqueue(per_features, per_weights, training)

    def _enqueue_one(self, features: Any, weights: Any, training: bool, device: str) -> None:
        self._check_structure(features, weights)
        if self._num_replicas == 1:
            self._run_enqueue([features], [weights], training)
            return
        wanted = devices_lib.canonical_device(device)
        known = [devices_lib.canonical_device(d) for d in self._devices]
        if wanted not in known:
            raise ValueError(
                f"Device {device} passed to enqueue is not a replica device of the strategy ({list(self._devices)})."
            )
        r = known.index(wanted)
        graph = _graph_or_none()
        if self._partial is None or self._partial["graph"] is not graph or r in self._partial["parts"]:
            self._partial = {"graph": graph, "training": training, "parts": {}}
        if self._partial["training"] != training:
            raise ValueError("All per-replica enqueue calls of a step must use the same `training` value.")
        self._partial["parts"][r] = (features, weights)
        if len(self._partial["parts"]) == self._num_replicas:
            parts = self._partial["parts"]
            self._partial = None
            self._run_enqueue(
                [parts[k][0] for k in range(self._num_replicas)],
                [parts[k][1] for k in range(self._num_replicas)],
                training,
            )

    def _run_enqueue(self, per_features: List[Any], per_weights: List[Any], training: bool) -> None:
        incoming = self._input_output_shapes(per_features[0])
        self._check_output_shapes(incoming)
        self._update_output_shapes(incoming)
        self._built = True
        batches = []
        for features, weights in zip(per_features, per_weights):
            batches.append(self._engine.preprocess(features, weights))
        unique_ids, remaps, rows = {}, {}, {}
        for name, table in self._engine.tables.items():
            unique_ids[name], remaps[name] = merge_unique_ids([b[name].unique_ids for b in batches])
            rows[name] = table.lookup(unique_ids[name])
        activations = []
        for r, batch in enumerate(batches):
            acts: Dict[str, tf.Tensor] = {}
            with device_scope(self._devices if self._num_replicas > 1 else None, r):
                for name in self._engine.tables:
                    remap = remaps[name][r]
                    table_rows = rows[name] if remap is None else tf.gather(rows[name], remap)
                    acts.update(combiners.combine_table(table_rows, batch[name]))
            activations.append(tf.nest.pack_sequence_as(self._engine.feature_config, [acts[k] for k in self._paths]))
        self._step = _Step(
            training=bool(training),
            graph=_graph_or_none(),
            batches=batches,
            unique_ids=unique_ids,
            remaps=remaps,
            activations=activations,
        )

    # ---------------------------------------------------------------------------------------------- dequeue
    def _current_step(self, what: str) -> _Step:
        if self._step is None:
            if not self._built:
                raise RuntimeError(
                    f"{what} called on unbuilt TPUEmbedding object. Please either call enqueue first "
                    f"or manually call the build method."
                )
            raise RuntimeError(f"{what} called before enqueue: enqueue the step's features first.")
        if not graph_is_reachable(self._step.graph):
            raise RuntimeError(
                f"{what} must run in the same tf.function as the enqueue of its step (or both eagerly); the last "
                f"enqueue ran {'eagerly' if self._step.graph is None else 'in another function'}."
            )
        return self._step

    def _in_replica_context(self) -> bool:
        """Inside `strategy.run` of our strategy (always, outside any scope, for the default strategy)."""
        ctx = tf.distribute.get_replica_context()
        return ctx is not None and ctx.strategy is self._strategy

    def _replica_for_call(self, what: str) -> int:
        if not self._in_replica_context():
            if self._num_replicas > 1:
                raise RuntimeError(f"{what} must be called inside strategy.run with {self._num_replicas} replicas.")
            return 0
        return current_replica_id()

    @_do_not_convert
    def dequeue(self, name: Optional[str] = None) -> Any:
        """The activations of the calling replica for the enqueued step.

        Returns:
          A nest like `feature_config` of float32 tensors `output_shape + [dim]`.

        Raises:
          RuntimeError: nothing enqueued (or enqueued in another function), or called in cross-replica context
            with several replicas.
        """
        step = self._current_step("dequeue")
        r = self._replica_for_call("dequeue")
        with tf.name_scope(name or "embedding_dequeue"):
            return tf.nest.map_structure(tf.identity, step.activations[r])

    # -------------------------------------------------------------------------------------- apply_gradients
    @_do_not_convert
    def apply_gradients(self, gradients: Any, name: Optional[str] = None) -> None:
        """Applies the embedding optimizers with the gradients of the dequeued activations.

        Inside `strategy.run`, every replica calls this with its gradients; the gradients of all replicas are
        summed per unique id and each table's optimizer is applied once per id.

        Args:
          gradients: A nest like `feature_config`; None entries mean zero gradient.
          name: Optional name scope.

        Raises:
          RuntimeError: nothing enqueued, the step was enqueued with `training=False`, or already applied.
          ValueError / TypeError: structure mismatch, non-tensor gradient or wrong gradient shape.
        """
        step = self._current_step("apply_gradients")
        if not step.training:
            raise RuntimeError(
                "apply_gradients called for a step enqueued with training=False; enqueue the step "
                "with training=True to train (upstream would deadlock here)."
            )
        tf.nest.assert_same_structure(self._engine.feature_config, gradients)
        with tf.name_scope(name or "embedding_apply_gradients"):
            if not self._in_replica_context():
                self._apply_all(step, gradients, replicate_plain=self._num_replicas == 1)
                return
            r = current_replica_id()
            expected = [a.shape for a in tf.nest.flatten(step.activations[r])]
            flat = check_gradients(tf.nest.flatten(gradients), self._paths, expected)
            gradients = tf.nest.pack_sequence_as(self._engine.feature_config, flat)
            tf.distribute.get_replica_context().merge_call(
                lambda _, g: self._apply_all(step, g, replicate_plain=True), args=(gradients,)
            )

    def _apply_all(self, step: _Step, gradients: Any, replicate_plain: bool) -> None:
        if step.applied:
            raise RuntimeError("apply_gradients was already called for this step; enqueue a new step first.")
        per_grads = local_values(self._strategy, gradients, self._num_replicas, "gradients", replicate_plain)
        table_grads: Dict[str, List[tf.Tensor]] = {name: [] for name in self._engine.tables}
        for r, grads in enumerate(per_grads):
            flat = check_gradients(
                tf.nest.flatten(grads), self._paths, [a.shape for a in tf.nest.flatten(step.activations[r])]
            )
            by_key = dict(zip(self._paths, flat))
            for name, table in self._engine.tables.items():
                batch = step.batches[r][name]
                g = combiners.backprop_table({k: by_key[k] for k in self._features_of_table[name]}, batch)
                if g.shape.rank == 2 and g.shape[1] == 0:
                    g = tf.zeros(tf.stack([batch.num_unique, table.dim]), tf.float32)
                table_grads[name].append(g)
        grads = {
            name: global_table_gradient(table_grads[name], step.remaps[name], step.unique_ids[name])
            for name in self._engine.tables
        }
        self._engine.apply_table_gradients(step.unique_ids, grads, sorted_ids=False)
        step.applied = True

    # ------------------------------------------------------------------------------------------- checkpoints
    def _trackable_children(self, save_type="checkpoint", **kwargs):
        del kwargs
        return trackable_children(self._engine, save_type, self._table_view)


def trackable_children(engine: EmbeddingEngine, save_type: Any, table_view: Any) -> Dict[str, Any]:
    """Checkpoint children of an API object holding `engine`.

    Checkpoints get upstream's logical layout `{table}`, `{table}/{slot}` whatever the number of shards;
    SavedModels get the physical variables, which exported functions capture (`table_view(name)` for a table).
    """
    if str(getattr(save_type, "value", save_type)).lower() == "savedmodel":
        out = {}
        for name, table in engine.tables.items():
            view = table_view(name)
            if isinstance(view, (list, tuple, tf.Tensor)):
                for k, var in enumerate(table.shards):
                    out[f"{name}/shard_{k}"] = var
            else:
                out[name] = view
            for slot in table.slot_names:
                for k, var in enumerate(table.slot_shards(slot)):
                    out[f"{name}/{slot}/shard_{k}"] = var
        return out
    return engine.logical_tensors()


def _as_variable(shards: Sequence[tf.Variable], name: str) -> Any:
    """One shard: the variable; several ('div' order): a ShardedVariable over them."""
    if len(shards) == 1:
        return shards[0]
    return tf.__internal__.distribute.ShardedVariable(list(shards), name=name)
