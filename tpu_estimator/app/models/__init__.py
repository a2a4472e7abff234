"""Built-in click-through-rate models for `TPUEstimator`: DLRM and Wide & Deep over Criteo features.

Written with the public API only, they double as examples of TPU embeddings in a `TPUEstimator` program::

    config = load_config('configs/dlrm_tiny.yaml')
    estimator = models.make_estimator(config, model_dir='/tmp/dlrm')
    estimator.train(models.make_input_fn(config, 'train'), max_steps=config.train.steps)
    estimator.evaluate(models.make_input_fn(config, 'eval'), steps=models.eval_steps(config))
"""

import types
from typing import Any, Callable, Optional

import tpu_estimator as te
from tpu_estimator import experimental as tex
from tpu_estimator.app import config_file
from tpu_estimator.app.models import common, dlrm, inputs, metrics, wide_deep
from tpu_estimator.app.models.inputs import eval_steps
from tpu_estimator.app.models.metrics import metric_fn

MODELS = {"dlrm": dlrm, "wide_deep": wide_deep}


def model_module(config: config_file.Config) -> types.ModuleType:
    """The module of `config.model.name` (`dlrm` or `wide_deep`)."""
    return MODELS[config.model.name]


def make_model_fn(config: config_file.Config) -> Callable[..., Any]:
    """The `model_fn` of the configured model."""
    return model_module(config).make_model_fn(config)


def make_embedding_config_spec(config: config_file.Config) -> tex.EmbeddingConfigSpec:
    """The `EmbeddingConfigSpec` of the configured model: its tables and the embedding optimizer."""
    feature_to_config_dict, table_to_config_dict = model_module(config).embedding_tables(config)
    return tex.EmbeddingConfigSpec(
        feature_to_config_dict=feature_to_config_dict,
        table_to_config_dict=table_to_config_dict,
        optimization_parameters=common.embedding_optimization_parameters(config.optimizer.embedding),
        partition_strategy=config.tpu.partition_strategy,
    )


def make_input_fn(config: config_file.Config, mode: str, checkpoint_position: bool = True):
    """`input_fn(params)` of the config's data for `mode`, with the model's feature preparation (TRAIN: with the
    input's position in the checkpoints unless `checkpoint_position` is False, see `inputs.make_input_fn`)."""
    return inputs.make_input_fn(
        config, mode, transform=model_module(config).prepare_features, checkpoint_position=checkpoint_position
    )


def serving_input_receiver_fn(config: config_file.Config):
    """The export's serving input: transformed features `dense` `[B, 13]` and ids `cat_0..cat_25` `[B]`."""
    return inputs.serving_input_receiver_fn(transform=model_module(config).prepare_features)


def _input_pipeline(value):
    if isinstance(value, bool):
        return value
    return getattr(te.InputPipelineConfig, value)


def make_run_config(config: config_file.Config, model_dir: Optional[str] = None) -> te.RunConfig:
    """`RunConfig` with the config's checkpointing, logging and `TPUConfig`."""
    return te.RunConfig(
        model_dir=model_dir or config.model_dir,
        save_checkpoints_steps=config.train.save_checkpoints_steps,
        save_summary_steps=config.train.log_step_count_steps,
        log_step_count_steps=config.train.log_step_count_steps,
        tf_random_seed=config.data.seed,
        tpu_config=te.TPUConfig(
            iterations_per_loop=config.tpu.iterations_per_loop,
            num_shards=config.tpu.num_shards,
            per_host_input_for_training=_input_pipeline(config.tpu.per_host_input_for_training),
        ),
    )


def make_estimator(config: config_file.Config, model_dir: Optional[str] = None, **kwargs) -> te.TPUEstimator:
    """A `TPUEstimator` of the configured model on `config.tpu.num_shards` shards.

    Args:
      config: the run configuration.
      model_dir: overrides `config.model_dir`.
      **kwargs: further `TPUEstimator` arguments (e.g. `warm_start_from`).
    """
    return te.TPUEstimator(
        model_fn=make_model_fn(config),
        config=make_run_config(config, model_dir),
        use_tpu=True,
        train_batch_size=config.train.batch_size,
        eval_batch_size=config.eval.batch_size,
        predict_batch_size=config.eval.batch_size,
        params={"model": config.model.name},
        embedding_config_spec=make_embedding_config_spec(config),
        export_to_tpu=config.export.export_to_tpu,
        export_to_cpu=True,
        **kwargs,
    )


__all__ = [
    "MODELS",
    "common",
    "dlrm",
    "eval_steps",
    "inputs",
    "make_embedding_config_spec",
    "make_estimator",
    "make_input_fn",
    "make_model_fn",
    "make_run_config",
    "metric_fn",
    "metrics",
    "model_module",
    "serving_input_receiver_fn",
    "wide_deep",
]
