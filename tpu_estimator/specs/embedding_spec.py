"""`EmbeddingConfigSpec` and the v1 table/feature configs: the estimator's description of TPU embeddings.

`resolve_embedding_config` turns a spec (feature columns, or the pair of config dicts) into the engine's configs
(`embedding.TableConfig` / `embedding.FeatureConfig`) plus what the estimator needs to feed them: for every
feature, where its ids come from in `features` and under which key the activation goes back.
"""

import collections
import copy
from typing import Any, Callable, Dict, List, Optional

import embedding
from tpu_estimator import _keras2, _tf_internal

_TABLE_NAME_PREFIX = "tbl_"
SEQUENCE_LENGTH_SUFFIX = "_seq_length_"


class TableConfig(
    collections.namedtuple(
        "TableConfig",
        [
            "vocabulary_size",
            "dimension",
            "initializer",
            "combiner",
            "hot_id_replication",
            "learning_rate",
            "learning_rate_fn",
            "optimization_parameters",
        ],
    )
):
    """A v1 embedding table (`tf.compat.v1.tpu.experimental` style), as upstream's `tpu_embedding.TableConfig`.

    Args:
      vocabulary_size: number of rows.
      dimension: embedding width.
      initializer: `initializer(shape, dtype)`; default truncated normal with stddev 1/sqrt(dimension).
      combiner: 'mean', 'sum' or 'sqrtn' (None: sequence features only).
      hot_id_replication: accepted for compatibility; the engine has no replicated hot ids.
      learning_rate: a float overriding the optimizer's learning rate for this table.
      learning_rate_fn: `fn(global_step)` overriding it dynamically.
      optimization_parameters: per-table optimizer parameters overriding the spec's.

    Raises:
      ValueError: non-positive sizes, unknown combiner, both learning rates set.
    """

    def __new__(
        cls,
        vocabulary_size,
        dimension,
        initializer=None,
        combiner="mean",
        hot_id_replication=False,
        learning_rate=None,
        learning_rate_fn=None,
        optimization_parameters=None,
    ):
        if not isinstance(vocabulary_size, int) or vocabulary_size < 1:
            raise ValueError("Invalid vocabulary_size {}.".format(vocabulary_size))
        if not isinstance(dimension, int) or dimension < 1:
            raise ValueError("Invalid dimension {}.".format(dimension))
        if combiner not in ("mean", "sum", "sqrtn", None):
            raise ValueError("Invalid combiner {}".format(combiner))
        if learning_rate is not None and learning_rate_fn is not None:
            raise ValueError(
                "At most one of learning_rate and learning_rate_fn can be None; got {} and {}".format(
                    learning_rate, learning_rate_fn
                )
            )
        return super(TableConfig, cls).__new__(
            cls,
            vocabulary_size,
            dimension,
            initializer,
            combiner,
            hot_id_replication,
            learning_rate,
            learning_rate_fn,
            optimization_parameters,
        )


class FeatureConfig(collections.namedtuple("FeatureConfig", ["table_id", "max_sequence_length", "weight_key"])):
    """A v1 embedding feature: which table it looks up, as upstream's `tpu_embedding.FeatureConfig`.

    Args:
      table_id: name of the table in `table_to_config_dict`.
      max_sequence_length: 0 for a combined feature, else the sequence length L (activations `[B, L, dim]`).
      weight_key: optional feature key of the weights.

    Raises:
      ValueError: negative `max_sequence_length`.
    """

    def __new__(cls, table_id, max_sequence_length=0, weight_key=None):
        if not isinstance(max_sequence_length, int) or max_sequence_length < 0:
            raise ValueError("Invalid max_sequence_length {}.".format(max_sequence_length))
        return super(FeatureConfig, cls).__new__(cls, table_id, max_sequence_length, weight_key)


def _is_config(obj, names) -> bool:
    return all(hasattr(obj, name) for name in names)


