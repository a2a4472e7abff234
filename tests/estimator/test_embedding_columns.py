"""Feature-column TPU embeddings: same numbers and checkpoints as upstream's CPU path (SGD everywhere)."""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.helpers.serving import raw_serving_input_fn
from tpu_estimator import estimator as tf_estimator
from tpu_estimator import experimental as tex

RNG = np.random.RandomState(3)
N, G = 64, 16
FEATURES = {
    "a": RNG.randint(0, 10, size=(N,)).astype(np.int64),
    "b": RNG.randint(0, 10, size=(N,)).astype(np.int64),
    "c": RNG.randint(0, 7, size=(N, 2)).astype(np.int64),
    "x": RNG.randn(N, 2).astype(np.float32),
}
Y = (RNG.rand(N) > 0.5).astype(np.float32)
LR = 0.2


def columns():
    cat_a = tf.feature_column.categorical_column_with_identity("a", 10)
    cat_b = tf.feature_column.categorical_column_with_identity("b", 10)
    cat_c = tf.feature_column.categorical_column_with_identity("c", 7)
    # Distinct, deterministic rows (a random initializer draws per shard, so values would differ from the CPU path).
    init_ab = tf.compat.v1.constant_initializer(RNG.uniform(-0.5, 0.5, size=(10, 3)))
    init_c = tf.compat.v1.constant_initializer(RNG.uniform(-0.5, 0.5, size=(7, 4)))
    shared = tf.compat.v1.tpu.experimental.shared_embedding_columns([cat_a, cat_b], 3, initializer=init_ab)
    plain = tf.compat.v1.tpu.experimental.embedding_column(cat_c, 4, combiner="sum", initializer=init_c)
    return shared + [plain]


def input_fn(params):
    return tf.data.Dataset.from_tensor_slices((FEATURES, Y)).repeat().batch(params["batch_size"], True)


def make_model_fn(spec_cls, wrap):
    def model_fn(features, labels, mode, params):
        net = tf.compat.v1.keras.layers.DenseFeatures(COLUMNS)(features)
        net = tf.concat([net, features["x"]], axis=1)
        logits = tf.squeeze(
            tf.compat.v1.layers.dense(net, 1, kernel_initializer=tf.compat.v1.constant_initializer(0.3)), 1
        )
        if mode == tf_estimator.ModeKeys.PREDICT:
            return spec_cls(mode, predictions={"logit": logits})
        loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
        if mode == tf_estimator.ModeKeys.EVAL:
            metric_fn = lambda labels, logits: {
                "auc": tf.compat.v1.metrics.auc(labels, tf.sigmoid(logits)),
                "mean_logit": tf.compat.v1.metrics.mean(logits),
            }
            return spec_cls(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
        opt = tf.compat.v1.train.GradientDescentOptimizer(LR)
        if params["use_tpu"]:
            opt = wrap(opt)
        return spec_cls(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))

    return model_fn


COLUMNS = columns()


def ours(model_dir, num_shards=2):
    spec = tex.EmbeddingConfigSpec(
        feature_columns=COLUMNS, optimization_parameters=tex.StochasticGradientDescentParameters(LR)
    )
    config = te.RunConfig(
        model_dir=str(model_dir), tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=num_shards)
    )
    return te.TPUEstimator(
        model_fn=make_model_fn(te.TPUEstimatorSpec, te.CrossShardOptimizer),
        config=config,
        train_batch_size=G,
        eval_batch_size=G,
        predict_batch_size=8,
        embedding_config_spec=spec,
    )


def upstream(model_dir):
    up = tf.compat.v1.estimator.tpu
    spec = up.experimental.EmbeddingConfigSpec(
        feature_columns=COLUMNS,
        optimization_parameters=tf.compat.v1.tpu.experimental.StochasticGradientDescentParameters(LR),
    )
    return up.TPUEstimator(
        model_fn=make_model_fn(up.TPUEstimatorSpec, None),
        config=up.RunConfig(model_dir=str(model_dir)),
        use_tpu=False,
        train_batch_size=G,
        eval_batch_size=G,
        embedding_config_spec=spec,
    )


@pytest.fixture(scope="module")
def trained_ours(tmp_path_factory):
    base = tmp_path_factory.mktemp("columns")
    estimator = ours(base / "ours")
    estimator.train(input_fn, max_steps=4)
    return base, estimator


@pytest.fixture(scope="module")
def trained(trained_ours):
    base, ours_estimator = trained_ours
    theirs = upstream(base / "upstream")
    theirs.train(input_fn, max_steps=4)
    return base, {"ours": ours_estimator, "upstream": theirs}


@pytest.mark.upstream
def test_same_variables_as_upstream_cpu_path(trained):
    _, estimators = trained
    ours_names = set(estimators["ours"].get_variable_names())
    theirs_names = set(estimators["upstream"].get_variable_names())
    embedding_names = {n for n in theirs_names if "embedding" in n}
    assert embedding_names == {"a_b_shared_embedding", "dense_features/c_embedding/embedding_weights"}
    assert embedding_names <= ours_names
    assert theirs_names <= ours_names
    for name in theirs_names:
        np.testing.assert_allclose(
            estimators["ours"].get_variable_value(name),
            estimators["upstream"].get_variable_value(name),
            atol=1e-5,
            err_msg=name,
        )
    # The tables were trained (not just initialised identically).
    weights = [n for n in embedding_names if "shared" in n][0]
    assert np.abs(estimators["ours"].get_variable_value(weights)).sum() > 0


