"""The latest checkpoint's global step and `max_steps` reached by it, read as our Estimator and TPUEstimator's guard
read them (`estimator_core/checkpoint_step.py`)."""

import tensorflow as tf

from tpu_estimator.estimator_core.checkpoint_step import checkpoint_global_step, reached_max_steps


def _save(model_dir, step, with_global_step=True):
    with tf.Graph().as_default():
        if with_global_step:
            global_step = tf.compat.v1.train.get_or_create_global_step()
        tf.compat.v1.get_variable("w", initializer=1.0)
        init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session() as session:
            session.run(init)
            if with_global_step:
                session.run(tf.compat.v1.assign(global_step, step))
            tf.compat.v1.train.Saver().save(session, str(model_dir / "model.ckpt"), global_step=step)


def test_global_step_of_the_latest_checkpoint(tmp_path):
    assert checkpoint_global_step(str(tmp_path)) is None
    _save(tmp_path, 3)
    _save(tmp_path, 7)
    assert checkpoint_global_step(str(tmp_path)) == 7


def test_checkpoint_without_global_step(tmp_path):
    _save(tmp_path, 5, with_global_step=False)
    assert checkpoint_global_step(str(tmp_path)) is None
    assert reached_max_steps(str(tmp_path), None, 1) is None


def test_max_steps_reached(tmp_path):
    model_dir = str(tmp_path)
    assert reached_max_steps(model_dir, None, 1) is None  # no checkpoint
    _save(tmp_path, 7)
    assert reached_max_steps(model_dir, None, 7) == 7
    assert reached_max_steps(model_dir, None, 5) == 7
    assert reached_max_steps(model_dir, None, 8) is None
    # `steps` trains from wherever the checkpoint is; invalid arguments are the Estimator's to refuse.
    assert reached_max_steps(model_dir, 3, None) is None
    assert reached_max_steps(model_dir, None, None) is None
    assert reached_max_steps(model_dir, None, 0) is None
    assert reached_max_steps(model_dir, None, "7") is None
