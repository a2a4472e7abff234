"""EmbeddingConfigSpec in TPUEstimator (docs/SEMANTICS.md 8-9): tables trained by the engine, checked against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.oracles import tables as tables_oracle
from tpu_estimator import estimator as tf_estimator
from tpu_estimator import experimental as tex

RNG = np.random.RandomState(7)
N, G = 96, 16
A = RNG.randint(0, 10, size=(N, 3)).astype(np.int64)  # duplicates within and across rows
A[0] = [4, 4, 2]
B = RNG.randint(0, 7, size=(N,)).astype(np.int64)
C = A[:, :1].copy()  # shares table t1 with 'a'
Y = RNG.randn(N).astype(np.float32)
W = np.linspace(-1, 1, 12).astype(np.float32)  # fixed readout: logit = acts . W
INIT = {"t1": 0.1, "t2": 0.2}


def input_fn(params):
    dataset = tf.data.Dataset.from_tensor_slices(({"a": A, "b": B, "c": C}, Y))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def model_fn(features, labels, mode, params):
    acts = tf.concat([features["a"], features["b"], features["c"]], axis=1)
    logit = tf.squeeze(tf.matmul(acts, tf.constant(W.reshape(12, 1))), 1)
    if mode == tf_estimator.ModeKeys.PREDICT:
        return te.TPUEstimatorSpec(mode, predictions={"logit": logit})
    loss = tf.reduce_mean(tf.square(logit - labels))
    if mode != tf_estimator.ModeKeys.TRAIN:
        return te.TPUEstimatorSpec(
            mode,
            loss=loss,
            predictions={"logit": logit},
            eval_metrics=(lambda l: {"mean_logit": tf.compat.v1.metrics.mean(l)}, [logit]),
        )
    opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))


def table_and_feature_configs(configs=tex) -> dict:
    """The model's v1 tables (t1: 10 x 4, t2: 7 x 4, initialised from INIT) and features (a, c: t1; b: t2), made
    with the `TableConfig`/`FeatureConfig` classes of `configs` (ours, or the oracle's)."""
    return dict(
        table_to_config_dict={
            "t1": configs.TableConfig(10, 4, initializer=tf.compat.v1.constant_initializer(INIT["t1"])),
            "t2": configs.TableConfig(7, 4, initializer=tf.compat.v1.constant_initializer(INIT["t2"])),
        },
        feature_to_config_dict={
            "a": configs.FeatureConfig("t1"),
            "b": configs.FeatureConfig("t2"),
            "c": configs.FeatureConfig("t1"),
        },
    )


def make_spec(parameters, partition_strategy="div", **kwargs):
    return tex.EmbeddingConfigSpec(
        **table_and_feature_configs(),
        optimization_parameters=parameters,
        partition_strategy=partition_strategy,
        **kwargs,
    )


def estimator_of(config, spec, **kwargs):
    """The test model's `TPUEstimator` (training batch G) with the `EmbeddingConfigSpec` `spec`."""
    return te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=G, embedding_config_spec=spec, **kwargs)


def train(tmp_path, spec, num_shards=2, iterations_per_loop=2, steps=3, **tpu_config_kwargs):
    tpu_config = te.TPUConfig(iterations_per_loop=iterations_per_loop, num_shards=num_shards, **tpu_config_kwargs)
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=tpu_config)
    estimator = estimator_of(config, spec, eval_batch_size=G, predict_batch_size=G)
    estimator.train(input_fn, max_steps=steps)
    return estimator


def numpy_training(kind, steps, lr, multiplier=1.0, stale=False, **hparams):
    """The TPU update from the formulas: per-id gradient sums over all rows/features, one update per id.

    With `stale`, step t looks up the tables before step t-1's update is applied (pipelined execution);
    the last update is applied at the end.
    """

    def samples(s):
        rows = np.arange(s * G, (s + 1) * G) % N
        return {
            "a": [(list(A[r]), [1.0] * A.shape[1]) for r in rows],
            "b": [([B[r]], [1.0]) for r in rows],
            "c": [([C[r, 0]], [1.0]) for r in rows],
        }

    def activation_gradients(s, acts):
        rows = np.arange(s * G, (s + 1) * G) % N
        logit = np.concatenate([acts["a"], acts["b"], acts["c"]], axis=1) @ W
        dlogit = 2.0 * (logit - Y[rows]) / G * multiplier
        return {"a": np.outer(dlogit, W[0:4]), "b": np.outer(dlogit, W[4:8]), "c": np.outer(dlogit, W[8:12])}

    return tables_oracle.train_tables(
        kind,
        {"t1": np.full((10, 4), INIT["t1"]), "t2": np.full((7, 4), INIT["t2"])},
        {"a": "t1", "b": "t2", "c": "t1"},
        {"t1": "mean", "t2": "mean"},
        [samples(s) for s in range(steps)],
        activation_gradients,
        lr,
        stale=stale,
        **hparams,
    )


