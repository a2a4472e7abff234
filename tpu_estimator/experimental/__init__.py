"""`tpu_estimator.experimental`: TPU embedding configuration for `TPUEstimator`.

Mirrors `tf.compat.v1.estimator.tpu.experimental` and the optimizer parameter classes of
`tf.compat.v1.tpu.experimental`.
"""

from embedding.optimizers import (
    AdagradMomentumParameters,
    AdagradParameters,
    AdamParameters,
    FtrlParameters,
    MomentumParameters,
    ProximalAdagradParameters,
    RMSPropParameters,
    StochasticGradientDescentParameters,
)
from tpu_estimator.specs.embedding_spec import EmbeddingConfigSpec, FeatureConfig, TableConfig

__all__ = [
    "AdagradMomentumParameters",
    "AdagradParameters",
    "AdamParameters",
    "EmbeddingConfigSpec",
    "FeatureConfig",
    "FtrlParameters",
    "MomentumParameters",
    "ProximalAdagradParameters",
    "RMSPropParameters",
    "StochasticGradientDescentParameters",
    "TableConfig",
]
