"""Built-in models: shapes, the dot interaction and the wide part against NumPy, metrics, specs, learnability."""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import experimental as tex
from tpu_estimator.app import config_file, models
from tpu_estimator.app.data import convert, criteo
from tpu_estimator.app.models import common, dlrm, inputs, metrics, wide_deep

B = 4
CATS = criteo.CATEGORICAL_FEATURE_NAMES


def tiny(*overrides):
    return config_file.parse_config(open("configs/dlrm_tiny.yaml").read(), list(overrides))


def numpy_auc(labels, scores):
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n1 = labels.sum()
    return (ranks[labels == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * (len(labels) - n1))


def fake_features(rng, dim, wide=False):
    features = {"dense": rng.randn(B, 13).astype(np.float32)}
    for name in CATS:
        features[name] = rng.randn(B, dim).astype(np.float32)
        if wide:
            features["wide_" + name] = rng.randn(B, 1).astype(np.float32)
    return features


def test_dot_interaction_matches_numpy():
    rng = np.random.RandomState(0)
    vectors = rng.randn(2, 4, 3).astype(np.float32)
    got = dlrm.dot_interaction(tf.constant(vectors)).numpy()
    expected = np.array([[vectors[b, i] @ vectors[b, j] for i in range(4) for j in range(i + 1, 4)] for b in range(2)])
    assert got.shape == (2, 6)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("interaction, top_inputs", [("dot", 4 + 27 * 26 // 2), ("cat", 4 + 26 * 4)])
def test_dlrm_forward_shapes(interaction, top_inputs):
    config = tiny(f"model.interaction={interaction}")
    features = fake_features(np.random.RandomState(1), config.model.embedding_dim)
    with tf.Graph().as_default():
        logits = dlrm.logits_fn({k: tf.constant(v) for k, v in features.items()}, config.model)
        kernels = {v.op.name: v.shape.as_list() for v in tf.compat.v1.global_variables()}
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = session.run(logits)
    assert values.shape == (B,) and np.all(np.isfinite(values))
    assert kernels["bottom_mlp/layer_0/kernel"] == [13, 8]
    assert kernels["bottom_mlp/layer_1/kernel"] == [8, 4]
    assert kernels["top_mlp/layer_0/kernel"] == [top_inputs, 8]
    assert kernels["logit/kernel"] == [8, 1]


@pytest.mark.quick
def test_dlrm_logit_is_the_mlps_of_the_numpy_interaction():
    config = tiny()
    features = fake_features(np.random.RandomState(2), 4)
    with tf.Graph().as_default():
        logits = dlrm.logits_fn({k: tf.constant(v) for k, v in features.items()}, config.model)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            got = session.run(logits)
            w = {v.op.name: session.run(v) for v in tf.compat.v1.global_variables()}
    relu = lambda x: np.maximum(x, 0)
    bottom = relu(
        relu(features["dense"] @ w["bottom_mlp/layer_0/kernel"] + w["bottom_mlp/layer_0/bias"])
        @ w["bottom_mlp/layer_1/kernel"]
        + w["bottom_mlp/layer_1/bias"]
    )
    z = np.stack([bottom] + [features[n] for n in CATS], axis=1)
    rows, cols = np.triu_indices(27, k=1)
    x = np.concatenate([bottom, np.einsum("bid,bjd->bij", z, z)[:, rows, cols]], axis=1)
    top = relu(x @ w["top_mlp/layer_0/kernel"] + w["top_mlp/layer_0/bias"])
    np.testing.assert_allclose(got, (top @ w["logit/kernel"] + w["logit/bias"])[:, 0], rtol=1e-4, atol=1e-5)


def test_wide_deep_forward_shapes_and_wide_part():
    config = tiny("model.name=wide_deep")
    features = fake_features(np.random.RandomState(3), config.model.embedding_dim, wide=True)
    with tf.Graph().as_default():
        logits = wide_deep.logits_fn({k: tf.constant(v) for k, v in features.items()}, config.model)
        shapes = {v.op.name: v.shape.as_list() for v in tf.compat.v1.global_variables()}
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            assert session.run(logits).shape == (B,)
            deep_kernel = [v for v in tf.compat.v1.global_variables() if v.op.name == "deep_logit/kernel"][0]
            session.run(deep_kernel.assign(tf.zeros_like(deep_kernel)))  # only the wide part (and a zero bias) left
            got = session.run(logits)
            w = {v.op.name: session.run(v) for v in tf.compat.v1.global_variables()}
    assert shapes["deep_mlp/layer_0/kernel"] == [13 + 26 * 4, 8] and shapes["wide_dense/kernel"] == [13, 1]
    wide = sum(features["wide_" + n][:, 0] for n in CATS) + (features["dense"] @ w["wide_dense/kernel"])[:, 0]
    np.testing.assert_allclose(got, wide + w["wide_dense/bias"][0], rtol=1e-5, atol=1e-5)


def test_embedding_config_specs():
    config = tiny(
        "embedding.tables.cat_3.vocab_size=7",
        "optimizer.embedding.name=ftrl",
        "optimizer.embedding.args={l1_regularization_strength: 0.01}",
    )
    spec = models.make_embedding_config_spec(config)
    assert len(spec.table_to_config_dict) == 26 and set(spec.feature_to_config_dict) == set(CATS)
    assert spec.table_to_config_dict["emb_cat_3"].vocabulary_size == 7
    assert spec.table_to_config_dict["emb_cat_8"].vocabulary_size == 3  # Criteo C9 has 3 values
    assert {t.dimension for t in spec.table_to_config_dict.values()} == {4}
    assert isinstance(spec.optimization_parameters, tex.FtrlParameters)
    wd = models.make_embedding_config_spec(tiny("model.name=wide_deep"))
    assert len(wd.table_to_config_dict) == 52
    assert wd.table_to_config_dict["wide_cat_0"].dimension == 1 and wd.table_to_config_dict["deep_cat_0"].dimension == 4
    assert wd.feature_to_config_dict["wide_cat_0"].table_id == "wide_cat_0"
    assert wd.feature_to_config_dict["cat_0"].table_id == "deep_cat_0"


@pytest.mark.parametrize(
    "name, cls",
    [
        ("sgd", tex.StochasticGradientDescentParameters),
        ("adagrad", tex.AdagradParameters),
        ("adam", tex.AdamParameters),
        ("ftrl", tex.FtrlParameters),
        ("adagrad_momentum", tex.AdagradMomentumParameters),
    ],
)
def test_embedding_optimizer_from_config(name, cls):
    params = common.embedding_optimization_parameters(
        config_file.EmbeddingOptimizerConfig(name=name, learning_rate=0.3)
    )
    assert isinstance(params, cls) and params.learning_rate == 0.3


def test_metric_fn_values():
    rng = np.random.RandomState(4)
    labels = (rng.rand(200) < 0.3).astype(np.float32)
    logits = (rng.randn(200) + 1.5 * labels).astype(np.float32)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        ops = metrics.metric_fn(tf.constant(labels), tf.constant(logits))
        session.run(tf.compat.v1.local_variables_initializer())
        session.run({k: update for k, (_, update) in ops.items()})
        values = session.run({k: value for k, (value, _) in ops.items()})
    p = 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(
        values["log_loss"], -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)), rtol=1e-5
    )
    np.testing.assert_allclose(values["accuracy"], np.mean((p > 0.5) == labels), rtol=1e-6)
    np.testing.assert_allclose(values["auc"], numpy_auc(labels, p), atol=5e-3)
    np.testing.assert_allclose(values["mean_label"], labels.mean(), rtol=1e-6)


@pytest.mark.parametrize("name", ["dlrm", "wide_deep"])
def test_model_fn_returns_tpu_estimator_specs_in_every_mode(name):
    config = tiny(f"model.name={name}")
    model_fn = models.make_model_fn(config)
    features = fake_features(np.random.RandomState(5), 4, wide=name == "wide_deep")
    labels = np.array([0, 1, 0, 1], np.float32)
    for mode in ("train", "eval", "infer"):
        with tf.Graph().as_default():
            tf.compat.v1.train.create_global_step()
            spec = model_fn(
                {k: tf.constant(v) for k, v in features.items()},
                tf.constant(labels),
                mode,
                {"use_tpu": False, "batch_size": B},
            )
            assert isinstance(spec, te.TPUEstimatorSpec)
            if mode == "train":
                assert spec.train_op is not None and spec.loss.shape == []
            elif mode == "eval":
                fn, tensors = spec.eval_metrics
                assert set(fn(*tensors)) == {"auc", "log_loss", "accuracy", "mean_probability", "mean_label"}
            else:
                assert set(spec.predictions) == {"probability", "logit"}
                assert set(spec.export_outputs["serving_default"].outputs) == {"probability", "logit"}


def test_input_fns_give_static_batches_and_held_out_synthetic_rows():
    config = tiny()
    train = models.make_input_fn(config, "train")({"batch_size": 8})
    features, labels = next(iter(train))
    assert features["dense"].shape == (8, 13) and features["cat_0"].shape == (8,) and labels.shape == (8,)
    assert train.element_spec[1].shape.as_list() == [8]  # drop_remainder: static batch
    assert inputs.synthetic_eval_start(config.data) == 1024  # after the 1024 training examples
    assert inputs.synthetic_eval_start(tiny("data.num_examples=null").data) == inputs.SYNTHETIC_EVAL_START
    eval_batches = list(models.make_input_fn(config, "eval")({"batch_size": 32}))
    assert len(eval_batches) == 256 // 32 == models.eval_steps(tiny("eval.steps=null"))
    wd = next(iter(models.make_input_fn(tiny("model.name=wide_deep"), "infer")({"batch_size": 8})))
    np.testing.assert_array_equal(wd["wide_cat_5"], wd["cat_5"])


def test_synthetic_task_is_learnable(tmp_path):
    config = tiny(
        "data.num_examples=null",
        "data.max_vocab=1000",
        "data.eval_num_examples=4096",
        "train.batch_size=256",
        "train.steps=100",
        "tpu.iterations_per_loop=50",
        "eval.batch_size=1024",
        "eval.steps=4",
        "model.embedding_dim=8",
        "model.bottom_mlp=[16, 8]",
        "model.top_mlp=[32]",
        "optimizer.embedding.learning_rate=0.2",
    )
    estimator = models.make_estimator(config, str(tmp_path))
    estimator.train(models.make_input_fn(config, "train"), max_steps=config.train.steps)
    result = estimator.evaluate(models.make_input_fn(config, "eval"), steps=config.eval.steps)
    assert result["global_step"] == 100
    assert result["auc"] > 0.65, result
    assert 0.1 < result["mean_probability"] < 0.45


class FakeContext:
    """What `input_fn` reads from `params['context']`: this call is pipeline `index` of `total`."""

    def __init__(self, index, total):
        self._deployment = ("/job:localhost/replica:0/task:0/device:CPU:0", index, total, 1)

    def current_input_fn_deployment(self):
        return self._deployment


def test_file_sources_read_the_same_examples_and_shard_files_by_pipeline(tmp_path):
    generator = inputs.synthetic_generator(tiny().data)
    tsv_paths = generator.write_tsv_files(str(tmp_path / "tsv"), 64, num_files=2)
    for i, path in enumerate(tsv_paths):
        convert.convert_tsv_to_tfrecord(path, str(tmp_path / f"part-{i}.tfrecord"))
    batches = {}
    for source, paths in (("tsv", [str(tmp_path / "tsv" / "*.tsv")]), ("tfrecord", [str(tmp_path / "*.tfrecord")])):
        config = tiny(f"data.source={source}", f"data.train_paths={paths}", "data.shuffle=false")
        batches[source] = list(models.make_input_fn(config, "eval")({"batch_size": 16}))
        shards = [
            list(models.make_input_fn(config, "eval")({"batch_size": 16, "context": FakeContext(i, 2)}))
            for i in range(2)
        ]
        # Pipeline i of 2 reads file i: the first 32 examples, then the next 32.
        np.testing.assert_array_equal(
            np.concatenate([f["cat_7"] for f, _ in shards[0]]),
            np.concatenate([f["cat_7"] for f, _ in batches[source][:2]]),
        )
        np.testing.assert_array_equal(
            np.concatenate([f["cat_7"] for f, _ in shards[1]]),
            np.concatenate([f["cat_7"] for f, _ in batches[source][2:]]),
        )
    assert len(batches["tsv"]) == 4
    for (ft, lt), (fr, lr) in zip(batches["tsv"], batches["tfrecord"]):
        np.testing.assert_array_equal(lt, lr)
        for key in ft:
            np.testing.assert_array_equal(ft[key], fr[key])
