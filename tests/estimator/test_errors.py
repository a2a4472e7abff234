"""Validation errors with upstream's texts, and input errors that surface promptly (docs/SEMANTICS.md 2-4)."""

import time

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import models
from tpu_estimator import estimator as tf_estimator
from tpu_estimator.replicas import replication


def _config(tmp_path, **tpu_kwargs):
    return te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(**tpu_kwargs))


def test_config_must_be_our_run_config():
    with pytest.raises(ValueError, match=r"`config` must be provided with type `tpu_config.RunConfig`"):
        te.TPUEstimator(model_fn=models.make_model_fn(), config=tf_estimator.RunConfig(), train_batch_size=8)


def test_reserved_params(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"\['batch_size', 'context'\] are reserved keys but existed in params "
        r"\{'batch_size': 3\}\.",
    ):
        te.TPUEstimator(
            model_fn=models.make_model_fn(), config=_config(tmp_path), params={"batch_size": 3}, train_batch_size=8
        )


def test_batch_size_checks(tmp_path):
    with pytest.raises(ValueError, match="`train_batch_size` cannot be `None`"):
        te.TPUEstimator(model_fn=models.make_model_fn(), config=_config(tmp_path))
    with pytest.raises(TypeError, match="train_batch_size must be int"):
        te.TPUEstimator(model_fn=models.make_model_fn(), config=_config(tmp_path), train_batch_size=8.0)
    with pytest.raises(ValueError, match="eval_batch_size must be positive, got 0"):
        te.TPUEstimator(
            model_fn=models.make_model_fn(), config=_config(tmp_path), train_batch_size=8, eval_batch_size=0
        )


def test_batch_not_divisible_by_replicas(tmp_path):
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(), config=_config(tmp_path, num_shards=4), train_batch_size=30, eval_batch_size=30
    )
    with pytest.raises(ValueError, match="train batch size 30 must be divisible by number of replicas 4"):
        estimator.train(models.dataset_input_fn, max_steps=1)
    with pytest.raises(ValueError, match="eval batch size 30 must be divisible by number of replicas 4"):
        estimator.evaluate(models.dataset_input_fn, steps=1)


def test_input_batch_not_divisible_by_replicas_names_the_input(tmp_path):
    # PER_HOST_V1 splits the host's batch over its replicas: an input_fn that ignores params["batch_size"] (8) and
    # returns batches of 6 for 4 replicas is refused before training, naming the input and its axis.
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(), config=_config(tmp_path, num_shards=4), train_batch_size=8
    )
    with pytest.raises(
        ValueError, match=r"the batch dimension of input 0 \(axis 0\) 6 must be divisible by number of replicas 4"
    ):
        estimator.train(lambda params: models.dataset_input_fn(dict(params, batch_size=6)), max_steps=1)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None


def test_eval_batch_size_required_on_shards(tmp_path):
    estimator = te.TPUEstimator(model_fn=models.make_model_fn(), config=_config(tmp_path), train_batch_size=8)
    estimator.train(models.dataset_input_fn, max_steps=1)
    with pytest.raises(ValueError, match="eval_batch_size in TPUEstimator constructor cannot be `None`"):
        estimator.evaluate(models.dataset_input_fn, steps=1)


def test_eval_and_train_steps_required(tmp_path):
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(), config=_config(tmp_path), train_batch_size=8, eval_batch_size=8
    )
    with pytest.raises(ValueError, match="one of `steps` or `max_steps` must be set"):
        estimator.train(models.dataset_input_fn)
    estimator.train(models.dataset_input_fn, max_steps=1)
    with pytest.raises(ValueError, match="Evaluate `steps` must be set on TPU. Cannot be `None`."):
        estimator.evaluate(models.dataset_input_fn)


@pytest.mark.parametrize("value", [0, -1, "0s", "abc", "10d", 1.5])
def test_iterations_per_loop_values(value):
    with pytest.raises(ValueError, match="Invalid TPUConfig `iterations_per_loop` value"):
        te.TPUConfig(iterations_per_loop=value)


def test_tpu_config_checks():
    assert te.TPUConfig(iterations_per_loop="2m").iterations_per_loop == "2m"
    assert te.TPUConfig(per_host_input_for_training=False).per_host_input_for_training == 1
    assert te.TPUConfig(per_host_input_for_training=True).per_host_input_for_training == 2
    with pytest.raises(ValueError, match="num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64, 128; got 3"):
        te.TPUConfig(num_cores_per_replica=3)
    with pytest.raises(ValueError, match="TPUConfig num_shards must be positive, got 0"):
        te.TPUConfig(num_shards=0)
    with pytest.raises(ValueError, match="eval_training_input_configuration must be PER_HOST_V1 or SLICED"):
        te.TPUConfig(eval_training_input_configuration=te.InputPipelineConfig.PER_HOST_V2)
    with pytest.raises(ValueError, match="input_partition_dims is only supported in PER_HOST_V2 mode."):
        te.TPUConfig(input_partition_dims=[[1, 2], None])


def test_model_parallelism_is_rejected_with_what_to_change(tmp_path):
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(), config=_config(tmp_path, num_cores_per_replica=2), train_batch_size=8
    )
    with pytest.raises(te.UnsupportedOffTPUError, match="set num_cores_per_replica=None"):
        estimator.train(models.dataset_input_fn, max_steps=1)