CASES = {
    "sgd": (tex.StochasticGradientDescentParameters(0.3), {}),
    "adagrad": (tex.AdagradParameters(0.3, initial_accumulator=0.1), {"initial_accumulator_value": 0.1}),
    "adam": (
        tex.AdamParameters(0.05, beta1=0.8, beta2=0.9, epsilon=1e-3),
        {"beta_1": 0.8, "beta_2": 0.9, "adam_epsilon": 1e-3, "sum_inside_sqrt": True},
    ),
    "ftrl": (
        tex.FtrlParameters(0.3, l1_regularization_strength=0.01, l2_regularization_strength=0.02),
        {"l1": 0.01, "l2": 0.02, "initial_accumulator_value": 0.1},
    ),
}
SLOT_NAMES = {
    "sgd": {},
    "adagrad": {"accumulators": "Adagrad"},
    "adam": {"momenta": "Adam/m", "velocities": "Adam/v"},
    "ftrl": {"accumulators": "Ftrl", "linears": "Ftrl_1"},
}


@pytest.mark.parametrize("kind", list(CASES))
def test_tables_and_slots_match_numpy_after_3_steps(tmp_path, kind):
    parameters, hparams = CASES[kind]
    estimator = train(tmp_path, make_spec(parameters), num_shards=2, steps=3)
    expected = numpy_training(kind, 3, parameters.learning_rate, **hparams)
    for table in ("t1", "t2"):
        np.testing.assert_allclose(
            estimator.get_variable_value(table), expected[table]["params"], atol=1e-5, err_msg=table
        )
        for slot, suffix in SLOT_NAMES[kind].items():
            np.testing.assert_allclose(
                estimator.get_variable_value("{}/{}".format(table, suffix)),
                expected[table][slot],
                atol=1e-5,
                err_msg=slot,
            )
    # The tables moved, and untouched rows of t1 kept their initial value (lazy update).
    assert np.abs(estimator.get_variable_value("t1") - INIT["t1"]).max() > 1e-3


def test_shard_partition_and_loop_invariance(tmp_path):
    parameters = tex.AdagradParameters(0.3)
    runs = {
        "1-div-2": (1, "div", 2),
        "2-div-2": (2, "div", 2),
        "4-div-2": (4, "div", 2),
        "4-mod-2": (4, "mod", 2),
        "2-mod-1": (2, "mod", 1),
        "2-div-3": (2, "div", 3),
    }
    values = {}
    for name, (shards, strategy, ipl) in runs.items():
        estimator = train(
            tmp_path / name, make_spec(parameters, strategy), num_shards=shards, iterations_per_loop=ipl, steps=4
        )
        values[name] = {v: estimator.get_variable_value(v) for v in ("t1", "t1/Adagrad", "t2", "t2/Adagrad")}
    for name in runs:
        for var, value in values[name].items():
            np.testing.assert_allclose(value, values["1-div-2"][var], atol=1e-6, err_msg="{} {}".format(name, var))


def test_pipelined_execution_is_exactly_one_update_stale(tmp_path):
    spec = make_spec(tex.AdagradParameters(0.3), pipeline_execution_with_tensor_core=True)
    estimator = train(tmp_path, spec, num_shards=2, iterations_per_loop=4, steps=4)
    stale = numpy_training("adagrad", 4, 0.3, stale=True)
    fresh = numpy_training("adagrad", 4, 0.3)
    np.testing.assert_allclose(estimator.get_variable_value("t1"), stale["t1"]["params"], atol=1e-5)
    np.testing.assert_allclose(estimator.get_variable_value("t1/Adagrad"), stale["t1"]["accumulators"], atol=1e-5)
    np.testing.assert_allclose(estimator.get_variable_value("t2"), stale["t2"]["params"], atol=1e-5)
    assert np.abs(stale["t1"]["params"] - fresh["t1"]["params"]).max() > 1e-4  # staleness is observable


