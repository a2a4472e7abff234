"""TPU embedding engine: sharded tables, deduplicated lookups and TPU optimizer semantics.

This package never imports `tpu_estimator`.
"""

from embedding import checkpointing
from embedding.combiners import backprop, backprop_table, combine, combine_table, quantize
from embedding.config import (
    FeatureConfig,
    QuantizationConfig,
    RowIdInitializer,
    TableConfig,
    TruncatedNormalInitializer,
    as_feature_config,
    as_quantization_config,
    as_table_config,
    resolve_feature_config,
    resolve_tables,
)
from embedding.engine import EmbeddingEngine
from embedding.optimizers import (
    FTRL,
    SGD,
    Adagrad,
    AdagradMomentum,
    AdagradMomentumParameters,
    AdagradParameters,
    Adam,
    AdamParameters,
    ConstantInitializer,
    FtrlParameters,
    GlobalStepLearningRate,
    Momentum,
    MomentumParameters,
    ProximalAdagrad,
    ProximalAdagradParameters,
    RMSProp,
    RMSPropParameters,
    StochasticGradientDescentParameters,
    is_optimizer,
    to_optimizer,
)
from embedding.preprocessing import (
    FeatureSegments,
    PartitionedCsrFormatTensor,
    TableBatch,
    feature_paths,
    partition_ids,
    preprocess_features,
    shard_sizes,
    table_names,
    to_partitioned_csr,
    unpartition_ids,
)
from embedding.serving import TPUEmbeddingForServing, serving_embedding_lookup
from embedding.sharded_table import ShardedTable, ShardLayout
from embedding.sparsecore_layout import SparseCoreTopology
from embedding.tpu_embedding import TPUEmbedding
from embedding.tpu_embedding_v2 import EnqueuedFeatures, TPUEmbeddingV2
