"""The bridge between `TPUEstimator` and the embedding engine.

Per step, on the host: the embedding features are popped from every replica's `features`, the ids of all replicas
are joined into the global batch, deduplicated per table and looked up once per table (one gather per table
shard); each replica gets its rows of the activations under the feature key. The activations pass through a
gradient tap (upstream's "dummy table variable" trick): the model's own optimizer differentiates its (scaled)
loss with respect to a dummy variable per table, and the tap records the activation gradient of every replica.
After the replicas are built, those gradients are joined and the engine applies the embedding optimizer once per
unique id. The model's optimizer never touches the tables.

On a cluster of several hosts, each host does the host stage for its own replicas on its CPU: its ids are
deduplicated before they cross the network, its unique ids' rows come back to it from the table shards and it
combines them; each shard sums the hosts' gradients per unique id before its one update.
"""

import collections
import copy
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

import embedding
import embedding.serving
from embedding import checkpointing, graph_constants
from tpu_estimator import _estimator_lib, _tf_internal
from tpu_estimator.embedding_spec import SEQUENCE_LENGTH_SUFFIX, EmbeddingConfigSpec, resolve_embedding_config
from tpu_estimator.input_pipeline import WholeHostBatch

ModeKeys = _estimator_lib.ModeKeys


def _join_replicas(pieces: List[Any]) -> Any:
    """Concatenates per-replica inputs (dense, sparse or ragged) on the batch axis; a host batch the input pipeline
    handed whole to the replicas is that batch."""
    if isinstance(pieces[0], WholeHostBatch):
        if any(piece is not pieces[0] for piece in pieces):
            raise ValueError("The replicas joined here read different host batches.")
        return pieces[0].tensor
    if len(pieces) == 1:
        return pieces[0]
    if isinstance(pieces[0], tf.SparseTensor):
        return tf.sparse.concat(axis=0, sp_inputs=pieces, expand_nonconcat_dims=True)
    return tf.concat(pieces, axis=graph_constants.constant(0, tf.int32))


def _as_engine_input(ids: Any, sequence: bool) -> Any:
    """Ids as the engine reads them.

    Dense multi-id rows `[B, k]` (k > 1) of a combined feature become ragged rows (all ids kept); the `[B, T, 1]`
    sparse ids of sequence categorical columns become `[B, T]`.
    """
    if isinstance(ids, tf.SparseTensor):
        if sequence and ids.shape.rank == 3:
            return tf.sparse.reshape(ids, ids.dense_shape[:2])
        return ids
    if isinstance(ids, tf.RaggedTensor):
        return ids
    ids = tf.convert_to_tensor(ids)
    if not sequence and ids.shape.rank == 2 and ids.shape[1] != 1:
        return tf.RaggedTensor.from_tensor(ids)
    return ids


def _sequence_lengths(ids: Any, max_sequence_length: int, batch_size: int) -> tf.Tensor:
    if isinstance(ids, tf.SparseTensor):
        rows = ids.indices[:, 0]
        lengths = tf.math.bincount(tf.cast(rows, tf.int32), minlength=batch_size, maxlength=batch_size, dtype=tf.int64)
    elif isinstance(ids, tf.RaggedTensor):
        lengths = tf.cast(ids.row_lengths(), tf.int64)
    else:
        lengths = tf.fill([batch_size], tf.cast(tf.shape(ids)[1], tf.int64))
    return tf.minimum(lengths, max_sequence_length)


class TappedGradients(object):
    """The activation gradients one step's replicas produced, by replica and feature key.

    The gradient tap's gradient function records them while a replica's `model_fn` differentiates its loss; when
    replicas are traced once, the other replicas' are the copies of replica 0's (`add_replica`).
    """

    def __init__(self):
        self._gradients: Dict[Tuple[int, str], tf.Tensor] = {}

    def record(self, replica: int, key: str, gradient: tf.Tensor) -> None:
        """Records `replica`'s gradient of the activation of feature `key`."""
        self._gradients[(replica, key)] = gradient

    def of_replica(self, replica: int) -> Dict[str, tf.Tensor]:
        """`replica`'s gradients by feature key (features it does not differentiate are absent)."""
        return {key: gradient for (r, key), gradient in self._gradients.items() if r == replica}

    def add_replica(self, replica: int, gradients: Dict[str, tf.Tensor]) -> None:
        """Records `replica`'s gradients by feature key (its copy of replica 0's)."""
        for key, gradient in gradients.items():
            self.record(replica, key, gradient)

    def get(self, replica: int, key: str) -> Optional[tf.Tensor]:
        """`replica`'s gradient of feature `key`, or None."""
        return self._gradients.get((replica, key))


