"""DLRM (Naumov et al. 2019): bottom MLP on dense features, embeddings, dot interaction, top MLP.

The 26 categorical features `cat_0..cat_25` are looked up in one TPU embedding table each, configured through
`EmbeddingConfigSpec(feature_to_config_dict=..., table_to_config_dict=...)`; inside `model_fn` the feature keys
hold the activations `[B, dim]`. The tables are trained by the embedding optimizer of the spec, the MLPs by the
model's (dense) optimizer::

    dense [B, 13] -> bottom MLP -> b [B, d]
    cat_i -> table emb_cat_i -> e_i [B, d]
    dot:  z = [b, e_0..e_25] [B, 27, d];  x = concat(b, (z z^T)[i < j])  [B, d + 351]
    cat:  x = concat(b, e_0, .., e_25)
    x -> top MLP -> 1 unit -> logit
"""

from typing import Any, Callable, Dict, Tuple

import numpy as np
import tensorflow as tf

from tpu_estimator import experimental as tex
from tpu_estimator.app import config_file
from tpu_estimator.app.data import criteo
from tpu_estimator.app.models import common

TABLE_PREFIX = "emb_"


def embedding_tables(config: config_file.Config) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """`(feature_to_config_dict, table_to_config_dict)`: table `emb_cat_i` for feature `cat_i`."""
    features, tables = {}, {}
    for name in criteo.CATEGORICAL_FEATURE_NAMES:
        tables[TABLE_PREFIX + name] = common.categorical_table(config, name)
        features[name] = tex.FeatureConfig(TABLE_PREFIX + name)
    return features, tables


#: DLRM takes the reader's features as they are: no transform (and no map over the input dataset doing nothing).
prepare_features = None


def dot_interaction(vectors: tf.Tensor) -> tf.Tensor:
    """Pairwise dot products of `n` vectors per example, the strict upper triangle in row-major order.

    Args:
      vectors: float `[B, n, d]`.

    Returns:
      float `[B, n * (n - 1) / 2]`: `vectors[:, i] . vectors[:, j]` for i < j.
    """
    n = int(vectors.shape[1])
    gram = tf.matmul(vectors, vectors, transpose_b=True)  # [B, n, n]
    rows, cols = np.triu_indices(n, k=1)
    flat = tf.reshape(gram, [-1, n * n])
    return tf.gather(flat, (rows * n + cols).astype(np.int32), axis=1)  # int32: half the constant's bytes.


def logits_fn(features: Dict[str, tf.Tensor], model: config_file.ModelConfig) -> tf.Tensor:
    """DLRM logits `[B]` from `features['dense']` and the activations `features['cat_i']`."""
    bottom = common.mlp(features[criteo.DENSE_FEATURE_NAME], model.bottom_mlp, "bottom_mlp")
    embeddings = [features[name] for name in criteo.CATEGORICAL_FEATURE_NAMES]
    if model.interaction == "dot":
        interactions = dot_interaction(tf.stack([bottom] + embeddings, axis=1))
        x = tf.concat([bottom, interactions], axis=1)
    else:
        x = tf.concat([bottom] + embeddings, axis=1)
    x = common.mlp(x, model.top_mlp, "top_mlp")
    return tf.squeeze(common.dense(x, 1, "logit"), axis=1)


def make_model_fn(config: config_file.Config) -> Callable[..., Any]:
    """A `model_fn(features, labels, mode, params)` for `tpu_estimator.TPUEstimator`."""

    def model_fn(features, labels, mode, params):
        logits = logits_fn(features, config.model)
        return common.binary_head(mode, logits, labels, params, config.optimizer.dense)

    return model_fn