def test_gradient_multiplier_and_clipping(tmp_path):
    spec = make_spec(
        tex.StochasticGradientDescentParameters(0.3),
        experimental_gradient_multiplier_fn=lambda step: 0.5,
        clipping_limit=0.01,
    )
    estimator = train(tmp_path, spec, steps=2)
    expected = numpy_training("sgd", 2, 0.3, multiplier=0.5, clip_gradient_min=-0.01, clip_gradient_max=0.01)
    np.testing.assert_allclose(estimator.get_variable_value("t1"), expected["t1"]["params"], atol=1e-6)
    np.testing.assert_allclose(estimator.get_variable_value("t2"), expected["t2"]["params"], atol=1e-6)


def test_learning_rate_fn_sees_the_step_before_the_update(tmp_path):
    spec = tex.EmbeddingConfigSpec(
        table_to_config_dict={
            "t1": tex.TableConfig(
                10,
                4,
                initializer=tf.compat.v1.constant_initializer(0.1),
                learning_rate_fn=lambda step: 0.3 / tf.cast(step + 1, tf.float32),
            ),
            "t2": tex.TableConfig(7, 4, initializer=tf.compat.v1.constant_initializer(0.2), learning_rate=0.3),
        },
        feature_to_config_dict={
            "a": tex.FeatureConfig("t1"),
            "b": tex.FeatureConfig("t2"),
            "c": tex.FeatureConfig("t1"),
        },
        optimization_parameters=tex.StochasticGradientDescentParameters(1.0),
    )
    estimator = train(tmp_path, spec, steps=1)
    expected_t1 = numpy_training("sgd", 1, 0.3)["t1"]["params"]  # step 0: lr = 0.3 / 1
    np.testing.assert_allclose(estimator.get_variable_value("t1"), expected_t1, atol=1e-6)
    estimator.train(input_fn, max_steps=2)
    assert np.abs(estimator.get_variable_value("t1") - expected_t1).max() > 0


class _OpTypes(tf.compat.v1.train.SessionRunHook):
    """The op types of the graph a session runs."""

    def begin(self):
        self.types = {op.type for op in tf.compat.v1.get_default_graph().get_operations()}


# What deduplicating ids builds (a sort on the host for big batches, TensorFlow ops for small ones).
_DEDUP_OPS = {"Unique", "TopKV2", "InvertPermutation", "PyFunc", "EagerPyFunc"}


def test_eval_and_predict_use_tables_read_only(tmp_path):
    estimator = train(tmp_path, make_spec(tex.AdagradParameters(0.3)), steps=2)
    t1, t2 = estimator.get_variable_value("t1"), estimator.get_variable_value("t2")
    logits = np.concatenate([t1[A].mean(axis=1), t2[B], t1[C[:, 0]]], axis=1) @ W
    eval_ops, predict_ops = _OpTypes(), _OpTypes()
    metrics = estimator.evaluate(input_fn, steps=2, hooks=[eval_ops])
    np.testing.assert_allclose(metrics["mean_logit"], logits[: 2 * G].mean(), rtol=1e-5)
    predictions = list(
        estimator.predict(
            lambda params: tf.data.Dataset.from_tensor_slices({"a": A[:20], "b": B[:20], "c": C[:20]}).batch(
                params["batch_size"]
            ),
            hooks=[predict_ops],
        )
    )
    assert len(predictions) == 20
    np.testing.assert_allclose([p["logit"] for p in predictions], logits[:20], rtol=1e-5)
    np.testing.assert_array_equal(estimator.get_variable_value("t1"), t1)
    # Lookups only: no update needs the ids deduplicated, so neither graph deduplicates them.
    assert "ResourceGather" in eval_ops.types and "ResourceGather" in predict_ops.types
    assert not (eval_ops.types | predict_ops.types) & _DEDUP_OPS


def test_bad_ids_name_the_feature_and_leave_tables_unchanged(tmp_path):
    estimator = train(tmp_path, make_spec(tex.StochasticGradientDescentParameters(0.3)), steps=1)
    before = estimator.get_variable_value("t2")

    def bad_input_fn(params):
        bad_b = B.copy()
        bad_b[3] = 99
        dataset = tf.data.Dataset.from_tensor_slices(({"a": A, "b": bad_b, "c": C}, Y))
        return dataset.repeat().batch(params["batch_size"], drop_remainder=True)

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"b.*t2|t2.*b"):
        estimator.train(bad_input_fn, max_steps=2)
    np.testing.assert_array_equal(estimator.get_variable_value("t2"), before)
    assert estimator.get_variable_value("global_step") == 1