class EmbeddingConfigSpec(
    collections.namedtuple(
        "EmbeddingConfigSpec",
        [
            "feature_columns",
            "tensor_core_feature_columns",
            "optimization_parameters",
            "clipping_limit",
            "pipeline_execution_with_tensor_core",
            "experimental_gradient_multiplier_fn",
            "feature_to_config_dict",
            "table_to_config_dict",
            "partition_strategy",
            "profile_data_directory",
        ],
    )
):
    """How `TPUEstimator` builds and trains embedding tables (upstream's arguments and checks).

    Args:
      feature_columns: columns from `tf.compat.v1.tpu.experimental.embedding_column` /
        `shared_embedding_columns` (or `tf.tpu.experimental.*`).
      optimization_parameters: the embedding optimizer (`AdagradParameters`, ... ours or upstream's, or a
        mid-level optimizer).
      clipping_limit: absolute gradient clipping of each row's accumulated gradient (upstream ignores it).
      pipeline_execution_with_tensor_core: look up step t+1 before step t's update is applied (one-step-stale
        activations), overlapping the update with the next step's compute.
      experimental_gradient_multiplier_fn: `fn(global_step)` multiplying all embedding gradients.
      feature_to_config_dict: `{feature key: FeatureConfig}` (ours or upstream's v1 configs).
      table_to_config_dict: `{table name: TableConfig}`.
      partition_strategy: 'div' or 'mod' sharding of the tables over the shards.
      profile_data_directory: accepted; the engine needs no lookup statistics.

    Raises:
      ValueError / TypeError: upstream's validation.
      Keras2RequiredError: `feature_columns` are given but `tf.keras` is Keras 3 (TF >= 2.16 without
        `TF_USE_LEGACY_KERAS=1` set before TensorFlow was imported).
    """

    def __new__(
        cls,
        feature_columns=None,
        optimization_parameters=None,
        clipping_limit=None,
        pipeline_execution_with_tensor_core=False,
        experimental_gradient_multiplier_fn=None,
        feature_to_config_dict=None,
        table_to_config_dict=None,
        partition_strategy="div",
        profile_data_directory=None,
    ):
        if (
            not feature_columns
            and not (feature_to_config_dict and table_to_config_dict)
            or (feature_columns and (feature_to_config_dict and table_to_config_dict))
        ):
            raise ValueError(
                "Exactly one of `feature_columns` and the pair `feature_to_config_dict` and "
                "`table_to_config_dict` must be be specified."
            )
        if partition_strategy not in ("div", "mod"):
            raise ValueError('Invalid partition_strategy {}. Must be one of "mod" or "div".'.format(partition_strategy))
        if clipping_limit is not None and not clipping_limit > 0:
            raise ValueError("clipping_limit must be positive, got {}.".format(clipping_limit))
        if feature_columns:
            for column in feature_columns:
                if not _tf_internal.is_tpu_embedding_column(column):
                    raise TypeError(
                        "All feature columns must be TPU embedding columns (tf.tpu.experimental.embedding_column"
                        " or shared_embedding_columns). Got {}".format(type(column))
                    )
            # Models consume TPU embedding columns through Keras 2's DenseFeatures / SequenceFeatures.
            _keras2.require_keras2("EmbeddingConfigSpec(feature_columns=...) (TPU embedding columns)")
            try:
                embedding.to_optimizer(optimization_parameters)
            except (TypeError, ValueError):
                raise ValueError(
                    "optimization_parameters must be an instance of an embedding optimizer parameters "
                    "class (e.g. AdagradParameters). Got {}.".format(type(optimization_parameters))
                ) from None
        else:
            for feature, config in feature_to_config_dict.items():
                if not _is_config(config, ("table_id", "max_sequence_length", "weight_key")):
                    raise TypeError(
                        "Config for feature {} must be of type `FeatureConfig`. Got {}".format(feature, type(config))
                    )
                if config.table_id not in table_to_config_dict:
                    raise ValueError(
                        "Feature {} refers to table {} which is not in the table_to_config_dict.".format(
                            feature, config.table_id
                        )
                    )
            for table, config in table_to_config_dict.items():
                if not _is_config(config, ("vocabulary_size", "dimension", "combiner")):
                    raise TypeError(
                        "Config for table {} must be of type `TableConfig`. Got {}".format(table, type(config))
                    )
        return super(EmbeddingConfigSpec, cls).__new__(
            cls,
            feature_columns=list(feature_columns) if feature_columns else None,
            tensor_core_feature_columns=None,
            optimization_parameters=optimization_parameters,
            clipping_limit=clipping_limit,
            pipeline_execution_with_tensor_core=pipeline_execution_with_tensor_core,
            experimental_gradient_multiplier_fn=experimental_gradient_multiplier_fn,
            feature_to_config_dict=feature_to_config_dict,
            table_to_config_dict=table_to_config_dict,
            partition_strategy=partition_strategy,
            profile_data_directory=profile_data_directory,
        )


