"""The model of the cluster tests: embedding columns (Adagrad tables) and dense layers, with recorded contexts."""

import numpy as np
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import estimator as tf_estimator
from tpu_estimator import experimental as tex

RNG = np.random.RandomState(7)
N = 256
FEATURES = {
    "a": RNG.randint(0, 13, size=(N,)).astype(np.int64),
    "b": RNG.randint(0, 13, size=(N,)).astype(np.int64),
    "c": RNG.randint(0, 11, size=(N, 2)).astype(np.int64),
    "x": RNG.randn(N, 3).astype(np.float32),
}
Y = (RNG.rand(N) > 0.5).astype(np.float32)
BATCH = 16
INIT_AB = RNG.uniform(-0.5, 0.5, size=(13, 3))
INIT_C = RNG.uniform(-0.5, 0.5, size=(11, 4))


def columns():
    cat_a = tf.feature_column.categorical_column_with_identity("a", 13)
    cat_b = tf.feature_column.categorical_column_with_identity("b", 13)
    cat_c = tf.feature_column.categorical_column_with_identity("c", 11)
    shared = tf.compat.v1.tpu.experimental.shared_embedding_columns(
        [cat_a, cat_b], 3, initializer=tf.compat.v1.constant_initializer(INIT_AB)
    )
    plain = tf.compat.v1.tpu.experimental.embedding_column(
        cat_c, 4, combiner="sum", initializer=tf.compat.v1.constant_initializer(INIT_C)
    )
    return shared + [plain]


COLUMNS = columns()


def host_rows(dataset, global_batch: int, num_hosts: int, host: int, read_batch: int):
    """Host `host`'s block of every global batch (hosts hold contiguous blocks, as replicas are host-major), in
    batches of `read_batch`: every host count reads the same global batches."""
    block = global_batch // num_hosts
    dataset = dataset.batch(global_batch, drop_remainder=True)
    take = lambda v: v[host * block : (host + 1) * block]
    dataset = dataset.map(lambda *t: tf.nest.map_structure(take, t if len(t) > 1 else t[0]))
    return dataset.unbatch().batch(read_batch, drop_remainder=True)


def make_input_fn(global_batch: int = BATCH, record=None, labels: bool = True, rows: int = N):
    """An `input_fn` giving each host its block of the global batches of the first `rows` rows.

    Records `(num_hosts, current_host, current_input_fn_deployment(), device of the input ops)` per call.
    """

    def input_fn(params):
        context = params["context"]
        features = {k: v[:rows] for k, v in FEATURES.items()}
        dataset = tf.data.Dataset.from_tensor_slices((features, Y[:rows]) if labels else features)
        if labels:
            dataset = dataset.repeat()
        if record is not None:
            record.append(
                (context.num_hosts, context.current_host, context.current_input_fn_deployment(), tf.constant(0).device)
            )
        return host_rows(dataset, global_batch, context.num_hosts, context.current_host, params["batch_size"])

    return input_fn


def model_fn(features, labels, mode, params):
    net = tf.compat.v1.keras.layers.DenseFeatures(COLUMNS)(features)
    net = tf.concat([net, features["x"]], axis=1)
    hidden = tf.compat.v1.layers.dense(
        net, 5, activation=tf.nn.tanh, kernel_initializer=tf.compat.v1.constant_initializer(0.2)
    )
    logits = tf.squeeze(
        tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=tf.compat.v1.constant_initializer(0.3)), 1
    )
    if mode == tf_estimator.ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(mode, predictions={"logit": logits})
    loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
    if mode == tf_estimator.ModeKeys.EVAL:
        metric_fn = lambda labels, logits: {
            "auc": tf.compat.v1.metrics.auc(labels, tf.sigmoid(logits)),
            "mean_logit": tf.compat.v1.metrics.mean(logits),
        }
        return te.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    opt = te.CrossShardOptimizer(tf.compat.v1.train.AdagradOptimizer(0.3))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))


def estimator(
    model_dir, partition_strategy="div", num_shards=4, cluster=None, input_mode=None, batch=BATCH, **run_kwargs
):
    spec = tex.EmbeddingConfigSpec(
        feature_columns=COLUMNS,
        optimization_parameters=tex.AdagradParameters(0.5, initial_accumulator=0.1),
        partition_strategy=partition_strategy,
    )
    tpu_config = te.TPUConfig(
        iterations_per_loop=2,
        num_shards=num_shards,
        per_host_input_for_training=input_mode or te.InputPipelineConfig.PER_HOST_V2,
    )
    config = te.RunConfig(model_dir=str(model_dir), cluster=cluster, tpu_config=tpu_config, **run_kwargs)
    return te.TPUEstimator(
        model_fn=model_fn,
        config=config,
        train_batch_size=batch,
        eval_batch_size=batch,
        predict_batch_size=8,
        embedding_config_spec=spec,
    )


def variables_of(est):
    return {name: est.get_variable_value(name) for name in est.get_variable_names()}
