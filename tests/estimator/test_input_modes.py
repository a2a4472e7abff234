"""What input_fn and model_fn get in each input mode (docs/SEMANTICS.md 2), and how often input_fn is called."""

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import models

IPC = te.InputPipelineConfig


def _run(tmp_path, mode_config, mode, num_shards=4, batch=32, input_returns="dataset", **extra):
    calls = []
    model_calls = []

    def input_fn(params):
        context = params["context"]
        calls.append((params["batch_size"], context.current_input_fn_deployment(), context.num_replicas))
        dataset = models.dataset_input_fn(params)
        if input_returns == "tensors":
            return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        return dataset

    config = te.RunConfig(
        model_dir=str(tmp_path),
        tpu_config=te.TPUConfig(
            iterations_per_loop=2, num_shards=num_shards, per_host_input_for_training=mode_config, **extra
        ),
    )
    estimator = te.TPUEstimator(
        model_fn=models.make_model_fn(record=model_calls), config=config, train_batch_size=batch, eval_batch_size=batch
    )
    if mode == "train":
        estimator.train(input_fn, max_steps=2)
    else:
        estimator.train(models.dataset_input_fn, max_steps=1)
        del calls[:], model_calls[:]
        estimator.evaluate(input_fn, steps=2)
    return calls, model_calls


@pytest.mark.parametrize(
    "mode_config,input_batch,model_batch,num_calls,deployment",
    [
        (IPC.PER_HOST_V1, 32, 8, 1, (0, 1, 4)),
        (True, 32, 8, 1, (0, 1, 4)),
        (IPC.PER_HOST_V2, 8, 8, 1, (0, 1, 4)),
        (IPC.PER_SHARD_V1, 8, 8, 4, None),
        (False, 8, 8, 4, None),
        (IPC.BROADCAST, 32, 32, 1, (0, 1, 4)),
    ],
)
def test_train_batch_sizes_and_calls(tmp_path, mode_config, input_batch, model_batch, num_calls, deployment):
    calls, model_calls = _run(tmp_path, mode_config, "train")
    assert len(calls) == num_calls
    assert all(batch == input_batch for batch, _, _ in calls)
    assert all(replicas == 4 for _, _, replicas in calls)
    if deployment is None:  # once per shard, each consuming one replica
        assert [c[1][1:] for c in calls] == [(i, 4, 1) for i in range(4)]
    else:
        assert calls[0][1][1:] == deployment
    assert calls[0][1][0] == "/device:CPU:0"
    # model_fn is built once per shard (in the training loop), with the per-shard batch.
    # model_fn is traced once for the 4 replicas, as on a TPU (the other replicas are copies of its ops).
    assert [(m[0], m[1], m[3]) for m in model_calls] == [("train", model_batch, True)]


@pytest.mark.parametrize(
    "mode_config,input_batch,model_batch,num_calls",
    [
        (IPC.PER_HOST_V1, 32, 8, 1),
        (IPC.PER_HOST_V2, 8, 8, 1),
        (IPC.PER_SHARD_V1, 32, 8, 1),  # EVAL behaves as PER_HOST_V1
        (IPC.BROADCAST, 32, 32, 1),
    ],
)
def test_eval_batch_sizes_and_calls(tmp_path, mode_config, input_batch, model_batch, num_calls):
    calls, model_calls = _run(tmp_path, mode_config, "eval")
    assert [c[0] for c in calls] == [input_batch] * num_calls
    assert [(m[0], m[1]) for m in model_calls] == [("eval", model_batch)]  # traced once for the 4 replicas


def test_sliced_eval_gets_global_batch_split_over_replicas(tmp_path):
    calls, model_calls = _run(tmp_path, IPC.PER_HOST_V1, "eval", eval_training_input_configuration=IPC.SLICED)
    assert [c[0] for c in calls] == [32]
    assert calls[0][1][1:] == (0, 1, 4)
    assert [m[1] for m in model_calls] == [8]  # traced once for the 4 replicas


def test_per_host_v1_accepts_tensors_from_input_fn(tmp_path):
    calls, model_calls = _run(tmp_path, IPC.PER_HOST_V1, "train", input_returns="tensors")
    assert [c[0] for c in calls] == [32]
    assert [m[1] for m in model_calls] == [8]  # traced once for the 4 replicas


