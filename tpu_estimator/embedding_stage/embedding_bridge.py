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
from embedding import checkpointing, graph_constants
from embedding.shard_exchange import ShardExchange
from tpu_estimator import _estimator_lib, _tf_internal
from tpu_estimator.embedding_stage import engine_inputs
from tpu_estimator.inputs.input_pipeline import WholeHostBatch
from tpu_estimator.specs.embedding_spec import SEQUENCE_LENGTH_SUFFIX, EmbeddingConfigSpec, resolve_embedding_config

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
      shard_devices: the device of every replica of every host (table shard k lives on device k).
      mode: a `ModeKeys` value; only TRAIN creates optimizer slots and updates tables.
      replica_batch_size: the per-replica batch size (`params['batch_size']` of `model_fn`).
      host_devices: the CPU of every host this process builds (one on one host, every host of a cluster's client,
        its own with one process per host): each does the host stage of its replicas (ids joined and deduplicated,
        activations split, gradients joined).
      replicas_per_host: how many replicas each host has; the step's replicas are those of `host_devices`,
        host-major.
      python_ops: whether the host stage may call this process's Python (`tf.numpy_function`); False when a host
        device is another process's (a cluster's client).
      shard_exchange: with one process per host, in TRAIN: carries this host's gradient pieces to the shards'
        owners (`embedding_exchange.gradient_piece_exchange`); None when this graph holds every host's part.

    Raises:
      ValueError: invalid spec contents.
    """

    def __init__(
        self,
        spec: EmbeddingConfigSpec,
        shard_devices: List[str],
        mode: str,
        replica_batch_size: int,
        host_devices: List[str],
        replicas_per_host: int,
        python_ops: bool = True,
        shard_exchange: Optional[ShardExchange] = None,
    ):
        self._spec = spec
        # Where the step's host-side scalars live (the gradient multiplier): the first host's CPU.
        self._host_device = host_devices[0]
        # (CPU, its replicas' positions in the step) of every host.
        self._hosts = [
            (device, list(range(h * replicas_per_host, (h + 1) * replicas_per_host)))
            for h, device in enumerate(host_devices)
        ]
        self._python_ops = python_ops
        self._replica_batch_size = replica_batch_size
        self._resolved = resolve_embedding_config(spec)
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
                num_shards=len(shard_devices),
                devices=shard_devices,
                partition_strategy=spec.partition_strategy,
                register_in_graph=False,
                shard_exchange=shard_exchange,
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
    def pipelined(self) -> bool:
        """Whether TRAIN overlaps step t's update with step t+1 (`pipeline_execution_with_tensor_core`)."""
        return self._training and bool(self._spec.pipeline_execution_with_tensor_core)

    # ---- host side: inputs -> activations -----------------------------------------------------------------

    def _check_inputs(self, features: Any) -> None:
        engine_inputs.check_embedding_features(self._resolved, features, "the features returned by input_fn")
        for feature in self._resolved.features:
            if feature.column is None and feature.weight_key and feature.weight_key not in features:
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
          sequence lengths of sequence features), and the engine batches of the global step: a list of each host's
          batches, built on its CPU (one element on one host).
        """
        for features, _ in per_replica:
            self._check_inputs(features)
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
                global_ids[feature.key] = engine_inputs.as_engine_input(ids[feature.key], sequence)
                global_weights[feature.key] = (
                    engine_inputs.as_engine_input(weights[feature.key], sequence)
                    if weights[feature.key] is not None
                    else None
                )
                if sequence:
                    global_batch = self._replica_batch_size * num_replicas
                    all_lengths = engine_inputs.sequence_lengths(
                        global_ids[feature.key], feature.max_sequence_length, global_batch
                    )
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

    def _gradient_multiplier(self, global_step: Optional[tf.Tensor] = None) -> Optional[tf.Tensor]:
        if self._spec.experimental_gradient_multiplier_fn is None:
            return None
        if global_step is None:
            global_step = tf.compat.v1.train.get_global_step()
        return tf.cast(self._spec.experimental_gradient_multiplier_fn(global_step), tf.float32)

    def apply_gradients(self, batches: List[Any], tapped: TappedGradients) -> tf.Operation:
        """The engine update of this step from the tapped activation gradients of every replica.

        Args:
          batches: each host's engine batches (`preprocess`).
          tapped: the step's `TappedGradients`.
        """
        with graph_constants.sharing():
            per_host = self._activation_gradients_per_host(tapped)
            with tf.device(self._host_device):
                with tf.name_scope("tpu_embedding_gradients"):
                    multiplier = self._gradient_multiplier()
                # The engine's own scope ("embedding_apply_gradients") beside ours, not in it: shorter names.
                parts = [(b, grads, device) for b, (grads, device) in zip(batches, per_host)]
                return self.engine.apply_gradients_of_parts(parts, gradient_multiplier=multiplier)

    def joined_activation_gradients(self, tapped: TappedGradients) -> Dict[str, Optional[tf.Tensor]]:
        """The tapped activation gradients of the (one) host's replicas joined per feature key (None: no replica
        differentiates the feature)."""
        ((device, replicas),) = self._hosts
        with graph_constants.placed(device), tf.name_scope("tpu_embedding_gradients"):
            grads = self._activation_gradients(tapped, replicas)
        return grads

    def apply_host_gradients(
        self, batches: Any, activation_grads: Dict[str, tf.Tensor], global_step: tf.Tensor
    ) -> tf.Operation:
        """The engine update of the (one) host's part of the step, from its joined activation gradients, built for a
        run of its own beside the step (`embedding_exchange.py`).

        Args:
          batches: the host's engine batches (`preprocess`).
          activation_grads: per feature key, the host's joined activation gradients.
          global_step: the global step the step read before its writes: the tables' learning rates of the global
            step and the gradient multiplier are computed from it (that run cannot order its own reads of the
            variable against the step's writes).
        """
        for table in self.engine.tables.values():
            rate = getattr(table.optimizer, "learning_rate", None)
            if isinstance(rate, embedding.GlobalStepLearningRate):
                rate.global_step = global_step
        ((device, _),) = self._hosts
        with graph_constants.sharing(), tf.device(device):
            with tf.name_scope("tpu_embedding_gradients"):
                multiplier = self._gradient_multiplier(global_step)
            return self.engine.apply_gradients_of_parts(
                [(batches, activation_grads, device)], gradient_multiplier=multiplier
            )

    # ---- pipelined updates (pipeline_execution_with_tensor_core) ----------------------------------------------

    def empty_pending(self) -> List[tf.Tensor]:
        """Loop state of a pipelined update: per host, on its CPU, per table no ids and no gradients yet."""
        state = []
        for device, _ in self._hosts:
            with tf.device(device):
                for table in self.engine.tables.values():
                    state += [tf.zeros([0], tf.int64), tf.zeros([0, table.dim], tf.float32)]
        return state

    def pending_shape_invariants(self) -> List[tf.TensorShape]:
        """The shapes of `empty_pending`'s tensors as the loop carries them (any number of ids)."""
        shapes = []
        for table in self.engine.tables.values():
            shapes += [tf.TensorShape([None]), tf.TensorShape([None, table.dim])]
        return shapes * len(self._hosts)

    def step_pending(self, batches: List[Any], tapped: TappedGradients) -> List[tf.Tensor]:
        """This step's update, held back: per host, on its CPU, per table its unique ids and accumulated gradients.

        Args:
          batches: each host's engine batches (`preprocess`).
          tapped: the step's `TappedGradients`.
        """
        per_host = self._activation_gradients_per_host(tapped)
        with tf.device(self._host_device), tf.name_scope("tpu_embedding_gradients"):
            multiplier = self._gradient_multiplier()
        state = []
        for host_batches, (activation_grads, device) in zip(batches, per_host):
            with graph_constants.placed(device), tf.name_scope("tpu_embedding_gradients"):
                grads = self.engine.table_gradients(host_batches, activation_grads)
                for name in self.engine.tables:
                    gradient = grads[name] if multiplier is None else grads[name] * multiplier
                    state += [host_batches[name].unique_ids, gradient]
        return state

    def apply_pending(self, pending: List[tf.Tensor]) -> tf.Operation:
        """Applies a held-back update (checked, one optimizer application per table)."""
        names = list(self.engine.tables)
        size = 2 * len(names)
        parts = []
        for h, (device, _) in enumerate(self._hosts):
            state = pending[h * size : (h + 1) * size]
            parts.append((dict(zip(names, state[0::2])), dict(zip(names, state[1::2])), device))
        with tf.device(self._host_device), tf.name_scope("tpu_embedding_pipelined_update"):
            return self.engine.apply_table_gradients_of_parts(parts)

    # ---- the step's structure per host (queues of the embedding infeed) -----------------------------------------

    def host_parts(self, per_replica: List[Tuple[Any, Any]], batches: List[Any]) -> List[Tuple[str, Any]]:
        """`preprocess`'s output per host: `[(its CPU, (its replicas' inputs, its batches))]`."""
        return [
            (device, (host_per_replica, host_batches))
            for (device, host_per_replica), host_batches in zip(self.per_host(per_replica), batches)
        ]

    def per_host(self, per_replica_values: List[Any]) -> List[Tuple[str, List[Any]]]:
        """A list with one value per replica, split by host: `[(its CPU, its replicas' values)]`."""
        return [(device, [per_replica_values[r] for r in replicas]) for device, replicas in self._hosts]

    def join_host_parts(self, parts: List[Any]) -> Tuple[List[Tuple[Any, Any]], List[Any]]:
        """The inverse of `host_parts` (without the devices): `(per_replica, each host's batches)`."""
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
