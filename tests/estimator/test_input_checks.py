"""A NaN or Inf in the training input is an error naming the feature or label, found before the step computes
anything from it (issue 36 item 7): not a non-finite embedding gradient blamed on a table, nor a non-finite loss."""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import test_embedding_estimator as emb
from tpu_estimator import experimental as tex

DENSE = np.ones((emb.N, 2), np.float32)


def input_fn_with(dense=DENSE, labels=emb.Y):
    def input_fn(params):
        features = {"a": emb.A, "b": emb.B, "c": emb.C, "x": dense}
        return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(params["batch_size"], True)

    return input_fn


def model_fn(features, labels, mode, params):
    """Embedding activations and a dense feature `x` through a readout; the gradient of table t1 holds the dense
    feature's values (a NaN in `x` makes t1's gradient NaN, which the embedding engine would report)."""
    acts = tf.concat([features["a"], features["b"], features["c"]], axis=1)
    dense = tf.reduce_sum(features["x"], axis=1, keepdims=True)
    logit = tf.squeeze(tf.matmul(acts * dense, tf.constant(emb.W.reshape(12, 1))), 1)
    loss = tf.reduce_mean(tf.square(logit - labels))
    opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))


def make_estimator(tmp_path, per_host_input_for_training=te.InputPipelineConfig.PER_HOST_V2):
    tpu_config = te.TPUConfig(
        iterations_per_loop=2, num_shards=2, per_host_input_for_training=per_host_input_for_training
    )
    return te.TPUEstimator(
        model_fn=model_fn,
        config=te.RunConfig(model_dir=str(tmp_path), tpu_config=tpu_config),
        train_batch_size=emb.G,
        embedding_config_spec=emb.make_spec(tex.AdagradParameters(0.1)),
    )


def poisoned(values, row, value):
    values = values.copy()
    values[row] = value
    return values


@pytest.mark.parametrize(
    "input_mode", [te.InputPipelineConfig.PER_HOST_V2, te.InputPipelineConfig.PER_HOST_V1], ids=["v2", "v1"]
)
@pytest.mark.parametrize(
    "where, poison, said",
    [
        ("dense", np.nan, "features['x'] (from input_fn) : Tensor had NaN values"),
        ("dense", -np.inf, "features['x'] (from input_fn) : Tensor had Inf values"),
        ("labels", np.nan, "labels (from input_fn) : Tensor had NaN values"),
    ],
)
def test_non_finite_input_is_named_not_blamed_on_a_table(tmp_path, input_mode, where, poison, said):
    # Row 2 * G + 3: in the second step's batch, after one step and a checkpoint were made.
    row = 2 * emb.G + 3
    if where == "dense":
        input_fn = input_fn_with(dense=poisoned(DENSE, row, poison))
    else:
        input_fn = input_fn_with(labels=poisoned(emb.Y, row, poison))
    estimator = make_estimator(tmp_path, input_mode)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        estimator.train(input_fn, max_steps=6)
    message = str(raised.value)
    assert message.splitlines()[0] == "Non-finite training input " + said  # first: not only in TensorFlow's text
    assert "embedding gradient" not in message


def test_finite_input_trains_as_before(tmp_path):
    estimator = make_estimator(tmp_path)
    estimator.train(input_fn_with(), max_steps=4)
    assert estimator.get_variable_value("global_step") == 4
