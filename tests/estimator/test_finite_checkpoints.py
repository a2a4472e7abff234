"""No checkpoint holds NaN or Inf: the run stops naming the variables, the latest checkpoint stays finite."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import test_embedding_estimator as emb
from tpu_estimator import experimental as tex
from tpu_estimator.checkpoints.finite_checkpoints import NonFiniteCheckpointError

BATCH = 8
STEPS = 6
POISONED_STEP = 4  # The step whose update makes `aux/kernel` non-finite (global step 3 -> 4).
RNG = np.random.RandomState(3)
X = RNG.randn(BATCH * STEPS, 3).astype(np.float32)
Y = RNG.randn(BATCH * STEPS, 1).astype(np.float32)


# The input is finite (a non-finite input is an error of its own, tests/estimator/test_input_checks.py): the `aux`
# feature holds a marker that the model turns into the poison.
MARKERS = {"nan": 2.0, "inf": 3.0}


def make_input_fn(poison):
    """Batches in order; the `aux` feature of batch POISONED_STEP - 1 holds the marker of `poison` (None: no
    marker), which the model turns into `poison`."""
    aux = np.ones((BATCH * STEPS, 1), np.float32)
    if poison is not None:
        aux[(POISONED_STEP - 1) * BATCH] = MARKERS["nan" if np.isnan(poison) else "inf"]

    def input_fn(params):
        features = {"x": X, "aux": aux}
        return tf.data.Dataset.from_tensor_slices((features, Y)).repeat().batch(params["batch_size"], True)

    return input_fn


def model_fn(features, labels, mode, params):
    """A regression whose loss ignores the `aux` head; the head is trained on its own loss (as an auxiliary
    task would be), so its weights can become non-finite while the reported loss stays finite."""
    out = tf.compat.v1.layers.dense(features["x"], 1, name="main")
    marked = features["aux"]
    poisoned = tf.where(
        tf.equal(marked, MARKERS["nan"]), np.nan, tf.where(tf.equal(marked, MARKERS["inf"]), np.inf, marked)
    )
    aux = tf.compat.v1.layers.dense(poisoned, 1, name="aux")
    loss = tf.reduce_mean(tf.square(out - labels))
    aux_loss = tf.reduce_mean(aux)
    step = tf.compat.v1.train.get_global_step()
    main_op = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1)).minimize(loss, step)
    aux_op = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1)).minimize(aux_loss)
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=tf.group(main_op, aux_op))


def make_estimator(model_dir, model=model_fn, save_checkpoints_steps=1, **kwargs):
    config = te.RunConfig(
        model_dir=str(model_dir),
        save_checkpoints_steps=save_checkpoints_steps,
        keep_checkpoint_max=None,
        tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=1),
    )
    return te.TPUEstimator(model_fn=model, config=config, train_batch_size=BATCH, **kwargs)


def checkpoint_values(path):
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def checkpoint_steps(model_dir):
    """Global steps of the checkpoints written to `model_dir` (all kept: keep_checkpoint_max=None)."""
    return sorted(
        int(p[: -len(".index")].rsplit("-", 1)[1]) for p in glob.glob(os.path.join(str(model_dir), "*.index"))
    )


@pytest.mark.parametrize("poison, kind", [(np.nan, "NaN"), (np.inf, "Inf")])
def test_non_finite_dense_weights_are_never_checkpointed(tmp_path, poison, kind):
    estimator = make_estimator(tmp_path)
    with pytest.raises(NonFiniteCheckpointError) as raised:
        estimator.train(make_input_fn(poison), max_steps=STEPS)
    message = str(raised.value)
    assert "'aux/kernel' ({})".format(kind) in message
    assert "global step {}".format(POISONED_STEP) in message
    assert "aux/bias" not in message and "main/kernel" not in message
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest == os.path.join(str(tmp_path), "model.ckpt-{}".format(POISONED_STEP - 1))
    assert "the latest checkpoint stays {}".format(latest) in message
    assert checkpoint_steps(tmp_path) == list(range(POISONED_STEP))  # No checkpoint at or after the poisoned step.
    for name, value in checkpoint_values(latest).items():
        assert np.all(np.isfinite(value)), name

    # A restart (with the cause removed) continues from the last finite checkpoint to max_steps.
    make_estimator(tmp_path).train(make_input_fn(None), max_steps=STEPS)
    assert checkpoint_steps(tmp_path) == list(range(STEPS + 1))
    final = checkpoint_values(tf.train.latest_checkpoint(str(tmp_path)))
    assert final["global_step"] == STEPS
    assert all(np.all(np.isfinite(v)) for v in final.values())


def test_the_final_checkpoint_of_train_is_checked_too(tmp_path):
    """Saves only at the start and at the end of `train`: the end's save is refused, step 0 stays the latest."""
    estimator = make_estimator(tmp_path, save_checkpoints_steps=1000)
    with pytest.raises(
        NonFiniteCheckpointError, match=r"global step {} to .*: non-finite values in 'aux/kernel' \(Inf\)".format(STEPS)
    ):
        estimator.train(make_input_fn(np.inf), max_steps=STEPS)
    assert checkpoint_steps(tmp_path) == [0]
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-0")


