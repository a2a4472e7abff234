"""The embedding engine: sharded tables, deduplicated lookups and one optimizer step per unique id.

One training step of the engine:

1. `preprocess(features, weights)`: per table, the ids of every feature sharing it, deduplicated, plus a combine
   plan per feature (`embedding.preprocessing`).
2. `activations(batches)`: per table ONE lookup of its unique ids (one gather per shard), then each feature's
   rows are combined (`embedding.combiners`) into activations shaped like `feature_config`.
3. `apply_gradients(batches, activation_grads)`: per feature, the activation gradient is mapped back onto the
   table's unique ids; the features sharing a table are SUMMED; then ONE optimizer application per table (one
   sparse update per shard and variable). Non-finite gradients and tables without optimizer are errors raised
   before any table changes.

The engine is independent of estimators and works eagerly, in `tf.function` and in TF1 graphs / sessions
(including `tf.compat.v1.while_loop` bodies).
"""

import collections
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from embedding import checkpointing, combiners, graph_constants, preprocessing
from embedding import config as config_lib
from embedding.shard_exchange import ShardExchange
from embedding.sharded_table import ShardedTable


def unfoldable_zero() -> tf.Tensor:
    """A float32 scalar 0 that Grappler cannot fold (`x * zero` stays an op): a placeholder with default in graphs."""
    if tf.executing_eagerly():
        return tf.zeros([], tf.float32)
    return tf.compat.v1.placeholder_with_default(tf.zeros([], tf.float32), [], name="check_finite_zero")


def check_finite(
    values: Union[tf.Tensor, Sequence[tf.Tensor]], message: str, zero: Optional[tf.Tensor] = None
) -> tf.Tensor:
    """Raises InvalidArgumentError (`message` + ": Tensor had NaN values", "Inf values" or "Inf and NaN values")
    if `values` have a NaN or Inf.

    Args:
      values: a float tensor or a list of them (checked together: one scalar, one check).
      message: the error's prefix.
      zero: the `unfoldable_zero()` to multiply by; a new one if None.

    Returns:
      The checked scalar (a gate for control dependencies in graph mode).
    """
    return check_all_finite([(values, message)], zero)


def check_all_finite(
    groups: Sequence[Tuple[Union[tf.Tensor, Sequence[tf.Tensor]], str]], zero: Optional[tf.Tensor] = None
) -> tf.Tensor:
    """One finiteness check of several groups of tensors; the error names the first non-finite group.

    Exact and several times cheaper than `tf.debugging.check_numerics` on the whole tensors (measured 7x on
    26 x [18000, 64]): `sum(values * 0)` is 0 when every value is finite and NaN otherwise (NaN * 0 and Inf * 0
    are NaN; no overflow is possible), so only one scalar for all groups is checked, by ONE `tf.cond`. Only when
    that scalar is not finite are the groups scanned again, in order, by `check_numerics`, which raises
    InvalidArgumentError with the group's message + ": Tensor had NaN values", "Inf values" or "Inf and NaN
    values". The graph holds a few ops per tensor and one conditional for all groups (a conditional per group
    made the check most of a many-table training graph).

    Args:
      groups: `(values, message)` pairs: a float tensor or a list of them, checked together, and the prefix of
        the error naming them.
      zero: the `unfoldable_zero()` to multiply by; a new one if None.

    Returns:
      The checked scalar, 0 (a gate for control dependencies in graph mode).
    """
    groups = [
        ([tf.cast(tf.convert_to_tensor(v), tf.float32) for v in (vs if isinstance(vs, (list, tuple)) else [vs])], msg)
        for vs, msg in groups
    ]
    zero = unfoldable_zero() if zero is None else zero

    def all_axes(value: tf.Tensor) -> Optional[tf.Tensor]:
        rank = value.shape.rank
        return None if rank is None else graph_constants.constant(list(range(rank)), tf.int32)

    with graph_constants.sharing():
        sums = [tf.reduce_sum(v * zero, axis=all_axes(v)) for values, _ in groups for v in values]
    total = sums[0] if len(sums) == 1 else tf.add_n(sums)

    def report_non_finite():
        if any(len(values) > 1 for values, _ in groups):
            flat_shape, concat_axis = tf.constant([-1]), tf.constant(0)
        checked = []
        for values, message in groups:
            # One tensor is checked as it is; several are flattened and joined.
            if len(values) == 1:
                flat = values[0]
            else:
                flat = tf.concat([tf.reshape(v, flat_shape) for v in values], concat_axis)
            # check_numerics names what it finds: "NaN", "Inf" or "Inf and NaN"; one after the other, so the first
            # non-finite group is the one reported.
            with tf.control_dependencies(checked[-1:]):
                checked.append(tf.debugging.check_numerics(flat, message).op)
        with tf.control_dependencies(checked[-1:]):
            return tf.identity(total)

    return tf.cond(tf.math.is_finite(total), lambda: total, report_non_finite)


