"""`TPUEmbeddingV2`: the SparseCore-style mid-level API (`tf.tpu.experimental.embedding.TPUEmbeddingV2`).

    with strategy.scope():
      embedding = TPUEmbeddingV2(feature_config, Adagrad(0.1))

    def step(features, labels):               # inside strategy.run
      with tf.GradientTape() as tape:
        activations, preserved = embedding(features)
        loss = ...
      embedding.apply_gradients(tape.gradient(loss, activations), preserved)

- Tables are sharded 'mod' (`id % num_shards`) over the strategy's replica devices.
- `enqueue` preprocesses one replica's batch into, per table, the CSR form of docs/SEMANTICS.md 11
  (`preprocessing.PartitionedCsrFormatTensor`: ids sorted, (sample, id) duplicates merged, combiner scale folded
  into the gains, partitioned by shard). `dequeue` computes the activations FROM that form, and returns it as the
  preserved outputs; `apply_gradients` computes the table gradients from it again.
- `apply_gradients` inside `strategy.run` hands every replica's (gradients, preserved outputs) to one
  cross-replica function (`merge_call`): per table, the contributions of all replicas are summed per unique id and
  the optimizer is applied ONCE per id, as `TPUEmbedding` does.
"""

from typing import Any, Dict, List, Optional

import tensorflow as tf

from embedding import combiners, preprocessing
from embedding import config as config_lib
from embedding import devices as devices_lib
from embedding import tpu_embedding as mid_level
from embedding.engine import EmbeddingEngine
from embedding.sparsecore_checkpoint import RestoresSparseCoreCheckpoints, sparse_core_children
from embedding.sparsecore_layout import SparseCoreTopology

# Python control flow on Python values only: AutoGraph conversion would just cost tracing time.
_do_not_convert = tf.autograph.experimental.do_not_convert

__all__ = ["TPUEmbeddingV2", "EnqueuedFeatures"]

PartitionedCsrFormatTensor = preprocessing.PartitionedCsrFormatTensor


class EnqueuedFeatures(dict):
    """`{table_name: PartitionedCsrFormatTensor}` returned by `enqueue`, plus each feature's output shape.

    Attributes:
      output_shapes: `{feature_key: output shape}` (Python ints where static, int32 scalars otherwise).
    """

    def __init__(self, tensors: Dict[str, PartitionedCsrFormatTensor], output_shapes: Dict[str, List[Any]]):
        super().__init__(tensors)
        self.output_shapes = output_shapes