def test_missing_embedding_feature_is_named(tmp_path):
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(num_shards=2))
    estimator = estimator_of(config, make_spec(tex.AdagradParameters(0.1)))

    def partial_input_fn(params):
        return tf.data.Dataset.from_tensor_slices(({"a": A, "c": C}, Y)).batch(params["batch_size"], True)

    with pytest.raises(ValueError, match="Embedding feature 'b' \\(table 't2'\\) is missing"):
        estimator.train(partial_input_fn, max_steps=1)


def test_missing_embedding_inputs_are_named_off_the_shards():
    """The CPU path and export check the features as training does (one check: `engine_inputs`)."""
    from tpu_estimator.embedding_stage import embedding_serving

    spec = make_spec(tex.AdagradParameters(0.1))
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"Embedding feature 'b' \(table 't2'\) is missing from the features"):
            embedding_serving.serving_features(spec, {"a": tf.constant([[1]]), "c": tf.constant([[2]])})
        with pytest.raises(ValueError, match="With an embedding_config_spec, the features .* must be a dict"):
            embedding_serving.serving_features(spec, tf.constant([[1]]))
        cat_a = tf.feature_column.categorical_column_with_identity("a", 10)
        column = tf.compat.v1.tpu.experimental.embedding_column(cat_a, 4)
        column_spec = tex.EmbeddingConfigSpec(
            feature_columns=[column], optimization_parameters=tex.StochasticGradientDescentParameters(0.1)
        )
        with pytest.raises(ValueError, match=r"needs input features \['a'\] missing from the features"):
            embedding_serving.checked_column_features(column_spec, {"b": tf.constant([[1]])})


def test_spec_validation():
    with pytest.raises(ValueError, match="Exactly one of `feature_columns` and the pair"):
        tex.EmbeddingConfigSpec()
    with pytest.raises(ValueError, match="Invalid partition_strategy x"):
        make_spec(tex.AdagradParameters(0.1), partition_strategy="x")
    with pytest.raises(ValueError, match="Feature a refers to table t9 which is not in the table_to_config_dict."):
        tex.EmbeddingConfigSpec(
            table_to_config_dict={"t1": tex.TableConfig(10, 4)}, feature_to_config_dict={"a": tex.FeatureConfig("t9")}
        )
    with pytest.raises(ValueError, match="Only PER_HOST_V1 and PER_HOST_V2 is supported when using TPU Embedding"):
        te.TPUEstimator(
            model_fn=model_fn,
            train_batch_size=G,
            embedding_config_spec=make_spec(tex.AdagradParameters(1.0)),
            config=te.RunConfig(tpu_config=te.TPUConfig(per_host_input_for_training=False)),
        )


def _serving_input_fn():
    a = tf.compat.v1.sparse_placeholder(tf.int64, [None, None], name="a")
    b = tf.compat.v1.placeholder(tf.int64, [None], name="b")
    c = tf.compat.v1.placeholder(tf.int64, [None, 1], name="c")
    features = {"a": a, "b": b, "c": c}
    return tf_estimator.export.ServingInputReceiver(features, features)


@pytest.mark.parametrize("partition_strategy", ["div", "mod"])
def test_export_serves_predict_with_plain_lookups(tmp_path, partition_strategy):
    estimator = train(tmp_path, make_spec(tex.AdagradParameters(0.3), partition_strategy), num_shards=2, steps=3)
    predicted = np.array(
        [
            p["logit"]
            for p in estimator.predict(
                lambda params: tf.data.Dataset.from_tensor_slices({"a": A[:8], "b": B[:8], "c": C[:8]}).batch(
                    params["batch_size"]
                )
            )
        ]
    )
    export_dir = estimator.export_saved_model(str(tmp_path / "export"), _serving_input_fn).decode()
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
        ops = {op.type for op in session.graph.get_operations()}
        assert not any("TPU" in t for t in ops)
        assert not any("PyFunc" in t for t in ops)  # No Python callbacks (training's host dedup): any runtime serves.
        signature = meta.signature_def["serving_default"]
        rows, cols = np.meshgrid(np.arange(8), np.arange(3), indexing="ij")
        a_info = signature.inputs["a"]
        feed = {
            a_info.coo_sparse.indices_tensor_name: np.stack([rows.ravel(), cols.ravel()], 1),
            a_info.coo_sparse.values_tensor_name: A[:8].ravel(),
            a_info.coo_sparse.dense_shape_tensor_name: [8, 3],
            signature.inputs["b"].name: B[:8],
            signature.inputs["c"].name: C[:8],
        }
        served = session.run(signature.outputs["logit"].name, feed)
    np.testing.assert_allclose(served, predicted, rtol=1e-5)


