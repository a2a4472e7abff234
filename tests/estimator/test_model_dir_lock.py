"""One writer per model_dir: a second trainer fails fast naming the holder; dead holders are taken over;
readers need no lock; `max_steps` already reached trains nothing; a `kill -9`ed run resumes bit-identically."""

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tests.estimator import guarded_trainer
from tpu_estimator.checkpoints import model_dir_lock
from tpu_estimator.checkpoints.model_dir_lock import LOCK_FILE_NAME, ModelDirLock, ModelDirLockedError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_STEPS = 5
TIMEOUT_SECS = 240


def start_trainer(model_dir, max_steps=MAX_STEPS, gate=None, **environment):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO, **environment)
    command = [sys.executable, "-m", "tests.estimator.guarded_trainer", str(model_dir), str(max_steps)]
    if gate is not None:
        command.append(str(gate))
    return subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process):
    try:
        output, _ = process.communicate(timeout=TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError("trainer timed out:\n" + output[-4000:])
    return process.returncode, output


def wait_for(path, process):
    deadline = time.time() + TIMEOUT_SECS
    while not os.path.exists(path):
        if process.poll() is not None or time.time() > deadline:
            raise AssertionError("trainer never reached the gate:\n" + process.communicate()[0][-4000:])
        time.sleep(0.1)


@contextlib.contextmanager
def paused_past_the_stale_window(process, gate):
    """Pauses `process` (SIGSTOP) once it waits at `gate`, for 3 s: its heartbeat is then older than the tests' 2 s
    stale window. The body runs while it is paused; then the gate opens and the process continues (SIGCONT)."""
    wait_for(str(gate) + ".waiting", process)
    os.kill(process.pid, signal.SIGSTOP)
    try:
        time.sleep(3)
        yield
    finally:
        gate.touch()
        os.kill(process.pid, signal.SIGCONT)


def error_line(code, output):
    """The trainer's `ERROR` line (TensorFlow may log "... ERROR (303)" before it); its status must be 3."""
    assert code == 3, output
    return output.split("\nERROR ", 1)[1]


def train_seconds(output):
    return float(output.split("TRAIN_SECONDS ", 1)[1].split()[0])


def checkpoint_values(model_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    """The final checkpoint of an uninterrupted run (in this process)."""
    model_dir = tmp_path_factory.mktemp("undisturbed")
    guarded_trainer.make_estimator(model_dir).train(guarded_trainer.input_fn, max_steps=MAX_STEPS)
    values = checkpoint_values(model_dir)
    assert values["global_step"] == MAX_STEPS
    return values


def assert_same_checkpoint(values, expected):
    assert sorted(values) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(values[name], expected[name], err_msg=name)


def test_second_trainer_fails_fast_naming_the_holder(tmp_path, undisturbed):
    model_dir, gate = tmp_path / "model", tmp_path / "gate"
    first = start_trainer(model_dir, gate=gate)
    try:
        wait_for(str(gate) + ".waiting", first)  # The first trainer holds the lock and is mid-run.
        code, output = finish(start_trainer(model_dir))
    finally:
        gate.touch()
    first_code, first_output = finish(first)
    error = error_line(code, output)
    assert train_seconds(output) < 5.0, output
    assert error.startswith("ModelDirLockedError: model_dir {} is being trained by another process".format(model_dir))
    assert "host {}, pid {}, since ".format(socket.gethostname(), first.pid) in error
    assert "delete the lock file {}".format(model_dir / LOCK_FILE_NAME) in error
    # The first run is undisturbed: exactly the checkpoint of an uninterrupted run; its lock is released.
    assert first_code == 0, first_output
    assert_same_checkpoint(checkpoint_values(model_dir), undisturbed)
    assert not (model_dir / LOCK_FILE_NAME).exists()

    # Another process finds max_steps reached by that checkpoint: it trains nothing and says so.
    before = sorted(os.listdir(model_dir))
    code, output = finish(start_trainer(model_dir))
    assert code == 0, output
    assert (
        "Not training: the latest checkpoint in {} is at global step {}, max_steps={} is already reached".format(
            model_dir, MAX_STEPS, MAX_STEPS
        )
        in output
    )
    assert sorted(os.listdir(model_dir)) == before
    assert_same_checkpoint(checkpoint_values(model_dir), undisturbed)


def test_killed_trainer_resumes_bit_identically_taking_over_its_lock(tmp_path, undisturbed):
    model_dir, gate = tmp_path / "model", tmp_path / "gate"
    killed = start_trainer(model_dir, gate=gate)
    wait_for(str(gate) + ".waiting", killed)
    os.kill(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=TIMEOUT_SECS)
    holder = json.loads((model_dir / LOCK_FILE_NAME).read_text())
    assert holder["pid"] == killed.pid  # Left behind by the killed run.
    assert checkpoint_values(model_dir)["global_step"] == guarded_trainer.GATE_STEP

    code, output = finish(start_trainer(model_dir))
    assert code == 0, output
    assert (
        "Taking over the training lock of {} from host {}, pid {}".format(model_dir, socket.gethostname(), killed.pid)
        in output
    )
    assert "its process is not running" in output
    assert_same_checkpoint(checkpoint_values(model_dir), undisturbed)
    assert not (model_dir / LOCK_FILE_NAME).exists()


def test_a_stopped_trainer_keeps_its_lock_however_old_its_heartbeat(tmp_path, undisturbed):
    # A trainer paused (SIGSTOP, a debugger, swapped out) longer than the heartbeat's stale window is alive on this
    # machine: a second trainer must not take its lock over (both would write checkpoints into model_dir).
    model_dir, gate = tmp_path / "model", tmp_path / "gate"
    stale = {model_dir_lock.STALE_AFTER_ENV: "2"}
    stopped = start_trainer(model_dir, gate=gate, **stale)
    with paused_past_the_stale_window(stopped, gate):
        code, output = finish(start_trainer(model_dir, **stale))
    stopped_code, stopped_output = finish(stopped)
    error = error_line(code, output)
    assert error.startswith("ModelDirLockedError: model_dir {} is being trained by another process".format(model_dir))
    assert "host {}, pid {}, since ".format(socket.gethostname(), stopped.pid) in error
    heartbeat_age = float(error.split("(last heartbeat ", 1)[1].split(" s ago)")[0])
    assert heartbeat_age > 2, error
    assert "Taking over" not in output
    # The stopped run, continued, ends as an uninterrupted run; only its checkpoints are in model_dir.
    assert stopped_code == 0, stopped_output
    assert_same_checkpoint(checkpoint_values(model_dir), undisturbed)
    assert not (model_dir / LOCK_FILE_NAME).exists()


def test_a_trainer_that_lost_its_lock_stops_before_its_next_checkpoint_naming_the_holder(tmp_path):
    # The trainer is stopped (SIGSTOP) beyond the stale window; meanwhile a trainer on another machine (which can only
    # judge it by its heartbeat) takes the lock over as `ModelDirLock._take_over` does: removes the file and creates
    # its own. Continued, the stopped trainer must write no checkpoint after that.
    model_dir, gate = tmp_path / "model", tmp_path / "gate"
    stopped = start_trainer(model_dir, gate=gate, **{model_dir_lock.STALE_AFTER_ENV: "2"})
    with paused_past_the_stale_window(stopped, gate):  # at the gate, checkpoints of steps 0..2 are written
        os.remove(model_dir / LOCK_FILE_NAME)
        write_lock(str(model_dir), host="other-machine", pid=4242, boot_id="another-boot", token="the-new-holder")
        before = sorted(os.listdir(model_dir))
    error = error_line(*finish(stopped))
    assert error.startswith(
        "ModelDirLockLostError: Stopped before writing the checkpoint of step {}: this process no longer holds the "
        "training lock of model_dir {}; it is held by host other-machine, pid 4242, since ".format(
            guarded_trainer.GATE_STEP + 1, model_dir
        )
    ), error
    # Nothing written after the loss: the same files, the last checkpoint the one before the pause; the new
    # holder's lock is left in place.
    assert sorted(os.listdir(model_dir)) == before
    assert checkpoint_values(model_dir)["global_step"] == guarded_trainer.GATE_STEP
    assert json.loads((model_dir / LOCK_FILE_NAME).read_text())["token"] == "the-new-holder"


# ---------------------------------------------------------------------------------------------- in process


def write_lock(model_dir, **fields):
    os.makedirs(model_dir, exist_ok=True)
    holder = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "process_start": model_dir_lock._process_start(os.getpid()),
        "boot_id": model_dir_lock._boot_id(),
        "start_time": time.time() - 60,
        "heartbeat": time.time(),
        "token": "someone-else",
    }
    holder.update(fields)
    path = os.path.join(model_dir, LOCK_FILE_NAME)
    with open(path, "w") as f:
        json.dump(holder, f)
    os.utime(path, (holder["heartbeat"], holder["heartbeat"]))  # a holder's heartbeat touches its file
    return holder


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_live_holder_refuses_in_process(tmp_path):
    write_lock(str(tmp_path))  # Held by a live process (this one, under another token).
    start = time.time()
    with pytest.raises(ModelDirLockedError) as raised:
        guarded_trainer.make_estimator(tmp_path).train(guarded_trainer.input_fn, max_steps=2)
    assert time.time() - start < 5.0
    assert "host {}, pid {}, since ".format(socket.gethostname(), os.getpid()) in str(raised.value)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None


@pytest.mark.parametrize(
    "holder",
    [
        {"pid": "dead"},  # Same host and boot, pid not running.
        {"process_start": "1"},  # Same host and boot, the pid is now another process.
        {"host": "elsewhere", "heartbeat": time.time() - 3600},  # Another host, heartbeat an hour old.
    ],
)
def test_provably_gone_holder_is_taken_over(tmp_path, caplog, holder):
    if holder.get("pid") == "dead":
        holder = dict(holder, pid=dead_pid())
    write_lock(str(tmp_path), **holder)
    with caplog.at_level(logging.WARNING):
        guarded_trainer.make_estimator(tmp_path).train(guarded_trainer.input_fn, max_steps=2)
    assert checkpoint_values(tmp_path)["global_step"] == 2
    assert "Taking over the training lock of {}".format(tmp_path) in caplog.text
    assert not (tmp_path / LOCK_FILE_NAME).exists()


def test_live_holder_on_another_host_is_not_taken_over(tmp_path):
    write_lock(str(tmp_path), host="elsewhere", pid=1, heartbeat=time.time() - 30)
    with pytest.raises(ModelDirLockedError, match=r"host elsewhere, pid 1, since .* \(last heartbeat 3\d s ago\)"):
        ModelDirLock(str(tmp_path)).acquire()


def test_heartbeat_refreshes_the_lock_file(tmp_path):
    with ModelDirLock(str(tmp_path), heartbeat_secs=0.2, stale_after_secs=1.0) as lock:
        first = lock._read_holder()
        content = (tmp_path / LOCK_FILE_NAME).read_text()
        time.sleep(0.7)
        second = lock._read_holder()
        assert second["token"] == first["token"] and second["heartbeat"] > first["heartbeat"]
        assert second["start_time"] == first["start_time"]
        # Touched, never rewritten: a holder paused mid-beat cannot overwrite a lock taken over meanwhile.
        assert (tmp_path / LOCK_FILE_NAME).read_text() == content
        assert second["heartbeat"] == pytest.approx(os.stat(tmp_path / LOCK_FILE_NAME).st_mtime)
        # A contender on another host would judge it alive: the heartbeat is fresh.
        assert lock._gone_reason(dict(second, host="elsewhere")) is None
    assert not (tmp_path / LOCK_FILE_NAME).exists()


def serving_input_receiver_fn():
    feature = tf.compat.v1.placeholder(tf.float32, [None, 4])
    return te.estimator.export.TensorServingInputReceiver(feature, feature)


def test_readers_need_no_lock(tmp_path):
    estimator = guarded_trainer.make_estimator(tmp_path)
    estimator.train(guarded_trainer.input_fn, max_steps=2)
    with ModelDirLock(str(tmp_path)):  # A writer holds model_dir.
        metrics = estimator.evaluate(guarded_trainer.input_fn, steps=1)
        predictions = list(estimator.predict(lambda params: tf.data.Dataset.from_tensors(guarded_trainer.X)))
        export_dir = estimator.export_saved_model(str(tmp_path / "export"), serving_input_receiver_fn)
        with pytest.raises(ModelDirLockedError):
            estimator.train(guarded_trainer.input_fn, max_steps=4)
    assert metrics["global_step"] == 2
    assert len(predictions) == guarded_trainer.BATCH
    assert os.path.isdir(export_dir)


def test_max_steps_reached_runs_no_step(tmp_path, caplog):
    calls = []

    def counting_model_fn(features, labels, mode, params):
        calls.append(mode)
        return guarded_trainer.model_fn(features, labels, mode, params)

    guarded_trainer.make_estimator(tmp_path).train(guarded_trainer.input_fn, max_steps=3)
    before = checkpoint_values(tmp_path)
    files = sorted(os.listdir(tmp_path))
    again = guarded_trainer.make_estimator(tmp_path, counting_model_fn)
    with caplog.at_level(logging.WARNING):
        assert again.train(guarded_trainer.input_fn, max_steps=3) is again
    assert calls == []
    assert sorted(os.listdir(tmp_path)) == files
    assert_same_checkpoint(checkpoint_values(tmp_path), before)
    assert (
        "Not training: the latest checkpoint in {} is at global step 3, max_steps=3 is already reached".format(tmp_path)
        in caplog.text
    )
