"""Wide & Deep (Cheng et al. 2016) over the Criteo features.

Every categorical feature `cat_i` is looked up in two TPU embedding tables (dict configuration of
`EmbeddingConfigSpec`): `wide_cat_i` of dim 1 (its weight in the linear model) and `deep_cat_i` of dim
`embedding_dim`. The wide lookups read the ids from the feature key `wide_cat_i`, a copy of `cat_i` that
`prepare_features` adds (the input pipeline and the serving receiver call it)::

    wide: logit_w = sum_i w_i(cat_i) + dense . v + b            (tables of dim 1 + a linear layer)
    deep: logit_d = MLP(concat(dense, e_0(cat_0), .., e_25(cat_25)))
    logit = logit_w + logit_d
"""

from typing import Any, Callable, Dict, Tuple

import tensorflow as tf

from tpu_estimator import experimental as tex
from tpu_estimator.app import config_file
from tpu_estimator.app.data import criteo
from tpu_estimator.app.models import common

WIDE_PREFIX = "wide_"
DEEP_PREFIX = "deep_"


def embedding_tables(config: config_file.Config) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """`(feature_to_config_dict, table_to_config_dict)`: tables `wide_cat_i` (dim 1) and `deep_cat_i`."""
    features, tables = {}, {}
    for name in criteo.CATEGORICAL_FEATURE_NAMES:
        deep = common.categorical_table(config, name)
        tables[WIDE_PREFIX + name] = tex.TableConfig(
            deep.vocabulary_size, 1, combiner="sum", initializer=tf.compat.v1.zeros_initializer()
        )
        tables[DEEP_PREFIX + name] = deep
        features[WIDE_PREFIX + name] = tex.FeatureConfig(WIDE_PREFIX + name)
        features[name] = tex.FeatureConfig(DEEP_PREFIX + name)
    return features, tables


def prepare_features(features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Adds `wide_cat_i` = `cat_i` (the ids of the wide tables)."""
    features = dict(features)
    for name in criteo.CATEGORICAL_FEATURE_NAMES:
        features[WIDE_PREFIX + name] = features[name]
    return features


def logits_fn(features: Dict[str, tf.Tensor], model: config_file.ModelConfig) -> tf.Tensor:
    """Wide & Deep logits `[B]` from `features['dense']` and the activations of both towers."""
    dense_features = features[criteo.DENSE_FEATURE_NAME]
    wide_embeddings = tf.concat([features[WIDE_PREFIX + n] for n in criteo.CATEGORICAL_FEATURE_NAMES], axis=1)
    wide = tf.reduce_sum(wide_embeddings, axis=1) + tf.squeeze(common.dense(dense_features, 1, "wide_dense"), 1)
    deep_input = tf.concat([dense_features] + [features[n] for n in criteo.CATEGORICAL_FEATURE_NAMES], axis=1)
    deep = common.dense(common.mlp(deep_input, model.top_mlp, "deep_mlp"), 1, "deep_logit")
    return wide + tf.squeeze(deep, 1)


def make_model_fn(config: config_file.Config) -> Callable[..., Any]:
    """A `model_fn(features, labels, mode, params)` for `tpu_estimator.TPUEstimator`."""

    def model_fn(features, labels, mode, params):
        logits = logits_fn(features, config.model)
        return common.binary_head(mode, logits, labels, params, config.optimizer.dense)

    return model_fn