def _tap(dummy: tf.Tensor, activation: tf.Tensor, tapped: TappedGradients, replica: int, key: str) -> tf.Tensor:
    """`activation` as is; its gradient is recorded in `tapped` and the dummy variable gets a zero gradient (the
    model's optimizer then sees a trainable variable per table, as upstream's dummy table variables give it)."""

    @tf.custom_gradient
    def tap(dummy_value, activation_value):
        def grad(upstream):
            tapped.record(replica, key, upstream)
            return tf.zeros_like(dummy_value), None

        return activation_value, grad  # custom_gradient's IdentityN gives the tapped output.

    return tap(dummy, activation)


class EmbeddingBridge(object):
    """Feeds one mode's replicas with engine activations and trains the tables from their gradients.

    Args:
      spec: the `EmbeddingConfigSpec`.
      num_replicas: number of replicas (and table shards).
      devices: the replica devices (table shard k lives on device k).
      mode: a `ModeKeys` value; only TRAIN creates optimizer slots and updates tables.
      replica_batch_size: the per-replica batch size (`params['batch_size']` of `model_fn`).
      host_device: where ids are joined and deduplicated, activations split and updates computed.
      python_ops: whether the host stage may call this process's Python (`tf.numpy_function`); False when
        `host_device` is another process's (a cluster's host).
      host_devices: on a cluster, the CPU of every host (host 0's is `host_device`); replicas are host-major.
        Each host then does the host stage of its own replicas. None: one host.

    Raises:
      ValueError: invalid spec contents.
    """

    def __init__(
        self,
        spec: EmbeddingConfigSpec,
        num_replicas: int,
        devices: List[str],
        mode: str,
        replica_batch_size: int,
        host_device: str,
        python_ops: bool = True,
        host_devices: Optional[List[str]] = None,
    ):
        self._spec = spec
        self._host_device = host_device
        host_devices = list(host_devices) if host_devices else [host_device]
        per_host = num_replicas // len(host_devices)
        # (CPU, replicas) of every host.
        self._hosts = [(d, list(range(h * per_host, (h + 1) * per_host))) for h, d in enumerate(host_devices)]
        self._python_ops = python_ops
        self._replica_batch_size = replica_batch_size
        self._resolved = resolve_embedding_config(spec)
        self._num_replicas = num_replicas
        self._training = mode == ModeKeys.TRAIN
        feature_config = self._resolved.feature_config
        if not self._training:
            # Inference: tables without optimizer (no slots are created or restored).
            tables = {name: copy.copy(table) for name, table in self._resolved.tables.items()}
            for table in tables.values():
                table.optimizer = None
            feature_config = collections.OrderedDict(
                (
                    key,
                    embedding.FeatureConfig(tables[f.table.name], max_sequence_length=f.max_sequence_length, name=key),
                )
                for key, f in feature_config.items()
            )
        with tf.compat.v1.variable_scope("tpu_embedding", reuse=tf.compat.v1.AUTO_REUSE):
            self.engine = embedding.EmbeddingEngine(
                feature_config,
                num_shards=num_replicas,
                devices=devices,
                partition_strategy=spec.partition_strategy,
                register_in_graph=False,
            )
        self._dummies = collections.OrderedDict()
        if self._training:
            for name in self.engine.tables:
                self._dummies[name] = tf.compat.v1.get_variable(
                    "tpu_embedding_dummy_table_variable_{}".format(name),
                    shape=[1],
                    dtype=tf.float32,
                    initializer=tf.compat.v1.zeros_initializer(),
                    use_resource=True,
                    trainable=True,
                    collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                )
        self._names_set = False

    @property
    def features(self):
        return self._resolved.features

    @property
    def multi_host(self) -> bool:
        """Whether each host does the host stage of its own replicas (a cluster of several hosts)."""
        return len(self._hosts) > 1

    @property
    def pipelined(self) -> bool:
        """Whether TRAIN overlaps step t's update with step t+1 (`pipeline_execution_with_tensor_core`)."""
        return self._training and bool(self._spec.pipeline_execution_with_tensor_core)

    # ---- host side: inputs -> activations -----------------------------------------------------------------

    def _check_inputs(self, features: Any) -> None:
        if not isinstance(features, dict):
            raise ValueError(
                "With an embedding_config_spec, input_fn must return features as a dict; got {}.".format(type(features))
            )
        for feature in self._resolved.features:
            if feature.column is not None:
                missing = [
                    k
                    for k in _tf_internal.categorical_input_keys(feature.column.categorical_column)
                    if k not in features
                ]
                if missing:
                    raise ValueError(
                        "Embedding feature {!r} (table {!r}) needs input features {} that input_fn did not "
                        "return.".format(feature.key, feature.table_name, missing)
                    )
            elif feature.key not in features:
                raise ValueError(
                    "Embedding feature {!r} (table {!r}) is missing from the features returned by input_fn.".format(
                        feature.key, feature.table_name
                    )
                )
            elif feature.weight_key and feature.weight_key not in features:
                raise ValueError(
                    "Weights {!r} of embedding feature {!r} are missing from the features returned by input_fn.".format(
                        feature.weight_key, feature.key
                    )
                )

    def _ids_and_weights(self, raw: dict) -> Tuple[dict, dict]:
        """Per feature, the ids and weights (or None) of the raw embedding inputs."""
        ids, weights = {}, {}
        for feature in self._resolved.features:
            if feature.column is not None:
                ids[feature.key], weights[feature.key] = _tf_internal.categorical_ids(
                    feature.column.categorical_column, raw
                )
            else:
                ids[feature.key] = raw[feature.key]
                weights[feature.key] = raw[feature.weight_key] if feature.weight_key else None
        return ids, weights

    def preprocess(self, per_replica: List[Tuple[Any, Any]]):
        """Host stage (no table access): pops the embedding inputs, joins the replicas, deduplicates per table.

        The raw inputs of all replicas (of each host, on a cluster) are joined first (cheap for dense ids) and turned
        into ids once.

        Returns:
          `(per_replica, batches)`: each replica's `(features, labels)` without the embedding inputs (plus the
          sequence lengths of sequence features), and the engine batches of the global step (on several hosts: a
          list of each host's batches, built on its CPU).
        """
        for features, _ in per_replica:
            self._check_inputs(features)
        if not self.multi_host:
            return self._preprocess_host(per_replica, self._host_device)
        outputs, batches = [], []
        for device, replicas in self._hosts:
            with graph_constants.placed(device):
                host_outputs, host_batches = self._preprocess_host([per_replica[r] for r in replicas], device)
            outputs += host_outputs
            batches.append(host_batches)
        return outputs, batches

    def _preprocess_host(self, per_replica: List[Tuple[Any, Any]], host_device: str):
        """`preprocess` of the replicas of one host, on its CPU."""
        num_replicas = len(per_replica)
        raw_keys = [k for k in self._resolved.raw_keys if k in per_replica[0][0]]
        global_ids, global_weights = collections.OrderedDict(), collections.OrderedDict()
        outputs = []
        with tf.device(host_device), tf.name_scope("tpu_embedding_inputs"), graph_constants.sharing():
            raw = {key: _join_replicas([features[key] for features, _ in per_replica]) for key in raw_keys}
            ids, weights = self._ids_and_weights(raw)
            lengths = {}
            for feature in self._resolved.features:
                sequence = feature.max_sequence_length > 0
                global_ids[feature.key] = _as_engine_input(ids[feature.key], sequence)
                global_weights[feature.key] = (
                    _as_engine_input(weights[feature.key], sequence) if weights[feature.key] is not None else None
                )
                if sequence:
                    global_batch = self._replica_batch_size * num_replicas
                    all_lengths = _sequence_lengths(global_ids[feature.key], feature.max_sequence_length, global_batch)
                    all_lengths.set_shape([global_batch])
                    lengths[feature.key] = tf.split(all_lengths, num_replicas) if num_replicas > 1 else [all_lengths]
        # The engine's own scope ("embedding_preprocess") beside ours, not in it: shorter names of many ops.
        # EVAL and PREDICT only look up: no dedup (it costs more than the rows it saves, and orders nothing).
        with tf.device(host_device):
            batches = self.engine.preprocess(
                global_ids, global_weights, python_ops=self._python_ops, deduplicate=self._training
            )
        for replica, (features, labels) in enumerate(per_replica):
            features = {k: v for k, v in features.items() if k not in self._resolved.raw_keys}
            for key, pieces in lengths.items():
                features[key + SEQUENCE_LENGTH_SUFFIX] = pieces[replica]
            outputs.append((features, labels))
        return outputs, batches

    def attach_activations(self, per_replica: List[Tuple[Any, Any]], batches):
        """Table stage: one lookup per table for the step (per host, of its unique ids, on a cluster: rows gathered
        where the shards live, combined on the host); each replica gets its rows under the feature keys."""
        if not self.multi_host:
            return self._attach_host(per_replica, batches, self._host_device)
        outputs = []
        for (device, replicas), host_batches in zip(self._hosts, batches):
            with graph_constants.placed(device):
                outputs += self._attach_host([per_replica[r] for r in replicas], host_batches, device)
        return outputs

    def _attach_host(self, per_replica: List[Tuple[Any, Any]], batches, host_device: str):
        """`attach_activations` of the replicas of one host."""
        num_replicas = len(per_replica)
        with tf.device(host_device), tf.name_scope("tpu_embedding_lookup"), graph_constants.sharing():
            activations = self.engine.activations(batches)
            splits = {}
            axis = graph_constants.constant(0, tf.int32)
            for key, act in activations.items():
                # The global batch is static even when sparse inputs left it unknown to the engine.
                act.set_shape([self._replica_batch_size * num_replicas] + act.shape.as_list()[1:])
                splits[key] = tf.split(act, num_replicas, axis=axis) if num_replicas > 1 else [act]
        outputs = []
        for replica, (features, labels) in enumerate(per_replica):
            features = dict(features)
            for feature in self._resolved.features:
                features[feature.key] = splits[feature.key][replica]
            outputs.append((features, labels))
        return outputs

    def prepare(self, per_replica: List[Tuple[Any, Any]]):
        """Both stages in one step (EVAL/PREDICT): returns the replicas' inputs and the engine batches."""
        per_replica, batches = self.preprocess(per_replica)
        return self.attach_activations(per_replica, batches), batches

    def new_tap(self) -> Optional["TappedGradients"]:
        """A gradient tap for one step's replicas (TRAIN), or None (EVAL/PREDICT: nothing is differentiated)."""
        return TappedGradients() if self._training else None

    def tap_activations(self, features: dict, tapped: Optional["TappedGradients"], replica: int) -> dict:
        """In a replica: routes each activation through the gradient tap, which records its gradient in `tapped`.

        Args:
          features: the replica's features, with the activations under the feature keys.
          tapped: the step's `TappedGradients` (`new_tap`), or None: the features are returned unchanged.
          replica: the replica being built.

        Returns:
          The features with each activation replaced by its tapped identity.
        """
        if tapped is None:
            return features
        features = dict(features)
        for feature in self._resolved.features:
            # value(): the read alone (read_value() adds an identity per feature and replica).
            features[feature.key] = _tap(
                self._dummies[feature.table_name].value(), features[feature.key], tapped, replica, feature.key
            )
        return features

    # ---- after the replicas: gradients -> engine update ------------------------------------------------------

    def _activation_gradients(
        self, tapped: TappedGradients, replicas: List[int], warn: bool = True
    ) -> Dict[str, Optional[tf.Tensor]]:
        """The tapped activation gradients of this step, joined over `replicas` (None: feature unused)."""
        grads = collections.OrderedDict()
        for feature in self._resolved.features:
            pieces = [tapped.get(r, feature.key) for r in replicas]
            if all(p is None for p in pieces):
                if warn:
                    tf.compat.v1.logging.warning(
                        "Embedding feature %s has no gradient: the model does not use its activation (or the "
                        "optimizer did not differentiate through it). Zero gradients are applied.",
                        feature.key,
                    )
                grads[feature.key] = None
                continue
            template = next(p for p in pieces if p is not None)
            grads[feature.key] = _join_replicas([p if p is not None else tf.zeros_like(template) for p in pieces])
        return grads

    def _activation_gradients_per_host(
        self, tapped: TappedGradients
    ) -> List[Tuple[Dict[str, Optional[tf.Tensor]], str]]:
        """Per host, `(the tapped gradients of its replicas joined on its CPU, its CPU)`."""
        out = []
        for h, (device, replicas) in enumerate(self._hosts):
            with graph_constants.placed(device), tf.name_scope("tpu_embedding_gradients"):
                out.append((self._activation_gradients(tapped, replicas, warn=h == 0), device))
        return out

    def _gradient_multiplier(self) -> Optional[tf.Tensor]:
        if self._spec.experimental_gradient_multiplier_fn is None:
            return None
        return tf.cast(self._spec.experimental_gradient_multiplier_fn(tf.compat.v1.train.get_global_step()), tf.float32)

    def apply_gradients(self, batches, tapped: TappedGradients) -> tf.Operation:
        """The engine update of this step from the tapped activation gradients of every replica."""
        if self.multi_host:
            with graph_constants.sharing():
                per_host = self._activation_gradients_per_host(tapped)
                with tf.device(self._host_device):
                    with tf.name_scope("tpu_embedding_gradients"):
                        multiplier = self._gradient_multiplier()
                    parts = [(b, grads, device) for b, (grads, device) in zip(batches, per_host)]
                    return self.engine.apply_gradients_of_parts(parts, gradient_multiplier=multiplier)
        with tf.device(self._host_device), graph_constants.sharing():
            with tf.name_scope("tpu_embedding_gradients"):
                grads = self._activation_gradients(tapped, list(range(self._num_replicas)))
                multiplier = self._gradient_multiplier()
            # The engine's own scope ("embedding_apply_gradients") beside ours, not in it: shorter names.
            return self.engine.apply_gradients(batches, grads, gradient_multiplier=multiplier)

    # ---- pipelined updates (pipeline_execution_with_tensor_core) ----------------------------------------------

    def empty_pending(self) -> List[tf.Tensor]:
        """Loop state of a pipelined update: per table (per host, on several), no ids and no gradients yet."""
        if self.multi_host:
            state = []
            for device, _ in self._hosts:
                with tf.device(device):
                    state += self._empty_pending()
            return state
        return self._empty_pending()

    def _empty_pending(self) -> List[tf.Tensor]:
        state = []
        for table in self.engine.tables.values():
            state += [tf.zeros([0], tf.int64), tf.zeros([0, table.dim], tf.float32)]
        return state

    def pending_shape_invariants(self) -> List[tf.TensorShape]:
        shapes = []
        for table in self.engine.tables.values():
            shapes += [tf.TensorShape([None]), tf.TensorShape([None, table.dim])]
        return shapes * len(self._hosts)

    def step_pending(self, batches, tapped: TappedGradients) -> List[tf.Tensor]:
        """This step's update, held back: per table its unique ids and accumulated gradients (per host, on its
        CPU, on several hosts)."""
        if self.multi_host:
            per_host = self._activation_gradients_per_host(tapped)
            with tf.device(self._host_device), tf.name_scope("tpu_embedding_gradients"):
                multiplier = self._gradient_multiplier()
            state = []
            for host_batches, (grads, device) in zip(batches, per_host):
                with graph_constants.placed(device), tf.name_scope("tpu_embedding_gradients"):
                    state += self._pending_state(host_batches, grads, lambda: multiplier)
            return state
        with tf.device(self._host_device), tf.name_scope("tpu_embedding_gradients"):
            activation_grads = self._activation_gradients(tapped, list(range(self._num_replicas)))
            return self._pending_state(batches, activation_grads, self._gradient_multiplier)

    def _pending_state(self, batches, activation_grads, multiplier_fn) -> List[tf.Tensor]:
        grads = self.engine.table_gradients(batches, activation_grads)
        multiplier = multiplier_fn()
        state = []
        for name in self.engine.tables:
            state += [batches[name].unique_ids, grads[name] if multiplier is None else grads[name] * multiplier]
        return state

    def apply_pending(self, pending: List[tf.Tensor]) -> tf.Operation:
        """Applies a held-back update (checked, one optimizer application per table)."""
        names = list(self.engine.tables)
        with tf.device(self._host_device), tf.name_scope("tpu_embedding_pipelined_update"):
            if self.multi_host:
                size = 2 * len(names)
                parts = []
                for h, (device, _) in enumerate(self._hosts):
                    state = pending[h * size : (h + 1) * size]
                    parts.append((dict(zip(names, state[0::2])), dict(zip(names, state[1::2])), device))
                return self.engine.apply_table_gradients_of_parts(parts)
            return self.engine.apply_table_gradients(dict(zip(names, pending[0::2])), dict(zip(names, pending[1::2])))

    # ---- the step's structure per host (queues of the embedding infeed) -----------------------------------------

    def host_parts(self, per_replica: List[Tuple[Any, Any]], batches) -> List[Tuple[str, Any]]:
        """`preprocess`'s output per host: `[(its CPU, (its replicas' inputs, its batches))]`."""
        batches_per_host = batches if self.multi_host else [batches]
        return [
            (device, (host_per_replica, host_batches))
            for (device, host_per_replica), host_batches in zip(self.per_host(per_replica), batches_per_host)
        ]

    def per_host(self, per_replica_values: List[Any]) -> List[Tuple[str, List[Any]]]:
        """A list with one value per replica, split by host: `[(its CPU, its replicas' values)]`."""
        if not self.multi_host:
            return [(self._host_device, list(per_replica_values))]
        return [(device, [per_replica_values[r] for r in replicas]) for device, replicas in self._hosts]

    def join_host_parts(self, parts: List[Any]):
        """The inverse of `host_parts` (without the devices): `(per_replica, batches)`."""
        if not self.multi_host:
            return parts[0]
        per_replica, batches = [], []
        for host_per_replica, host_batches in parts:
            per_replica += host_per_replica
            batches.append(host_batches)
        return per_replica, batches

    # ---- checkpoint layout -----------------------------------------------------------------------------------

    def register_checkpoint_names(self, graph: tf.Graph) -> None:
        """Names tables as upstream's CPU path names its variables, then registers the logical saveables.

        Feature-column models get `<scope>/embedding_weights` (and slots like `<...>/Adagrad`), recorded by the
        columns while `model_fn` ran; dict-configured tables keep their table names.
        """
        if self._names_set:
            return
        scopes = _tf_internal.embedding_variable_scopes(graph)
        _tf_internal.clear_embedding_variable_scopes(graph)
        for name, table in self.engine.tables.items():
            if self._spec.feature_columns:
                var_name = name[len("tbl_") :]
                if var_name not in scopes:
                    raise RuntimeError(
                        "Embedding feature column {} did not capture any thing. Make sure the feature columns "
                        "passed to TPUEstimator constructor is properly used in model_fn.".format(var_name)
                    )
                scope, variable = scopes[var_name]
                checkpoint_name = "{}/{}".format(scope, variable) if scope else variable
            else:
                checkpoint_name = name
            slots = table.optimizer.estimator_slot_variable_names(checkpoint_name) if table.optimizer else None
            table.set_checkpoint_names(checkpoint_name, slots)
        for variable in self.engine.shard_variables():
            checkpointing.register_shard_variable(variable)
        checkpointing.add_saveables_to_graph(self.engine.saveables())
        self._names_set = True


