"""Pieces shared by the built-in models: dense layers, optimizers and the binary-classification head."""

from typing import Any, Dict, Optional, Sequence

import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import estimator as tf_estimator
from tpu_estimator import experimental as tex
from tpu_estimator.app import config_file
from tpu_estimator.app.models import metrics as metrics_lib

ModeKeys = tf_estimator.ModeKeys
PREDICTION_KEYS = ("probability", "logit")


def dense(x: tf.Tensor, units: int, name: str, activation=None) -> tf.Tensor:
    """A fully connected layer with `tf.compat.v1.get_variable` weights (Glorot uniform kernel, zero bias)."""
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable(
            "kernel", [x.shape[-1], units], tf.float32, initializer=tf.compat.v1.glorot_uniform_initializer()
        )
        bias = tf.compat.v1.get_variable("bias", [units], tf.float32, initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(x, kernel) + bias
        return activation(y) if activation is not None else y


def mlp(x: tf.Tensor, units: Sequence[int], name: str, activate_last: bool = True) -> tf.Tensor:
    """ReLU layers of `units` (the last one linear unless `activate_last`)."""
    with tf.compat.v1.variable_scope(name):
        for i, n in enumerate(units):
            last = i == len(units) - 1
            x = dense(x, n, f"layer_{i}", activation=tf.nn.relu if activate_last or not last else None)
    return x


def dense_optimizer(cfg: config_file.DenseOptimizerConfig) -> tf.compat.v1.train.Optimizer:
    """The `tf.compat.v1.train` optimizer of the dense variables."""
    args: Dict[str, Any] = dict(cfg.args)
    lr = cfg.learning_rate
    if cfg.name == "sgd":
        return tf.compat.v1.train.GradientDescentOptimizer(lr)
    if cfg.name == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(lr, momentum=args.pop("momentum", 0.9), **args)
    if cfg.name == "adagrad":
        return tf.compat.v1.train.AdagradOptimizer(lr, **args)
    if cfg.name == "adam":
        return tf.compat.v1.train.AdamOptimizer(lr, **args)
    if cfg.name == "rmsprop":
        return tf.compat.v1.train.RMSPropOptimizer(lr, **args)
    if cfg.name == "ftrl":
        return tf.compat.v1.train.FtrlOptimizer(lr, **args)
    raise ValueError(f"optimizer.dense.name: unknown optimizer {cfg.name!r}")


def categorical_table(config: config_file.Config, name: str) -> Any:
    """The `TableConfig` of categorical feature `name` as the config's table settings give it (vocabulary size,
    dimension, combiner)."""
    settings = config.table_settings(name)
    return tex.TableConfig(settings["vocab_size"], settings["dim"], combiner=settings["combiner"])


def embedding_optimization_parameters(cfg: config_file.EmbeddingOptimizerConfig):
    """The `EmbeddingConfigSpec.optimization_parameters` (`AdagradParameters`, ...) of the config."""
    args: Dict[str, Any] = dict(cfg.args)
    lr = cfg.learning_rate
    if cfg.name == "sgd":
        return tex.StochasticGradientDescentParameters(lr, **args)
    if cfg.name == "adagrad":
        return tex.AdagradParameters(lr, **args)
    if cfg.name == "adagrad_momentum":
        return tex.AdagradMomentumParameters(lr, momentum=args.pop("momentum", 0.0), **args)
    if cfg.name == "adam":
        return tex.AdamParameters(lr, **args)
    if cfg.name == "ftrl":
        return tex.FtrlParameters(lr, **args)
    raise ValueError(f"optimizer.embedding.name: unknown optimizer {cfg.name!r}")


def binary_head(
    mode: str,
    logits: tf.Tensor,
    labels: Optional[tf.Tensor],
    params: Dict[str, Any],
    optimizer_config: config_file.DenseOptimizerConfig,
) -> te.TPUEstimatorSpec:
    """The `TPUEstimatorSpec` of a click model in every mode, from its logits `[B]`.

    Loss: mean sigmoid cross entropy. TRAIN: the dense optimizer, wrapped in `CrossShardOptimizer` when
    `params['use_tpu']`. EVAL: `metrics.metric_fn` on `[labels, logits]`. PREDICT: `{'probability', 'logit'}`, also
    the serving signature.
    """
    probabilities = tf.sigmoid(logits)
    predictions = {"probability": probabilities, "logit": logits}
    if mode == ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(
            mode,
            predictions=predictions,
            export_outputs={
                tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY: tf_estimator.export.PredictOutput(predictions)
            },
        )
    labels = tf.cast(tf.reshape(labels, [-1]), tf.float32)
    # Not tf.compat.v1.losses: that adds the per-shard loss to the LOSSES collection, which the progress hook reads.
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    if mode == ModeKeys.EVAL:
        return te.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metrics_lib.metric_fn, [labels, logits]))
    optimizer = dense_optimizer(optimizer_config)
    if params.get("use_tpu"):
        optimizer = te.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