def test_run_config_gives_one_cpu_device_per_shard(tmp_path, monkeypatch):
    config = _config(tmp_path, num_shards=4)
    assert config.num_shards == 4
    assert config.session_config.device_count["CPU"] == 4
    assert config.session_config.allow_soft_placement
    monkeypatch.setenv("TPU_ESTIMATOR_NUM_SHARDS", "2")
    assert config.num_shards == 2
    assert config.session_config.device_count["CPU"] == 2
    monkeypatch.setenv("TPU_ESTIMATOR_NUM_SHARDS", "two")
    with pytest.raises(ValueError, match="TPU_ESTIMATOR_NUM_SHARDS must be a positive integer"):
        _ = config.num_shards


def test_training_without_cross_shard_reduction_fails(tmp_path):
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(optimizer_wrapper=None),
        config=_config(tmp_path, num_shards=2),
        train_batch_size=8,
    )
    with pytest.raises(ValueError, match="CrossShardOptimizer must be used for model training on TPUs."):
        estimator.train(models.dataset_input_fn, max_steps=1)


def test_diverging_replicas_are_reported():
    """Where each replica runs its own build (a cluster, `tpu.replicate`), one that reduces more is reported."""

    def build(replica_id):
        loss = tf.reduce_sum(tf.ones([2]))
        if replica_id == 1:  # replica 1 reduces once more than replica 0
            te.cross_replica_sum(loss)
        return te.cross_replica_sum(loss)

    with tf.Graph().as_default():
        with pytest.raises((RuntimeError, ValueError), match="Replicas diverged"):
            replication.build_replicas(build, ["/device:CPU:0", "/device:CPU:0"])


@pytest.mark.parametrize("num_shards", [2, 4])
def test_model_fn_is_traced_once_on_one_host(tmp_path, num_shards):
    """As on a TPU, `model_fn` runs once per graph whatever the shards: a device-dependent branch cannot diverge."""
    calls = []

    def model_fn(features, labels, mode, params):
        calls.append(tf.constant(0.0).device)
        loss = tf.reduce_mean(tf.keras.layers.Dense(1)(features) - labels)
        if tf.constant(0.0).device.endswith(":1"):  # would reduce once more on a replica placed on CPU:1
            te.cross_replica_sum(loss)
        opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
        return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))

    estimator = te.TPUEstimator(
        model_fn=model_fn, config=_config(tmp_path, num_shards=num_shards), train_batch_size=4 * num_shards
    )
    estimator.train(models.dataset_input_fn, max_steps=1)
    assert len(calls) == 1, calls
    assert tf.train.load_checkpoint(str(tmp_path)).get_tensor("global_step") == 1


def test_dynamic_shapes_are_rejected(tmp_path):
    def input_fn(params):
        return models.dataset_input_fn(params).unbatch().batch(params["batch_size"])  # no drop_remainder

    estimator = te.TPUEstimator(model_fn=models.make_model_fn(), config=_config(tmp_path), train_batch_size=8)
    with pytest.raises(ValueError, match="The features to the model returned by input_fn must have static shape."):
        estimator.train(input_fn, max_steps=1)


def test_input_error_mid_training_surfaces_promptly(tmp_path):
    def input_fn(params):
        def poison(i, element):
            x, y = element
            return tf.where(i < 3, x, x * np.inf), y

        dataset = models.dataset_input_fn(params).enumerate().map(poison)
        return dataset.map(lambda x, y: (tf.debugging.check_numerics(x, "bad input row"), y))

    _assert_training_fails_within_30s(tmp_path, input_fn, "bad input row")


def _assert_training_fails_within_30s(tmp_path, input_fn, message: str) -> None:
    """Training on 2 shards (2 steps a loop) from `input_fn` raises its InvalidArgumentError `message` within 30 s."""
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(),
        config=_config(tmp_path, num_shards=2, iterations_per_loop=2),
        train_batch_size=8,
    )
    start = time.time()
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        estimator.train(input_fn, max_steps=10)
    assert time.time() - start < 30


def test_infeed_thread_error_surfaces_promptly(tmp_path):
    def input_fn(params):
        counter = tf.compat.v1.train.get_or_create_global_step()
        iterator = tf.compat.v1.data.make_one_shot_iterator(models.dataset_input_fn(params).enumerate())
        i, (x, y) = iterator.get_next()
        x = tf.debugging.check_numerics(tf.where(i < 3, x, x * np.inf), "bad row from the infeed thread")
        del counter
        return x, y

    _assert_training_fails_within_30s(tmp_path, input_fn, "bad row from the infeed thread")


def test_a_train_estimator_spec_on_shards_is_read_as_a_tpu_estimator_spec():
    from tpu_estimator import _estimator_lib
    from tpu_estimator.specs.spec import verify_spec_on_shards

    with tf.Graph().as_default():
        loss = tf.constant(1.0)
        train_op = tf.no_op()
        hook = tf.compat.v1.train.StopAtStepHook(last_step=1)
        spec = _estimator_lib.EstimatorSpec(
            mode=_estimator_lib.ModeKeys.TRAIN, loss=loss, train_op=train_op, training_hooks=[hook]
        )
        verified = verify_spec_on_shards(spec, _estimator_lib.ModeKeys.TRAIN)
    assert type(verified) is te.TPUEstimatorSpec
    assert (verified.loss, verified.train_op, verified.training_hooks) == (loss, train_op, (hook,))
    assert (verified.host_call, verified.scaffold_fn, verified.eval_metrics) == (None, None, None)