def test_tensor_input_trains_like_dataset_input(tmp_path):
    """The infeed thread feeds the same batches as the in-graph iterator."""
    results = []
    for kind in ("dataset", "tensors"):

        def input_fn(params, kind=kind):
            dataset = models.dataset_input_fn(params)
            if kind == "tensors":
                return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
            return dataset

        estimator = models.make_estimator(tmp_path / kind, num_shards=2)
        estimator.train(input_fn, max_steps=6)
        results.append(models.variables_of(estimator))
    for name in results[0]:
        np.testing.assert_allclose(results[0][name], results[1][name], atol=1e-6)


def test_per_host_v2_requires_dataset(tmp_path):
    with pytest.raises(TypeError, match="must return a `Dataset` for the PER_HOST_V2"):
        _run(tmp_path, IPC.PER_HOST_V2, "train", input_returns="tensors")


def test_batch_axis_splits_on_the_given_axis(tmp_path):
    """Features in [feature, batch] layout split on axis 1, labels on axis 0."""
    seen = []

    def input_fn(params):
        dataset = models.dataset_input_fn(params)
        return dataset.map(lambda x, y: (tf.transpose(x), y))

    def model_fn(features, labels, mode, params):
        seen.append(features.shape.as_list())
        x = tf.transpose(features)
        out = tf.keras.layers.Dense(1, kernel_initializer="zeros")(x)
        loss = tf.reduce_mean(tf.square(out - labels))
        opt = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
        return te.TPUEstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss, tf.compat.v1.train.get_global_step()))

    config = te.RunConfig(model_dir=str(tmp_path), tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=2))
    estimator = te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=32, batch_axis=[1, 0])
    estimator.train(input_fn, max_steps=1)
    assert seen == [[5, 16]]  # replica 0's half; model_fn is traced once (replica 1 is a copy on the other half)


def test_input_pipeline_config_is_an_int_enum_with_upstream_values():
    import enum

    from tpu_estimator.tpu_config import input_pipeline_config_name

    assert issubclass(IPC, enum.IntEnum)
    values = {member.name: int(member) for member in IPC}
    assert values == {"PER_SHARD_V1": 1, "PER_HOST_V1": 2, "PER_HOST_V2": 3, "BROADCAST": 4, "SLICED": 5}
    try:  # upstream's plain ints, where tensorflow_estimator imports (TF 2.15)
        from tensorflow_estimator.python.estimator.tpu import tpu_config as upstream
    except ImportError:
        upstream = None
    if upstream is not None:
        assert values == {name: getattr(upstream.InputPipelineConfig, name) for name in values}
    # Upstream's ints and True/False are taken; the config holds the member.
    assert te.TPUConfig(per_host_input_for_training=3).per_host_input_for_training is IPC.PER_HOST_V2
    assert te.TPUConfig(per_host_input_for_training=True).per_host_input_for_training is IPC.PER_HOST_V1
    assert te.TPUConfig(per_host_input_for_training=False).per_host_input_for_training is IPC.PER_SHARD_V1
    assert te.TPUConfig(
        per_host_input_for_training=3, input_partition_dims=[[1, 1]], num_cores_per_replica=1
    ).input_partition_dims == [[1, 1]]
    assert IPC.PER_HOST_V2 == 3 and IPC.PER_HOST_V2 + 1 == 4 and isinstance(IPC.SLICED, int)
    assert input_pipeline_config_name(3) == "InputPipelineConfig.PER_HOST_V2 (3)"
    assert input_pipeline_config_name(IPC.BROADCAST) == "InputPipelineConfig.BROADCAST (4)"
    assert input_pipeline_config_name(True) == "True"
    assert input_pipeline_config_name(9) == "9"


def test_each_input_mode_has_a_reader_of_the_one_protocol():
    from tpu_estimator.inputs import input_pipeline as ip

    readers = (ip._PerHostV2Reader, ip._PerShardReader, ip._HostBatchReader)
    assert all(ip.InputReader in reader.__mro__ for reader in readers)
    assert [name for name in vars(ip.InputReader) if not name.startswith("_")] == ["read"]