@pytest.mark.upstream
def test_checkpoints_are_interchangeable_with_upstream(trained):
    base, estimators = trained
    ours_metrics = estimators["ours"].evaluate(input_fn, steps=2)
    theirs_metrics = estimators["upstream"].evaluate(input_fn, steps=2)
    # Our checkpoint evaluated by upstream's CPU path, and upstream's by ours.
    cross_up = upstream(base / "ours").evaluate(input_fn, steps=2)
    cross_ours = ours(base / "upstream", num_shards=4).evaluate(input_fn, steps=2)
    for metrics in (theirs_metrics, cross_up, cross_ours):
        np.testing.assert_allclose(metrics["auc"], ours_metrics["auc"], rtol=1e-4)
        np.testing.assert_allclose(metrics["mean_logit"], ours_metrics["mean_logit"], rtol=1e-4, atol=1e-6)


serving_input_fn = raw_serving_input_fn(FEATURES)  # the column model's: one placeholder per feature


def test_export_serves_what_predict_predicts(trained_ours, tmp_path):
    base, _ = trained_ours
    estimator = ours(base / "ours")
    rows = {k: v[:10] for k, v in FEATURES.items()}
    predicted = np.array(
        [
            p["logit"]
            for p in estimator.predict(
                lambda params: tf.data.Dataset.from_tensor_slices(rows).batch(params["batch_size"])
            )
        ]
    )
    assert predicted.shape == (10,)

    export_dir = estimator.export_saved_model(str(tmp_path), serving_input_fn).decode()
    served = (
        tf.saved_model.load(export_dir, tags=["serve"])
        .signatures["serving_default"](**{k: tf.constant(v) for k, v in rows.items()})["logit"]
        .numpy()
    )
    np.testing.assert_allclose(served, predicted, rtol=1e-5)


def test_weighted_and_sequence_columns_give_engine_activations(tmp_path):
    rng = np.random.RandomState(5)
    n = 12
    table_w = rng.uniform(-1, 1, size=(6, 3))
    table_s = rng.uniform(-1, 1, size=(8, 2))
    ids_w = rng.randint(0, 6, size=(n, 2)).astype(np.int64)
    weights_w = rng.uniform(0.5, 2.0, size=(n, 2)).astype(np.float32)
    seq_lengths = np.array([1, 2, 3, 4, 0, 2, 3, 1, 4, 2, 1, 3])
    seq = [rng.randint(0, 8, size=length) for length in seq_lengths]

    weighted = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.weighted_categorical_column(
            tf.feature_column.categorical_column_with_identity("w_ids", 6), "w"
        ),
        3,
        combiner="sum",
        initializer=tf.compat.v1.constant_initializer(table_w),
    )
    sequence = tf.compat.v1.tpu.experimental.embedding_column(
        tf.feature_column.sequence_categorical_column_with_identity("s", 8),
        2,
        max_sequence_length=3,
        initializer=tf.compat.v1.constant_initializer(table_s),
    )

    def input_fn(params):
        def gen():
            for i in range(n):
                yield {"w_ids": ids_w[i], "w": weights_w[i], "s": seq[i]}

        signature = {
            "w_ids": tf.TensorSpec([2], tf.int64),
            "w": tf.TensorSpec([2], tf.float32),
            "s": tf.TensorSpec([None], tf.int64),
        }
        dataset = tf.data.Dataset.from_generator(gen, output_signature=signature)
        return (
            dataset.map(lambda f: dict(f, s=tf.sparse.from_dense(f["s"] + 1)))
            .map(lambda f: dict(f, s=tf.SparseTensor(f["s"].indices, f["s"].values - 1, f["s"].dense_shape)))
            .batch(params["batch_size"])
        )

    def model_fn(features, labels, mode, params):
        dense = tf.compat.v1.feature_column.input_layer(features, [weighted])
        seq_input, lengths = tf.keras.experimental.SequenceFeatures([sequence])(features)
        return te.TPUEstimatorSpec(mode, predictions={"weighted": dense, "sequence": seq_input, "length": lengths})

    spec = tex.EmbeddingConfigSpec(
        feature_columns=[weighted, sequence], optimization_parameters=tex.AdagradParameters(0.1)
    )
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(num_shards=2))
    estimator = te.TPUEstimator(
        model_fn=model_fn, config=config, train_batch_size=4, predict_batch_size=4, embedding_config_spec=spec
    )
    # No checkpoint yet: predict initialises the tables from the column initialisers.
    predictions = list(estimator.predict(input_fn))
    assert len(predictions) == n
    for i, p in enumerate(predictions):
        np.testing.assert_allclose(p["weighted"], (weights_w[i][:, None] * table_w[ids_w[i]]).sum(0), rtol=1e-5)
        expected = np.zeros((3, 2))
        kept = seq[i][:3]
        expected[: len(kept)] = table_s[kept]
        np.testing.assert_allclose(p["sequence"], expected, rtol=1e-5, atol=1e-7)
        assert p["length"] == min(seq_lengths[i], 3)