def serving_features(spec: EmbeddingConfigSpec, features: Any) -> dict:
    """Features with the embedding activations computed by plain TensorFlow lookups on full tables.

    Used for the CPU path and export of dict-configured embeddings: one variable `[vocabulary, dim]` per table,
    named as the table's checkpoint key, so the export restores the logical tables of training checkpoints and any
    TensorFlow runtime serves the model. Ids are checked as training checks them (in `[0, vocabulary_size)`; an
    `InvalidArgumentError` names the feature and table), instead of the plain lookups' dropping of negative ids.

    Raises:
      ValueError: features is not a dict, or an embedding feature is missing.
    """
    resolved = resolve_embedding_config(spec)
    if not isinstance(features, dict):
        raise ValueError("With an embedding_config_spec, features must be a dict; got {}.".format(type(features)))
    tables = {}
    for name, table in resolved.tables.items():
        tables[name] = tf.compat.v1.get_variable(
            name,
            shape=[table.vocabulary_size, table.dim],
            dtype=tf.float32,
            initializer=tf.compat.v1.zeros_initializer(),
            trainable=False,
        )
    inputs, weights = collections.OrderedDict(), collections.OrderedDict()
    for feature in resolved.features:
        if feature.key not in features:
            raise ValueError(
                "Embedding feature {!r} (table {!r}) is missing from the serving features.".format(
                    feature.key, feature.table_name
                )
            )
        sequence = feature.max_sequence_length > 0
        inputs[feature.key] = _as_engine_input(features[feature.key], sequence)
        weight = features.get(feature.weight_key) if feature.weight_key else None
        weights[feature.key] = _as_engine_input(weight, sequence) if weight is not None else None
    activations = embedding.serving.serving_embedding_lookup(
        inputs, weights, tables, resolved.feature_config, check_ids=True
    )
    result = {k: v for k, v in features.items() if k not in resolved.raw_keys}
    for feature in resolved.features:
        result[feature.key] = activations[feature.key]
        if feature.max_sequence_length:
            batch = tf.shape(activations[feature.key])[0]
            result[feature.key + SEQUENCE_LENGTH_SUFFIX] = _sequence_lengths(
                inputs[feature.key], feature.max_sequence_length, batch
            )
    return result