def test_dict_embeddings_cannot_train_on_the_cpu_path(tmp_path):
    config = te.RunConfig(model_dir=str(tmp_path))
    estimator = estimator_of(config, make_spec(tex.AdagradParameters(0.1)), use_tpu=False)
    with pytest.raises(ValueError, match="needs the shards: use use_tpu=True"):
        estimator.train(input_fn, max_steps=1)


def test_embedding_infeed_ends_cleanly_at_end_of_input(tmp_path):
    def finite_input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices(({"a": A, "b": B, "c": C}, Y))
        return dataset.batch(params["batch_size"], drop_remainder=True)  # N / G = 6 batches

    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=4, num_shards=2))
    estimator = estimator_of(config, make_spec(tex.StochasticGradientDescentParameters(0.3)))
    estimator.train(finite_input_fn, max_steps=100)
    # Every batch trained: the second loop of 4 ran out of input after 2 steps, whose updates are kept.
    assert estimator.get_variable_value("global_step") == 6
    expected = numpy_training("sgd", 6, 0.3)
    np.testing.assert_allclose(estimator.get_variable_value("t2"), expected["t2"]["params"], atol=1e-6)


@pytest.mark.upstream
def test_upstream_v1_configs_and_parameters_are_accepted(tmp_path):
    from tensorflow.python.tpu import tpu_embedding as upstream  # the oracle's own config classes

    spec = tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
        **table_and_feature_configs(upstream),
        optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(0.3, initial_accumulator=0.1),
    )
    ours = tex.EmbeddingConfigSpec(
        feature_to_config_dict=spec.feature_to_config_dict,
        table_to_config_dict=spec.table_to_config_dict,
        optimization_parameters=spec.optimization_parameters,
    )
    estimator = train(tmp_path, ours, steps=3)
    expected = numpy_training("adagrad", 3, 0.3, initial_accumulator_value=0.1)
    np.testing.assert_allclose(estimator.get_variable_value("t1"), expected["t1"]["params"], atol=1e-5)
    np.testing.assert_allclose(estimator.get_variable_value("t2/Adagrad"), expected["t2"]["accumulators"], atol=1e-5)


def test_eval_on_cpu_path_reads_the_logical_tables(tmp_path):
    estimator = train(tmp_path, make_spec(tex.AdagradParameters(0.3), "mod"), num_shards=4, steps=2)
    t1, t2 = estimator.get_variable_value("t1"), estimator.get_variable_value("t2")
    logits = np.concatenate([t1[A].mean(axis=1), t2[B], t1[C[:, 0]]], axis=1) @ W
    config = te.RunConfig(model_dir=str(tmp_path))
    cpu = estimator_of(config, make_spec(tex.AdagradParameters(0.3), "mod"), eval_batch_size=G, eval_on_tpu=False)
    metrics = cpu.evaluate(input_fn, steps=2)
    np.testing.assert_allclose(metrics["mean_logit"], logits[: 2 * G].mean(), rtol=1e-5)


def test_initial_infeed_sleep_is_slept_once_with_the_embedding_infeed(tmp_path, monkeypatch):
    from tpu_estimator.inputs import input_pipeline

    sleep_secs = 1  # nothing else in this run sleeps exactly 1 s
    real_sleep = input_pipeline.time.sleep
    slept = []

    def recording_sleep(seconds):
        if seconds == sleep_secs:
            slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(input_pipeline.time, "sleep", recording_sleep)
    spec = make_spec(tex.StochasticGradientDescentParameters(0.3))
    estimator = train(tmp_path, spec, steps=2, initial_infeed_sleep_secs=sleep_secs)
    assert slept == [sleep_secs]  # the input's initialiser sleeps; the embedding infeed's thread does not again
    assert estimator.get_variable_value("global_step") == 2
