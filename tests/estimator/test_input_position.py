"""`input_position.checkpoint_position(dataset)`: checkpoints hold the training input's position, so training
resumed from any checkpoint (what kill -9 leaves) ends where an uninterrupted run ends, in every variable; without
the mark the input starts again (upstream's behaviour) and the runs differ."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator.inputs import input_position

RNG = np.random.RandomState(5)
X = RNG.randn(40, 3).astype(np.float32)  # 40 rows: batches of 8 cross the epoch boundary mid-run
Y = X @ np.array([[1.0], [-2.0], [0.5]], np.float32) + RNG.randn(40, 1).astype(np.float32)
STEPS = 9


def make_input_fn(mark):
    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(40, seed=3).repeat()
        dataset = dataset.batch(params["batch_size"], drop_remainder=True)
        return input_position.checkpoint_position(dataset) if mark else dataset

    return input_fn


def model_fn(features, labels, mode, params):
    out = tf.compat.v1.layers.dense(features, 1, name="linear")
    loss = tf.reduce_mean(tf.square(out - labels))
    optimizer = te.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(0.1))
    return te.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def train(model_dir, mark, input_mode):
    config = te.RunConfig(
        model_dir=str(model_dir),
        save_checkpoints_steps=2,
        keep_checkpoint_max=None,
        tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=2, per_host_input_for_training=input_mode),
    )
    te.TPUEstimator(model_fn=model_fn, config=config, train_batch_size=16).train(make_input_fn(mark), max_steps=STEPS)


def values(checkpoint):
    reader = tf.train.load_checkpoint(checkpoint)
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if not name.startswith(input_position.KEY_PREFIX)
    }


def resumed_from(source, step, model_dir):
    os.makedirs(model_dir)
    for name in os.listdir(source):
        if name.startswith(f"model.ckpt-{step}."):
            shutil.copy(os.path.join(source, name), model_dir)
    with open(os.path.join(model_dir, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "model.ckpt-{step}"\n')


@pytest.mark.parametrize(
    "input_mode", [te.InputPipelineConfig.PER_HOST_V2, te.InputPipelineConfig.PER_HOST_V1], ids=["v2", "v1"]
)
@pytest.mark.parametrize("mark", [True, False], ids=["marked", "unmarked"])
def test_resumed_training_equals_uninterrupted_only_with_the_position(tmp_path, input_mode, mark):
    train(tmp_path / "whole", mark, input_mode)
    final = values(str(tmp_path / "whole" / f"model.ckpt-{STEPS}"))
    resumed_from(tmp_path / "whole", 4, tmp_path / "resumed")
    train(tmp_path / "resumed", mark, input_mode)
    resumed = values(str(tmp_path / "resumed" / f"model.ckpt-{STEPS}"))
    same = all(np.array_equal(final[name], resumed[name]) for name in final)
    assert same == mark
    assert sorted(final) == sorted(resumed) and "linear/kernel" in final


def test_marking_outside_input_fn_is_an_error():
    with pytest.raises(RuntimeError, match=r"checkpoint_position\(dataset\) is called in input_fn"):
        input_position.checkpoint_position(tf.data.Dataset.range(3))