def checked_column_features(spec: EmbeddingConfigSpec, features: Any) -> Any:
    """`features` whose embedding columns' inputs are read only after their ids passed training's check.

    Off the shards, TPU embedding columns look up their own variables with upstream's CPU code, which silently
    drops negative ids; training on the shards refuses them. The ids each column produces from `features` (after
    its own transformation: e.g. the `-1` "missing" entries of dense int inputs are dropped, as in training) must be
    in `[0, vocabulary_size)`, or running the graph raises `InvalidArgumentError` naming the feature and table,
    with the message of training's check.

    Raises:
      ValueError: features is not a dict, or an input of an embedding column is missing.
    """
    resolved = resolve_embedding_config(spec)
    if not isinstance(features, dict):
        raise ValueError("With an embedding_config_spec, features must be a dict; got {}.".format(type(features)))
    checked = dict(features)
    for feature in resolved.features:
        keys = _tf_internal.categorical_input_keys(feature.column.categorical_column)
        missing = [k for k in keys if k not in features]
        if missing:
            raise ValueError(
                "Embedding feature {!r} (table {!r}) needs input features {} that are missing.".format(
                    feature.key, feature.table_name, missing
                )
            )
        ids, _ = _tf_internal.categorical_ids(feature.column.categorical_column, features)
        vocabulary_size = resolved.tables[feature.table_name].vocabulary_size
        gate = embedding.serving.check_ids_in_range(ids, vocabulary_size, feature.key, feature.table_name)
        if gate is ids:  # Eager: checked already.
            continue
        for key in keys:
            checked[key] = _read_after(checked[key], gate)
    return checked


def _read_after(value: Any, gate: Any) -> Any:
    """`value` (dense, sparse or ragged) read after the ops producing `gate` have run."""
    dependency = gate.values if isinstance(gate, tf.SparseTensor) else gate
    with tf.control_dependencies([dependency]):
        if isinstance(value, tf.SparseTensor):
            return tf.SparseTensor(value.indices, tf.identity(value.values), value.dense_shape)
        if isinstance(value, tf.RaggedTensor):
            return value.with_flat_values(tf.identity(value.flat_values))
        return tf.identity(value)
