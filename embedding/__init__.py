"""TPU embedding engine: sharded tables, deduplicated lookups and TPU optimizer semantics.

This package never imports `tpu_estimator`.
"""

from embedding.config import FeatureConfig
from embedding.config import QuantizationConfig
from embedding.config import RowIdInitializer
from embedding.config import TableConfig
from embedding.config import TruncatedNormalInitializer
from embedding.config import as_feature_config
from embedding.config import as_quantization_config
from embedding.config import as_table_config
from embedding.config import resolve_feature_config
from embedding.config import resolve_tables
from embedding.optimizers import FTRL
from embedding.optimizers import SGD
from embedding.optimizers import Adagrad
from embedding.optimizers import AdagradMomentum
from embedding.optimizers import AdagradMomentumParameters
from embedding.optimizers import AdagradParameters
from embedding.optimizers import Adam
from embedding.optimizers import AdamParameters
from embedding.optimizers import ConstantInitializer
from embedding.optimizers import FtrlParameters
from embedding.optimizers import GlobalStepLearningRate
from embedding.optimizers import Momentum
from embedding.optimizers import MomentumParameters
from embedding.optimizers import ProximalAdagrad
from embedding.optimizers import ProximalAdagradParameters
from embedding.optimizers import RMSProp
from embedding.optimizers import RMSPropParameters
from embedding.optimizers import StochasticGradientDescentParameters
from embedding.optimizers import is_optimizer
from embedding.optimizers import to_optimizer
from embedding import checkpointing
from embedding.combiners import backprop
from embedding.combiners import backprop_table
from embedding.combiners import combine
from embedding.combiners import combine_table
from embedding.combiners import quantize
from embedding.engine import EmbeddingEngine
from embedding.preprocessing import FeatureSegments
from embedding.preprocessing import PartitionedCsrFormatTensor
from embedding.preprocessing import TableBatch
from embedding.preprocessing import feature_paths
from embedding.preprocessing import partition_ids
from embedding.preprocessing import preprocess_features
from embedding.preprocessing import shard_sizes
from embedding.preprocessing import table_names
from embedding.preprocessing import to_partitioned_csr
from embedding.preprocessing import unpartition_ids
from embedding.sharded_table import ShardLayout
from embedding.sharded_table import ShardedTable