def _learning_rate(optimizer: Any) -> tf.Tensor:
    """The optimizer's learning rate tensor; a number is a constant shared by the tables that have it."""
    value = optimizer.learning_rate
    if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
        return graph_constants.constant(value, tf.float32)
    return optimizer.learning_rate_tensor()


class EmbeddingEngine(tf.Module):
    """Sharded embedding tables for a structure of features, with TPU embedding semantics.

    Args:
      feature_config: A nest of `FeatureConfig` (ours or upstream's; converted). Tables are resolved as
        upstream does: unnamed tables are named `table_{i}`, tables without an optimizer get `optimizer`.
      optimizer: Global embedding optimizer (anything `embedding.optimizers.to_optimizer` accepts) or None.
      num_shards: Shards per table.
      devices: Device of each shard (shard k on `devices[k % len(devices)]`), or None.
      partition_strategy: 'div' or 'mod'.
      checkpoint_names: Optional `{table_name: checkpoint key}` (default: the table name).
      slot_checkpoint_names: Optional `{table_name: {slot: checkpoint key}}` (default `{key}/{slot}`).
      register_in_graph: See `ShardedTable`.
      shard_exchange: When each host has a process and graph of its own (the tables' shards on every host's
        devices, `devices` naming them all), carries this process's gradient pieces to the shards' owners; every
        update then goes through it and updates only the shards this process owns (`shard_exchange.py`). Every
        process must make the same updates in the same order. None: one graph holds every part.

    Raises:
      ValueError: bad configs, duplicate table names or checkpoint keys.
    """

    def __init__(
        self,
        feature_config: Any,
        optimizer: Any = None,
        num_shards: int = 1,
        devices: Optional[Sequence[Any]] = None,
        partition_strategy: str = "div",
        checkpoint_names: Optional[Mapping[str, str]] = None,
        slot_checkpoint_names: Optional[Mapping[str, Mapping[str, str]]] = None,
        register_in_graph: bool = True,
        shard_exchange: Optional[ShardExchange] = None,
    ):
        super().__init__(name=None)
        self._exchange = shard_exchange
        feature_config = config_lib.plain_nest(feature_config)
        resolved = config_lib.resolve_feature_config(feature_config)
        if isinstance(feature_config, list) and all(
            isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in feature_config
        ):
            # Already resolved pairs: the structure is the flat list of features.
            structure = [f for _, f in resolved]
        else:
            structure = tf.nest.pack_sequence_as(feature_config, [f for _, f in resolved])
        # Plain attribute (no tf.Module wrapping of dicts/lists: the nest must stay as given).
        object.__setattr__(self, "_feature_config", structure)
        table_configs = config_lib.resolve_tables(resolved, optimizer)
        self._feature_keys = [key for key, _ in config_lib.feature_paths(structure)]
        checkpoint_names = dict(checkpoint_names or {})
        slot_checkpoint_names = dict(slot_checkpoint_names or {})
        self._table_configs = collections.OrderedDict((t.name, t) for t in table_configs)
        tables = collections.OrderedDict()
        with graph_constants.sharing():  # The tables' initial values share their constants.
            for name, table in self._table_configs.items():
                tables[name] = ShardedTable(
                    table,
                    table.optimizer,
                    num_shards=num_shards,
                    devices=devices,
                    partition_strategy=partition_strategy,
                    name=name,
                    checkpoint_name=checkpoint_names.get(name),
                    slot_checkpoint_names=slot_checkpoint_names.get(name),
                    register_in_graph=register_in_graph,
                )
        self._tables = tables
        self._features_of_table = config_lib.features_by_table(structure)
        seen = {}
        for name, table in tables.items():
            for key in table.logical_tensors():
                if key in seen:
                    raise ValueError(f"Checkpoint key {key!r} is used by tables {seen[key]!r} and {name!r}.")
                seen[key] = name

    # ------------------------------------------------------------------------------------------- properties
    @property
    def feature_config(self) -> Any:
        """The feature structure (our FeatureConfig objects)."""
        return self._feature_config

    @property
    def tables(self) -> "collections.OrderedDict[str, ShardedTable]":
        """`{table_name: ShardedTable}` in table order."""
        return collections.OrderedDict(self._tables)

    @property
    def table_configs(self) -> "collections.OrderedDict[str, Any]":
        """`{table_name: TableConfig}` in table order."""
        return collections.OrderedDict(self._table_configs)

    @property
    def feature_keys(self) -> List[str]:
        """Feature keys (as `config.feature_paths`) in `tf.nest.flatten` order."""
        return list(self._feature_keys)

    @property
    def features_by_table(self) -> "collections.OrderedDict[str, List[str]]":
        """`{table_name: [feature keys]}` in table order, the keys in `tf.nest.flatten` order."""
        return collections.OrderedDict((name, list(keys)) for name, keys in self._features_of_table.items())

    @property
    def initializer(self) -> Optional[tf.Operation]:
        """Op initialising every table and slot shard (TF1 graphs); None eagerly."""
        if tf.executing_eagerly():
            return None
        return tf.group(*[t.initializer for t in self._tables.values()])

    # ------------------------------------------------------------------------------------------------- step
    def preprocess(
        self,
        features: Any,
        weights: Any = None,
        validate: bool = True,
        python_ops: bool = True,
        deduplicate: bool = True,
    ) -> "collections.OrderedDict[str, preprocessing.TableBatch]":
        """Deduplicated per-table batches of one step (see `preprocessing.preprocess_features`).

        Args:
          features: A nest like `feature_config` of dense / sparse / ragged int ids.
          weights: None or a matching nest of weights (None entries allowed).
          validate: Attach run-time checks (ids in range, weights >= 0) naming the feature.
          python_ops: Allow a NumPy host call for large batches; False: TensorFlow ops only (remote hosts).
          deduplicate: False for batches only looked up (evaluation, prediction): the same activations without
            the dedup ops; such batches cannot be passed to `apply_gradients`.

        Returns:
          `{table_name: TableBatch}`.
        """
        return preprocessing.preprocess_features(
            features, self._feature_config, weights, validate=validate, python_ops=python_ops, deduplicate=deduplicate
        )

    def activations(self, batches: Mapping[str, Any]) -> Any:
        """Activations of every feature: one lookup per table, then combining per feature.

        Args:
          batches: The output of `preprocess`.

        Returns:
          A nest like `feature_config` of float32 activations `output_shape + [dim]`.
        """
        acts: Dict[str, tf.Tensor] = {}
        with graph_constants.sharing():
            for name, table in self._tables.items():
                batch = self._batch(batches, name)
                rows = table.lookup(batch.unique_ids, sorted_ids=batch.deduplicated)  # Deduplicated: ascending.
                acts.update(combiners.combine_table(rows, batch, self._table_configs[name].quantization_config))
        return tf.nest.pack_sequence_as(self._feature_config, [acts[k] for k in self._feature_keys])

    def __call__(self, features: Any, weights: Any = None) -> Any:
        """`activations(preprocess(features, weights))`."""
        return self.activations(self.preprocess(features, weights))

    def table_gradients(
        self, batches: Mapping[str, Any], activation_grads: Any
    ) -> "collections.OrderedDict[str, tf.Tensor]":
        """Per table, the gradient `[U, dim]` of its unique ids, summed over the features sharing it.

        Args:
          batches: The output of `preprocess`.
          activation_grads: A nest like `feature_config`; None entries mean zero gradient.

        Raises:
          ValueError / TypeError: structure or static shape mismatch (naming the feature path).
        """
        flat = self._flatten_grads(activation_grads)
        out = collections.OrderedDict()
        for name, table in self._tables.items():
            batch = self._batch(batches, name)
            table_grads = {}
            for key in self._features_of_table[name]:
                grad = flat[key]
                if grad is None:
                    continue
                grad = tf.convert_to_tensor(grad, dtype=tf.float32)
                expected = batch.features[key].static_output_shape.concatenate([table.dim])
                if not grad.shape.is_compatible_with(expected):
                    raise ValueError(f"Found gradient of shape {grad.shape} at path {key}. Expected shape {expected}.")
                table_grads[key] = grad
            if table_grads:
                total = combiners.backprop_table(table_grads, batch)
            else:
                total = tf.zeros(tf.stack([batch.num_unique, table.dim]), tf.float32)
            out[name] = total
        return out

    def apply_gradients(
        self,
        batches: Mapping[str, Any],
        activation_grads: Any,
        learning_rate_override: Any = None,
        gradient_multiplier: Any = None,
        check_numerics: bool = True,
    ) -> Optional[tf.Operation]:
        """Applies the embedding optimizers: ONE application per table per step.

        Args:
          batches: The output of `preprocess` for this step.
          activation_grads: Gradients of the loss w.r.t. `activations(batches)`, a nest like `feature_config`;
            None entries mean zero gradient (lazy optimizers then still update the looked-up rows' state).
          learning_rate_override: Scalar used for every table instead of the optimizers' learning rates.
          gradient_multiplier: Optional scalar multiplying every table gradient.
          check_numerics: Raise InvalidArgumentError naming the table on NaN/Inf gradients, before any update.

        Returns:
          The update op in graph mode; None eagerly (the update has run).

        Raises:
          ValueError: a table has no optimizer (naming it), gradient structure/shape mismatch, or a batch
            preprocessed with `deduplicate=False`.
        """
        if self._exchange is not None:
            return self.apply_gradients_of_parts(
                [(batches, activation_grads, self._exchange.host_device)],
                learning_rate_override,
                gradient_multiplier,
                check_numerics,
            )
        with tf.name_scope("embedding_apply_gradients"), graph_constants.sharing():
            multiplier = None if gradient_multiplier is None else tf.cast(gradient_multiplier, tf.float32)
            checks, grads = self._checked_table_gradients(batches, activation_grads, multiplier, check_numerics)
            unique_ids = collections.OrderedDict((n, self._batch(batches, n).unique_ids) for n in self._tables)
            self._require_optimizers()
            return self._apply(unique_ids, grads, learning_rate_override, checks, sorted_ids=True)

    def apply_gradients_of_parts(
        self,
        parts: Sequence[Tuple[Mapping[str, Any], Any, Any]],
        learning_rate_override: Any = None,
        gradient_multiplier: Any = None,
        check_numerics: bool = True,
    ) -> Optional[tf.Operation]:
        """`apply_gradients` of a batch preprocessed in parts, each part on its own device (e.g. one per host).

        Per part, on its device: the checks of `apply_gradients` and the gradient of its unique ids. Each table
        shard then sums the parts' gradients per id and applies its optimizer ONCE per unique id of the whole
        batch (`ShardedTable.apply_summed_gradient_ops`): the update `apply_gradients` makes for the joined batch,
        up to the float summation order. Every table update waits for every part's checks. One part is
        `apply_gradients` on its device.

        Args:
          parts: per part, `(batches, activation_grads, device)`: the output of `preprocess` for its rows, the
            gradients of their activations (as in `apply_gradients`), and where its work runs.
          learning_rate_override: as in `apply_gradients`.
          gradient_multiplier: as in `apply_gradients`.
          check_numerics: as in `apply_gradients`.

        Returns:
          As `apply_gradients`.

        Raises:
          ValueError: as `apply_gradients`.
        """
        if len(parts) == 1 and self._exchange is None:
            # One part is the batch: its ids are already unique, nothing to sum across parts.
            batches, activation_grads, device = parts[0]
            with graph_constants.placed(device):
                return self.apply_gradients(
                    batches, activation_grads, learning_rate_override, gradient_multiplier, check_numerics
                )
        self._require_optimizers()
        with tf.name_scope("embedding_apply_gradients"), graph_constants.sharing():
            multiplier = None if gradient_multiplier is None else tf.cast(gradient_multiplier, tf.float32)
            checks: List[tf.Tensor] = []
            per_table: Dict[str, List[Tuple[tf.Tensor, tf.Tensor, Any]]] = {name: [] for name in self._tables}
            for batches, activation_grads, device in parts:
                with graph_constants.placed(device):
                    part_checks, grads = self._checked_table_gradients(
                        batches, activation_grads, multiplier, check_numerics
                    )
                    checks += part_checks
                    for name, grad in grads.items():
                        per_table[name].append((self._batch(batches, name).unique_ids, grad, device))
            return self._apply_parts(per_table, learning_rate_override, checks, sorted_ids=True)

    def _checked_table_gradients(
        self, batches: Mapping[str, Any], activation_grads: Any, multiplier: Optional[tf.Tensor], check_numerics: bool
    ) -> Tuple[List[tf.Tensor], "collections.OrderedDict[str, tf.Tensor]"]:
        """`(finiteness checks, {table: gradient of its unique ids, times the multiplier})` of one preprocessed
        batch: the work `apply_gradients` and each part of `apply_gradients_of_parts` do before the update."""
        for name in self._tables:
            if not self._batch(batches, name).deduplicated:
                raise ValueError(
                    f"The batch of table '{name}' was preprocessed with deduplicate=False (for lookups only): an "
                    "update needs each id once. Preprocess the step with deduplicate=True to apply gradients."
                )
        checks = self._check_activation_gradients(batches, activation_grads, multiplier) if check_numerics else []
        grads = self.table_gradients(batches, activation_grads)
        if multiplier is not None:
            grads = collections.OrderedDict((n, g * multiplier) for n, g in grads.items())
        return checks, grads

    def _check_activation_gradients(
        self, batches: Mapping[str, Any], activation_grads: Any, multiplier: Optional[tf.Tensor]
    ) -> List[tf.Tensor]:
        """One finiteness check (naming the table) of what each table's gradient is made of: the activation
        gradients of its features, the combine gains of its weighted features and the multiplier. A table gradient
        is a gain-weighted sum of activation gradient rows, so this catches every NaN/Inf input at 1/ids-per-example
        of the cost of checking the `[U, dim]` table gradient (10x less data in workload B). Gains without weights
        are 1, 1/n or 1/sqrt(n) (n >= 1 ids in the row): finite by construction, not checked."""
        flat = self._flatten_grads(activation_grads)
        groups = []
        for name in self._tables:
            batch = self._batch(batches, name)
            keys = [k for k in self._features_of_table[name] if flat[k] is not None]
            values = [flat[k] for k in keys] + [batch.features[k].gains for k in keys if batch.features[k].weighted]
            if multiplier is not None:
                values.append(multiplier)
            if values:
                groups.append((values, self._non_finite_message(name)))
        return [check_all_finite(groups)] if groups else []

    def apply_table_gradients(
        self,
        unique_ids: Mapping[str, Any],
        grads: Mapping[str, Any],
        learning_rate_override: Any = None,
        check_numerics: bool = True,
        sorted_ids: bool = True,
    ) -> Optional[tf.Operation]:
        """Applies per-table gradients already accumulated per unique id: ONE application per table.

        Args:
          unique_ids: `{table_name: sorted unique ids [U]}` (as `preprocess` gives them).
          grads: `{table_name: [U, dim]}` gradients of those ids.
          learning_rate_override: Scalar used for every table instead of the optimizers' learning rates.
          check_numerics: Raise InvalidArgumentError naming the table on NaN/Inf gradients, before any update.
          sorted_ids: Whether each table's ids are sorted ascending (as `preprocess` gives them; enables the
            cheaper shard split).

        Returns:
          The update op in graph mode; None eagerly (the update has run).

        Raises:
          ValueError: a table has no optimizer (naming it).
        """
        if self._exchange is not None:
            return self.apply_table_gradients_of_parts(
                [(unique_ids, grads, self._exchange.host_device)], learning_rate_override, check_numerics, sorted_ids
            )
        self._require_optimizers()
        with graph_constants.sharing():
            checks = []
            if check_numerics:
                groups = [(grads[name], self._non_finite_message(name)) for name in self._tables]
                checks = [check_all_finite(groups)]
            return self._apply(unique_ids, grads, learning_rate_override, checks, sorted_ids=sorted_ids)

    def apply_table_gradients_of_parts(
        self,
        parts: Sequence[Tuple[Mapping[str, Any], Mapping[str, Any], Any]],
        learning_rate_override: Any = None,
        check_numerics: bool = True,
        sorted_ids: bool = True,
    ) -> Optional[tf.Operation]:
        """`apply_table_gradients` of several parts of a batch, each deduplicated on its own device.

        Args:
          parts: per part, `(unique_ids, grads, device)` as `apply_table_gradients` takes them, and where the
            part's checks and shard split run. The parts' gradients are summed per id on each table shard, which
            applies its optimizer once per unique id (see `apply_gradients_of_parts`). One part is
            `apply_table_gradients` on its device.
          learning_rate_override: Scalar used for every table instead of the optimizers' learning rates.
          check_numerics: Raise InvalidArgumentError naming the table on NaN/Inf gradients, before any update.
          sorted_ids: Whether each part's ids are ascending.

        Returns:
          The update op in graph mode; None eagerly (the update has run).

        Raises:
          ValueError: a table has no optimizer (naming it).
        """
        if len(parts) == 1 and self._exchange is None:
            # One part is the batch: its ids are already unique, nothing to sum across parts.
            unique_ids, grads, device = parts[0]
            with graph_constants.placed(device):
                return self.apply_table_gradients(unique_ids, grads, learning_rate_override, check_numerics, sorted_ids)
        self._require_optimizers()
        with graph_constants.sharing():
            checks = []
            per_table: Dict[str, List[Tuple[Any, Any, Any]]] = {name: [] for name in self._tables}
            for unique_ids, grads, device in parts:
                with graph_constants.placed(device):
                    if check_numerics:
                        groups = [(grads[name], self._non_finite_message(name)) for name in self._tables]
                        checks.append(check_all_finite(groups))
                for name in self._tables:
                    per_table[name].append((unique_ids[name], grads[name], device))
            return self._apply_parts(per_table, learning_rate_override, checks, sorted_ids=sorted_ids)

    def _apply_parts(
        self,
        per_table: Mapping[str, Sequence[Tuple[Any, Any, Any]]],
        learning_rate_override: Any,
        checks: Sequence[tf.Tensor],
        sorted_ids: bool,
    ) -> Optional[tf.Operation]:
        """`_apply` of several parts per table: `(ids, grads, device)` each, summed per id on the shards."""
        inputs = [ids for n in self._tables for ids, _, _ in per_table[n]]
        inputs += list(checks) + [grads for n in self._tables for _, grads, _ in per_table[n]]
        return self._gated_updates(
            inputs,
            learning_rate_override,
            lambda table, name, lr: table.apply_summed_gradient_ops(
                per_table[name], lr, sorted_ids=sorted_ids, exchange=self._exchange
            ),
        )

    def _apply(
        self,
        unique_ids: Mapping[str, Any],
        grads: Mapping[str, Any],
        learning_rate_override: Any,
        checks: Sequence[tf.Tensor],
        sorted_ids: bool,
    ) -> Optional[tf.Operation]:
        """One optimizer application per table, every one of them after ALL `checks` and inputs of all tables."""
        # Every table update waits for every check (id validation travels with unique_ids), so a bad input for
        # one table leaves all tables unchanged. The waits meet in ONE gate op: each op of the updates then has
        # a single control input, so the graph grows linearly with the number of tables (a control dependency
        # on the checks themselves would give every op one input per table).
        inputs = [unique_ids[n] for n in self._tables] + list(checks) + [grads[n] for n in self._tables]
        return self._gated_updates(
            inputs,
            learning_rate_override,
            lambda table, name, lr: table.apply_gradient_ops(unique_ids[name], grads[name], lr, sorted_ids=sorted_ids),
        )

    def _gated_updates(self, inputs: List[Any], learning_rate_override: Any, update: Any) -> Optional[tf.Operation]:
        """`update(table, name, learning_rate)` of every table, each after ALL `inputs` (checks included)."""
        gate = None
        if not tf.executing_eagerly():
            gate = tf.group(*inputs, name="all_tables_checked")
        ops = []
        learning_rates: Dict[int, Any] = {}  # A callable learning rate is evaluated once per optimizer.
        with tf.control_dependencies([gate] if gate is not None else None):
            for name, table in self._tables.items():
                lr = learning_rate_override
                if lr is None:
                    opt = table.optimizer
                    if id(opt) not in learning_rates:
                        learning_rates[id(opt)] = _learning_rate(opt)
                    lr = learning_rates[id(opt)]
                ops.extend(update(table, name, lr))
        if tf.executing_eagerly():
            return None
        return tf.group(*ops)

    # ------------------------------------------------------------------------------------------- helpers
    def _require_optimizers(self) -> None:
        missing = [name for name, t in self._tables.items() if t.optimizer is None]
        if missing:
            raise ValueError(
                f"Cannot train embedding tables {missing}: they have no optimizer. Give the "
                f"TableConfig an optimizer or pass a global optimizer."
            )

    def _non_finite_message(self, name: str) -> str:
        features = ", ".join(repr(k) for k in self._features_of_table[name])
        return f"Non-finite embedding gradient for table '{name}' (features {features})"

    def _batch(self, batches: Mapping[str, Any], name: str) -> Any:
        try:
            return batches[name]
        except KeyError:
            raise ValueError(f"No preprocessed batch for table '{name}'; pass the output of preprocess().") from None

    def _flatten_grads(self, activation_grads: Any) -> Dict[str, Any]:
        try:
            tf.nest.assert_same_structure(self._feature_config, activation_grads, check_types=False)
        except (ValueError, TypeError) as e:
            raise type(e)(f"activation gradients must have the structure of feature_config: {e}") from None
        flat = tf.nest.flatten(activation_grads)
        return dict(zip(self._feature_keys, flat))

    # ---------------------------------------------------------------------------------- logical layout
    def logical_tensors(self) -> Dict[str, checkpointing.LogicalTensor]:
        """Checkpoint key -> LogicalTensor over all tables (table, then its slots)."""
        out = {}
        for table in self._tables.values():
            out.update(table.logical_tensors())
        return out

    def saveables(self) -> list:
        """TF1 SaveableObjects of every table and slot (logical layout)."""
        return [s for t in self._tables.values() for s in t.saveables()]

    def shard_variables(self) -> List[tf.Variable]:
        """All physical shard variables (to exclude from a TF1 Saver var_list)."""
        return [v for t in self._tables.values() for v in t.shard_variables()]

    def _trackable_children(self, save_type=None, **kwargs):
        # Upstream TPUEmbedding layout: children `{table}` and `{table}/{slot}` of this object.
        del save_type, kwargs
        return self.logical_tensors()