class EmbeddedFeature(object):
    """One embedding feature as the estimator feeds it.

    Attributes:
      key: the feature key: where the activation goes in `features` (and the raw ids come from, dict path).
      table_name: the table it looks up.
      max_sequence_length: 0 or L.
      weight_key: feature key of its weights (dict path), or None.
      column: the TPU embedding column (feature-column path), or None.
    """

    def __init__(
        self, key: str, table_name: str, max_sequence_length: int, weight_key: Optional[str], column: Any = None
    ):
        self.key = key
        self.table_name = table_name
        self.max_sequence_length = max_sequence_length
        self.weight_key = weight_key
        self.column = column


class ResolvedEmbeddingConfig(object):
    """The engine configs of a spec plus the features to feed.

    Attributes:
      feature_config: `{feature key: embedding.FeatureConfig}` for the engine.
      tables: `{table name: embedding.TableConfig}`.
      features: list of `EmbeddedFeature`.
      raw_keys: input feature keys consumed (popped) by the embedding features.
    """

    def __init__(self, feature_config, tables, features, raw_keys):
        self.feature_config = feature_config
        self.tables = tables
        self.features = features
        self.raw_keys = raw_keys


def _optimizer_for(
    optimization_parameters,
    clipping_limit,
    learning_rate=None,
    learning_rate_fn: Optional[Callable] = None,
):
    if optimization_parameters is None:
        return None
    if learning_rate is not None:
        learning_rate_fn = (lambda value: lambda step: value)(learning_rate)
    optimizer = embedding.to_optimizer(optimization_parameters, learning_rate_fn=learning_rate_fn)
    if clipping_limit is not None:
        optimizer = copy.copy(optimizer)
        if optimizer.clip_gradient_min is None:
            optimizer.clip_gradient_min = -float(clipping_limit)
        if optimizer.clip_gradient_max is None:
            optimizer.clip_gradient_max = float(clipping_limit)
    return optimizer


def resolve_embedding_config(spec: EmbeddingConfigSpec) -> ResolvedEmbeddingConfig:
    """Engine configs and the feeding plan of `spec`.

    Raises:
      ValueError: a feature column used with two embeddings, unsupported categorical columns.
    """
    tables: Dict[str, Any] = collections.OrderedDict()
    feature_config = collections.OrderedDict()
    features: List[EmbeddedFeature] = []
    raw_keys: List[str] = []
    if spec.feature_columns:
        for column in spec.feature_columns:
            key = column.get_feature_key_name()
            table_name = _TABLE_NAME_PREFIX + column.get_embedding_var_name()
            if key in feature_config:
                raise ValueError(
                    "Feature column {} is used with multiple embeddings and this is not supported.".format(key)
                )
            if table_name not in tables:
                vocabulary_size, dimension = column.get_embedding_table_size()
                tables[table_name] = embedding.TableConfig(
                    vocabulary_size=vocabulary_size,
                    dim=dimension,
                    initializer=column.get_initializer(),
                    optimizer=_optimizer_for(
                        spec.optimization_parameters,
                        spec.clipping_limit,
                        learning_rate_fn=column.get_learning_rate_fn(),
                    ),
                    combiner=column.get_combiner() or "mean",
                    name=table_name,
                )
            max_sequence_length = column.get_max_sequence_length()
            feature_config[key] = embedding.FeatureConfig(
                tables[table_name], max_sequence_length=max_sequence_length, name=key
            )
            features.append(EmbeddedFeature(key, table_name, max_sequence_length, None, column))
            for raw in _tf_internal.categorical_input_keys(column.categorical_column):
                if raw not in raw_keys:
                    raw_keys.append(raw)
    else:
        for table_name, table in spec.table_to_config_dict.items():
            parameters = getattr(table, "optimization_parameters", None) or spec.optimization_parameters
            tables[table_name] = embedding.TableConfig(
                vocabulary_size=table.vocabulary_size,
                dim=table.dimension,
                initializer=table.initializer,
                optimizer=_optimizer_for(
                    parameters,
                    spec.clipping_limit,
                    getattr(table, "learning_rate", None),
                    getattr(table, "learning_rate_fn", None),
                ),
                combiner=table.combiner or "mean",
                name=table_name,
            )
        for key, feature in spec.feature_to_config_dict.items():
            feature_config[key] = embedding.FeatureConfig(
                tables[feature.table_id], max_sequence_length=feature.max_sequence_length, name=key
            )
            features.append(EmbeddedFeature(key, feature.table_id, feature.max_sequence_length, feature.weight_key))
            raw_keys.append(key)
            if feature.weight_key:
                raw_keys.append(feature.weight_key)
    return ResolvedEmbeddingConfig(feature_config, tables, features, raw_keys)
