"""Off the shards: upstream's CPU path (`use_tpu=False`, EVAL with `eval_on_tpu=False`, the `{serve}` export) and
the `{serve, tpu}` export graph.

`model_fn` is called once, on the host, with the global batch; a `TPUEstimatorSpec` becomes the `EstimatorSpec`
upstream's CPU path builds (host calls run every step). Dict-configured embeddings get their activations from
plain lookups on the full tables (`embedding_serving.serving_features`).
"""

import dataclasses
from typing import Optional

import tensorflow as tf

from tpu_estimator import _estimator_lib, _tf_internal
from tpu_estimator.embedding_stage import embedding_serving
from tpu_estimator.modes import hooks as hooks_lib
from tpu_estimator.modes import host_calls as host_calls_lib
from tpu_estimator.replicas.device_rewrite import rewrite
from tpu_estimator.specs.context import ShardingContext
from tpu_estimator.specs.embedding_spec import EmbeddingConfigSpec
from tpu_estimator.specs.spec import ModelFnSettings, TPUEstimatorSpec, call_user_model_fn

ModeKeys = _estimator_lib.ModeKeys


@dataclasses.dataclass(frozen=True)
class CpuSettings(ModelFnSettings):
    """What the CPU path needs from the estimator, fixed for one `model_fn` call (`params` get `batch_size` and
    `use_tpu`).

    Attributes:
      embedding_config_spec: the estimator's `EmbeddingConfigSpec`, or None.
      progress: loss/step logging and examples/sec of TRAIN.
    """

    embedding_config_spec: Optional[EmbeddingConfigSpec]
    progress: hooks_lib.ProgressSettings


def call_on_cpu(
    settings: CpuSettings, features, labels, mode: str, ctx: ShardingContext, is_export_mode: bool
) -> _estimator_lib.EstimatorSpec:
    """Calls `model_fn` as upstream's CPU path does and returns its `EstimatorSpec` (TRAIN: with progress hooks)."""
    params = dict(settings.params)
    if not is_export_mode and ctx.global_batch_size is not None:
        params["batch_size"] = ctx.global_batch_size
    params["use_tpu"] = False
    features = embedding_features(settings.embedding_config_spec, features, mode)
    graph = tf.compat.v1.get_default_graph()
    first_op = len(graph.get_operations())
    spec = call_user_model_fn(settings.model_fn, features, labels, mode, settings.config, params)
    if isinstance(spec, TPUEstimatorSpec):
        model_ops = graph.get_operations()[first_op:]
        if spec.host_call is not None:
            _tf_internal.order_variable_writes_after(host_calls_lib.flatten_tensors(spec.host_call), model_ops)
        spec = spec.as_estimator_spec()
    if mode == ModeKeys.TRAIN and not is_export_mode:
        progress = hooks_lib.progress_hooks(
            spec.loss, ctx.global_batch_size, settings.progress, every_n_runs=settings.progress.every_n_steps
        )
        spec = spec._replace(training_hooks=tuple(spec.training_hooks) + tuple(progress))
    return spec


def embedding_features(spec: Optional[EmbeddingConfigSpec], features, mode: str):
    """Dict-configured embeddings off the shards: activations from plain lookups on the full tables.

    Feature-column models: the columns look up their own variables on the CPU path, from inputs whose ids are
    first checked as training checks them (`embedding_serving.checked_column_features`).

    Raises:
      ValueError: training dict-configured embeddings on the CPU path (their optimizer runs on shards).
    """
    if spec is None:
        return features
    if spec.feature_columns:
        return embedding_serving.checked_column_features(spec, features)
    if mode == ModeKeys.TRAIN:
        raise ValueError(
            "Training with an EmbeddingConfigSpec of feature_to_config_dict/table_to_config_dict needs "
            "the shards: use use_tpu=True (any num_shards, also 1 on a CPU)."
        )
    return embedding_serving.serving_features(spec, features)


def call_for_tpu_export(settings: CpuSettings, features, labels, wrap_in_rewrite: bool):
    """The PREDICT graph of the {serve, tpu} metagraph: `params['use_tpu']=True`; export API V1 wraps it in
    `rewrite` (`wrap_in_rewrite`)."""
    params = dict(settings.params)
    params["use_tpu"] = True
    mode = ModeKeys.PREDICT

    def build():
        features_with_embeddings = embedding_features(settings.embedding_config_spec, features, mode)
        spec = call_user_model_fn(settings.model_fn, features_with_embeddings, labels, mode, settings.config, params)
        return spec.as_estimator_spec() if isinstance(spec, TPUEstimatorSpec) else spec

    if wrap_in_rewrite:
        built = []
        rewrite(lambda: built.append(build()))
        return built[0]
    return build()
