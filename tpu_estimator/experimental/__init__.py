"""`tpu_estimator.experimental`: TPU embedding configuration for `TPUEstimator`.

Mirrors `tf.compat.v1.estimator.tpu.experimental` and the optimizer parameter classes of
`tf.compat.v1.tpu.experimental`.
"""
from embedding.optimizers import AdagradMomentumParameters
from embedding.optimizers import AdagradParameters
from embedding.optimizers import AdamParameters
from embedding.optimizers import FtrlParameters
from embedding.optimizers import MomentumParameters
from embedding.optimizers import ProximalAdagradParameters
from embedding.optimizers import RMSPropParameters
from embedding.optimizers import StochasticGradientDescentParameters
from tpu_estimator.embedding_spec import EmbeddingConfigSpec
from tpu_estimator.embedding_spec import FeatureConfig
from tpu_estimator.embedding_spec import TableConfig

__all__ = [
    'AdagradMomentumParameters', 'AdagradParameters', 'AdamParameters', 'EmbeddingConfigSpec', 'FeatureConfig',
    'FtrlParameters', 'MomentumParameters', 'ProximalAdagradParameters', 'RMSPropParameters',
    'StochasticGradientDescentParameters', 'TableConfig',
]