class TPUEmbeddingV2(RestoresSparseCoreCheckpoints, tf.Module):
    """SparseCore-style mid-level embedding API on CPU/GPU devices under any `tf.distribute` strategy.

    Args:
      feature_config: A nest of `FeatureConfig` (ours or upstream's).
      optimizer: Global embedding optimizer for tables without their own, or None (lookups only).
      pipeline_execution_with_tensor_core: must be False (ValueError otherwise); see `TPUEmbedding`.
      sparse_core_topology: The TPU to write checkpoints for (`SparseCoreTopology(num_chips, sparse_cores_per_chip)`):
        checkpoints then hold every table and slot in that TPU's SparseCore layout (each table alone in its stack)
        with the layouts proto, so a TPU's `TPUEmbeddingV2` restores them (`embedding.sparsecore_checkpoint`). None:
        the logical layout `{table}`, `{table}/{slot}`. Restores read either kind, whatever this is.

    Raises:
      ValueError: unsupported optimizer, duplicate table names, bad configs.
    """

    def __init__(
        self,
        feature_config: Any,
        optimizer: Any = None,
        pipeline_execution_with_tensor_core: bool = False,
        sparse_core_topology: Optional[SparseCoreTopology] = None,
    ):
        if sparse_core_topology is not None and not isinstance(sparse_core_topology, SparseCoreTopology):
            raise ValueError(
                f"sparse_core_topology must be a SparseCoreTopology(num_chips, sparse_cores_per_chip), got "
                f"{sparse_core_topology!r}."
            )
        super().__init__(name=None)
        self._strategy, self._devices, self._num_replicas, self._engine = mid_level.replicated_engine(
            feature_config, optimizer, pipeline_execution_with_tensor_core, "mod"
        )
        keyed = config_lib.feature_paths(self._engine.feature_config)
        self._paths = [key for key, _ in keyed]
        self._features_of_table = self._engine.features_by_table
        self._dims = {key: int(f.table.dim) for key, f in keyed}
        self._table_of = {key: f.table.name for key, f in keyed}
        self._output_shapes: Dict[str, tf.TensorShape] = {key: tf.TensorShape(f.output_shape) for key, f in keyed}
        self._built = False
        self._init_sparsecore_restore(self._engine.tables)
        children = None
        if sparse_core_topology is not None:
            children = sparse_core_children(self._engine.tables, sparse_core_topology)
        object.__setattr__(self, "_checkpoint_children", children)  # Untracked: `_trackable_children` returns them.

    # ------------------------------------------------------------------------------------------- properties
    @property
    def engine(self) -> EmbeddingEngine:
        """The underlying `EmbeddingEngine`."""
        return self._engine

    def build(self) -> None:
        """Marks the object built (tables exist from construction)."""
        self._built = True

    def _view(self, shards: List[tf.Variable], full: Any) -> Any:
        return shards[0] if len(shards) == 1 else full()

    def _table_view(self, name: str) -> Any:
        table = self._engine.tables[name]
        return self._view(table.shards, table.read_full_table)

    @property
    def embedding_tables(self) -> Dict[Any, Any]:
        """`{TableConfig: table}`: the `tf.Variable` (one shard) or the full logical table as a tensor."""
        return {mid_level.table_key(t.table_config): self._table_view(name) for name, t in self._engine.tables.items()}

    @property
    def embedding_table_shards(self) -> Dict[Any, List[Any]]:
        """`{TableConfig: [(device, shard variable)]}` in shard order (shard k holds ids `k, k + n, ...`)."""
        return {
            mid_level.table_key(t.table_config): [(var.device, var) for var in t.shards]
            for t in self._engine.tables.values()
        }

    @property
    def variables(self) -> Dict[Any, Dict[str, Any]]:
        """`{TableConfig: {'parameters': table, slot: slot table}}` (views as in `embedding_tables`)."""
        out = {}
        for name, t in self._engine.tables.items():
            entry = {"parameters": self._table_view(name)}
            for slot in t.slot_names:
                entry[slot] = self._view(t.slot_shards(slot), lambda s=slot, t=t: t.read_full_slot(s))
            out[mid_level.table_key(t.table_config)] = entry
        return out

    # ---------------------------------------------------------------------------------------------- lookups
    @_do_not_convert
    def enqueue(self, features: Any, weights: Any = None, device: Optional[str] = None) -> EnqueuedFeatures:
        """Preprocesses one replica's features into the per-table CSR form.

        Args:
          features: A nest like `feature_config` of dense / sparse / ragged int ids.
          weights: None or a matching nest of weights.
          device: Optional device whose host CPU runs the preprocessing.

        Returns:
          An `EnqueuedFeatures` for `dequeue`.

        Raises:
          ValueError / TypeError: structure, rank, shape and weight errors naming the feature.
        """
        tf.nest.assert_same_structure(self._engine.feature_config, features)
        if weights is not None:
            tf.nest.assert_same_structure(self._engine.feature_config, weights)
        self._built = True
        scope = tf.device(devices_lib.host_device(device)) if device else tf.name_scope("embedding_enqueue")
        with scope:
            batches = self._engine.preprocess(features, weights)
            shapes = {}
            tensors = {}
            for name, batch in batches.items():
                for key, segments in batch.features.items():
                    shapes[key] = list(segments.output_shape)
                tensors[name] = preprocessing.to_partitioned_csr(
                    batch, self._engine.tables[name].num_shards, "mod", self._engine.tables[name].vocabulary_size
                )
        for key, shape in shapes.items():
            self._output_shapes[key] = tf.TensorShape([d if isinstance(d, int) else None for d in shape])
        return EnqueuedFeatures(tensors, shapes)

    @_do_not_convert
    def dequeue(
        self, partitioned_tensors: Dict[str, PartitionedCsrFormatTensor]
    ) -> "tuple[Any, Dict[str, PartitionedCsrFormatTensor]]":
        """Activations computed from the CSR form (one gather per shard and table).

        Args:
          partitioned_tensors: The output of `enqueue` (or a plain `{table: PartitionedCsrFormatTensor}` when every
            feature's output shape is static).

        Returns:
          `(activations, preserved_outputs)`: a nest like `feature_config`, and `{table: PartitionedCsrFormatTensor}`.
        """
        shapes = getattr(partitioned_tensors, "output_shapes", None) or self._static_shapes()
        acts: Dict[str, tf.Tensor] = {}
        for name, table in self._engine.tables.items():
            csr = _csr(partitioned_tensors, name)
            unique_ids, index = tf.unique(csr.sorted_token_ids, out_idx=tf.int32)
            rows = table.lookup(unique_ids)
            qc = getattr(table.table_config, "quantization_config", None)
            if qc is not None:
                rows = combiners.quantize(rows, qc)
            gathered = tf.gather(rows, index) * csr.sorted_gains[:, None]
            summed = tf.math.unsorted_segment_sum(gathered, csr.sorted_sample_ids, csr.sample_count)
            keys = self._features_of_table[name]
            sizes = [_numel(shapes[k]) for k in keys]
            parts = tf.split(summed, tf.stack(sizes), num=len(keys)) if len(keys) > 1 else [summed]
            for key, part in zip(keys, parts):
                acts[key] = tf.reshape(part, list(shapes[key]) + [table.dim])
        activations = tf.nest.pack_sequence_as(self._engine.feature_config, [acts[k] for k in self._paths])
        return activations, {name: _csr(partitioned_tensors, name) for name in self._engine.tables}

    @_do_not_convert
    def embedding_lookup(
        self, features: Any, weights: Any = None
    ) -> "tuple[Any, Dict[str, PartitionedCsrFormatTensor]]":
        """`dequeue(enqueue(features, weights))`: activations and the preserved CSR outputs.

        Raises:
          ValueError / TypeError: bad inputs (see `enqueue`).
        """
        return self.dequeue(self.enqueue(features, weights))

    def __call__(self, features: Any, weights: Any = None) -> "tuple[Any, Dict[str, PartitionedCsrFormatTensor]]":
        return self.embedding_lookup(features, weights)

    def _static_shapes(self) -> Dict[str, List[int]]:
        out = {}
        for key in self._paths:
            shape = self._output_shapes[key]
            if not shape.is_fully_defined():
                raise ValueError(
                    f"Input Feature {key} has output shape set as {shape} which is not fully defined. "
                    f"Please specify the fully defined shape in either FeatureConfig or pass the "
                    f"output of enqueue to dequeue."
                )
            out[key] = shape.as_list()
        return out

    # ------------------------------------------------------------------------------------------- training
    @_do_not_convert
    def apply_gradients(self, gradients: Any, preserved_outputs: Dict[str, PartitionedCsrFormatTensor]) -> None:
        """Applies the embedding optimizers; inside `strategy.run`, once for all replicas.

        Args:
          gradients: A nest like `feature_config` of activation gradients; None entries mean zero gradient.
          preserved_outputs: The second output of `embedding_lookup` / `dequeue`.

        Raises:
          RuntimeError: not built (no lookup yet).
          ValueError / TypeError: structure mismatch, non-tensor gradient or wrong gradient shape.
        """
        if not self._built:
            raise RuntimeError(
                "apply_gradients called on unbuilt TPUEmbeddingV2 object. Please either call the "
                "embedding lookup method first or manually call the build method."
            )
        tf.nest.assert_same_structure(self._engine.feature_config, gradients)
        expected = [self._output_shapes[k].concatenate([self._dims[k]]) for k in self._paths]
        flat = mid_level.check_gradients(tf.nest.flatten(gradients), self._paths, expected)
        stacked = self._stack_gradients(dict(zip(self._paths, flat)), preserved_outputs)
        preserved = {name: _csr(preserved_outputs, name) for name in self._engine.tables}
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.strategy is self._strategy and self._num_replicas > 1:
            ctx.merge_call(lambda _, s, p: self._apply_merged(s, p), args=(stacked, preserved))
        else:
            self._apply_all([stacked], [preserved])

    def _apply_merged(self, stacked: Dict[str, Any], preserved: Dict[str, Any]) -> None:
        self._apply_all(
            mid_level.local_values(self._strategy, stacked, self._num_replicas, "gradients", True),
            mid_level.local_values(self._strategy, preserved, self._num_replicas, "preserved outputs", True),
        )

    def _stack_gradients(
        self, by_key: Dict[str, Optional[tf.Tensor]], preserved: Dict[str, Any]
    ) -> Dict[str, tf.Tensor]:
        """Per table, the features' gradients as rows `[sample_count, dim]` in CSR sample order."""
        out = {}
        for name, table in self._engine.tables.items():
            parts = []
            missing = [k for k in self._features_of_table[name] if by_key[k] is None]
            for key in self._features_of_table[name]:
                grad = by_key[key]
                if grad is None:
                    rows = self._missing_rows(key, missing, by_key, _csr(preserved, name), name)
                    grad = tf.zeros(tf.stack([rows, table.dim]), tf.float32)
                parts.append(tf.reshape(tf.cast(grad, tf.float32), [-1, table.dim]))
            out[name] = tf.concat(parts, 0) if len(parts) > 1 else parts[0]
        return out

    def _missing_rows(self, key: str, missing: List[str], by_key: Dict[str, Any], csr: Any, name: str) -> Any:
        shape = self._output_shapes[key]
        if shape.is_fully_defined():
            return int(shape.num_elements())
        if len(missing) == 1:  # The rest of the table's samples.
            given = [
                tf.size(by_key[k], out_type=tf.int32) // self._dims[k]
                for k in self._features_of_table[name]
                if by_key[k] is not None
            ]
            return csr.sample_count - tf.add_n(given) if given else csr.sample_count
        raise ValueError(
            f"No gradient for feature {key} whose output shape {shape} is not static: pass a zero "
            f"gradient instead of None."
        )

    def _apply_all(self, per_stacked: List[Dict[str, Any]], per_preserved: List[Dict[str, Any]]) -> None:
        """One optimizer application per table over the contributions of every replica."""
        unique_ids, grads = {}, {}
        for name in self._engine.tables:
            tokens, contributions = [], []
            for r in range(len(per_stacked)):
                csr = _csr(per_preserved[r], name)
                rows = per_stacked[r][name]
                tokens.append(csr.sorted_token_ids)
                contributions.append(tf.gather(rows, csr.sorted_sample_ids) * csr.sorted_gains[:, None])
            all_tokens = tf.concat(tokens, 0) if len(tokens) > 1 else tokens[0]
            all_contributions = tf.concat(contributions, 0) if len(contributions) > 1 else contributions[0]
            ids, index = tf.unique(all_tokens, out_idx=tf.int32)
            unique_ids[name] = ids
            grads[name] = tf.math.unsorted_segment_sum(all_contributions, index, tf.size(ids, out_type=tf.int32))
        self._engine.apply_table_gradients(unique_ids, grads, sorted_ids=False)

    # ------------------------------------------------------------------------------------------- checkpoints
    def _trackable_children(self, save_type="checkpoint", **kwargs):
        del kwargs
        if self._checkpoint_children is not None and str(getattr(save_type, "value", save_type)) == "checkpoint":
            return dict(self._checkpoint_children)
        return mid_level.trackable_children(self._engine, save_type, self._table_view)


def _csr(tensors: Any, name: str) -> PartitionedCsrFormatTensor:
    try:
        value = tensors[name]
    except KeyError:
        raise ValueError(f"No preserved output for table '{name}'; pass the outputs of this object's lookup.") from None
    if not isinstance(value, PartitionedCsrFormatTensor):
        if isinstance(value, tuple) and len(value) == len(PartitionedCsrFormatTensor._fields):
            return PartitionedCsrFormatTensor(*value)
        raise ValueError(f"Expect PartitionedCsrFormatTensor but get {type(value)}.")
    return value


def _numel(shape: List[Any]) -> Any:
    total: Any = 1
    for d in shape:
        total = total * d
    return total if not isinstance(total, int) else tf.constant(total, tf.int32)