def test_finite_runs_checkpoint_as_before(tmp_path):
    make_estimator(tmp_path).train(make_input_fn(None), max_steps=STEPS)
    assert checkpoint_steps(tmp_path) == list(range(STEPS + 1))


def test_non_finite_embedding_table_is_never_checkpointed(tmp_path):
    """Embedding tables are saved through custom saveables (logical tables): they are checked too."""
    spec = tex.EmbeddingConfigSpec(
        table_to_config_dict={
            "t1": tex.TableConfig(10, 4, initializer=tf.compat.v1.constant_initializer(0.1)),
            "t2": tex.TableConfig(7, 4, initializer=tf.compat.v1.constant_initializer(np.inf)),
        },
        feature_to_config_dict={
            "a": tex.FeatureConfig("t1"),
            "b": tex.FeatureConfig("t2"),
            "c": tex.FeatureConfig("t1"),
        },
        optimization_parameters=tex.AdagradParameters(0.3),
    )
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=2))
    estimator = te.TPUEstimator(
        model_fn=emb.model_fn, config=config, train_batch_size=emb.G, embedding_config_spec=spec
    )
    with pytest.raises(NonFiniteCheckpointError, match=r"non-finite values in 't2' \(Inf\)\.") as raised:
        estimator.train(emb.input_fn, max_steps=2)
    assert "global step 0" in str(raised.value) and "no checkpoint was written" in str(raised.value)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None


def test_every_shard_of_a_sharded_table_is_checked(tmp_path):
    """A table on 2 shards is saved as one slice per shard under one name: a NaN or Inf in the last shard's rows
    only (rows 5..9 of 't1') refuses the checkpoint too, naming the table once with both kinds."""
    t1 = np.full((10, 4), 0.1, np.float32)
    t1[8, 0] = np.nan
    t1[9, 1] = -np.inf
    spec = tex.EmbeddingConfigSpec(
        table_to_config_dict={
            "t1": tex.TableConfig(10, 4, initializer=tf.compat.v1.constant_initializer(t1)),
            "t2": tex.TableConfig(7, 4, initializer=tf.compat.v1.constant_initializer(0.2)),
        },
        feature_to_config_dict={
            "a": tex.FeatureConfig("t1"),
            "b": tex.FeatureConfig("t2"),
            "c": tex.FeatureConfig("t1"),
        },
        optimization_parameters=tex.AdagradParameters(0.3),
        partition_strategy="div",
    )
    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=2))
    estimator = te.TPUEstimator(
        model_fn=emb.model_fn, config=config, train_batch_size=emb.G, embedding_config_spec=spec
    )
    with pytest.raises(NonFiniteCheckpointError, match=r"non-finite values in 't1' \(NaN and Inf\)\.") as raised:
        estimator.train(emb.input_fn, max_steps=2)
    assert "'t2'" not in str(raised.value)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
