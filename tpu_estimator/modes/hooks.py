"""Session hooks of the loops on shards: loop sizing and stopping (TRAIN and EVAL), progress (loss/step logging,
examples/sec), SIGINT."""

import dataclasses
import math
import signal
import time
from typing import List, Optional

import tensorflow as tf

from tpu_estimator.tpu_config import IterationsPerLoopCounter


def iterations_per_loop_tensor(default: int) -> tf.Tensor:
    """The loop-length tensor of the training loop (fed by its `LoopStopHook`).

    Args:
      default: the loop length when nothing is fed.

    Returns:
      A scalar int32 `placeholder_with_default`.
    """
    return tf.compat.v1.placeholder_with_default(tf.constant(default, tf.int32), [], name="iterations_per_loop")


def eval_loop_length_tensor(steps: int) -> tf.Tensor:
    """The loop-length tensor of the evaluation loop: `evaluate(steps=N)`'s N steps run in one `Session.run`.

    Args:
      steps: `evaluate()`'s `steps`.

    Returns:
      A scalar int32 `placeholder_with_default` of value `steps`.
    """
    return tf.compat.v1.placeholder_with_default(tf.constant(steps, tf.int32), [], name="evaluation_loop_length")


class LoopStopHook(tf.compat.v1.train.SessionRunHook):
    """Feeds the number of steps of each loop and stops at the last step.

    Each `Session.run` runs `min(remaining, iterations_per_loop)` steps, so `max_steps` is hit exactly. With a time
    `iterations_per_loop` (`'30s'`), the first loop runs one step and later loops as many steps as the measured
    step time fits into the period. The training loop makes it with its loop-length tensor.

    Args:
      iterations_per_loop: the parsed `TPUConfig.iterations_per_loop`.
      iterations: the loop-length tensor it feeds (`iterations_per_loop_tensor`).
      num_steps: steps to run from the current global step (`train(steps=...)`).
      last_step: global step to stop at (`train(max_steps=...)`).

    Raises:
      ValueError: neither `num_steps` nor `last_step` is given.
    """

    def __init__(
        self,
        iterations_per_loop: IterationsPerLoopCounter,
        iterations: tf.Tensor,
        num_steps: Optional[int] = None,
        last_step: Optional[int] = None,
    ):
        if num_steps is None and last_step is None:
            raise ValueError("One of num_steps or last_step must be specified.")
        self._iterations = iterations
        self._ipl = iterations_per_loop
        self._num_steps = num_steps
        self._last_step = last_step
        self._step_time = None
        self._loop_start = None
        self._loop_steps = 0

    def begin(self):
        self._global_step_tensor = tf.compat.v1.train.get_global_step()
        if self._global_step_tensor is None:
            raise RuntimeError("Global step should be created to use LoopStopHook.")

    def after_create_session(self, session, coord):
        self._current_step = int(session.run(self._global_step_tensor))
        if self._last_step is None:
            self._last_step = self._current_step + self._num_steps

    def _loop_size(self) -> int:
        remaining = self._last_step - self._current_step
        if self._ipl.unit == "count":
            return max(1, min(self._ipl.value, remaining))
        if self._step_time is None:
            return 1
        return max(1, min(int(self._ipl.value / max(self._step_time, 1e-9)), remaining))

    def before_run(self, run_context):
        self._loop_steps = self._loop_size()
        self._loop_start = time.time()
        return tf.compat.v1.train.SessionRunArgs(fetches=None, feed_dict={self._iterations: self._loop_steps})

    def after_run(self, run_context, run_values):
        elapsed = time.time() - self._loop_start
        if self._loop_steps > 0:
            measured = elapsed / self._loop_steps
            self._step_time = measured if self._step_time is None else 0.5 * (self._step_time + measured)
        self._current_step = int(run_context.session.run(self._global_step_tensor))
        if self._current_step >= self._last_step:
            run_context.request_stop()


class ExamplesPerSecondHook(tf.compat.v1.train.StepCounterHook):
    """Reports `global_step/sec` and `examples/sec` (log and summaries), like upstream's hook.

    Args:
      batch_size: the global batch size.
      every_n_steps: report every this many global steps.
      every_n_secs: or every this many seconds.
      output_dir: where the summaries are written.
    """

    def __init__(
        self,
        batch_size: int,
        every_n_steps: Optional[int] = 100,
        every_n_secs: Optional[int] = None,
        output_dir: Optional[str] = None,
        summary_writer=None,
    ):
        self._batch_size = batch_size
        super(ExamplesPerSecondHook, self).__init__(
            every_n_steps=every_n_steps, every_n_secs=every_n_secs, output_dir=output_dir, summary_writer=summary_writer
        )

    def _log_and_record(self, elapsed_steps, elapsed_time, global_step):
        steps_per_sec = elapsed_steps / elapsed_time
        examples_per_sec = self._batch_size * steps_per_sec
        if self._summary_writer is not None:
            self._summary_writer.add_summary(
                tf.compat.v1.Summary(
                    value=[tf.compat.v1.Summary.Value(tag="global_step/sec", simple_value=steps_per_sec)]
                ),
                global_step,
            )
            self._summary_writer.add_summary(
                tf.compat.v1.Summary(
                    value=[tf.compat.v1.Summary.Value(tag="examples/sec", simple_value=examples_per_sec)]
                ),
                global_step,
            )
        tf.compat.v1.logging.info("global_step/sec: %g", steps_per_sec)
        tf.compat.v1.logging.info("examples/sec: %g", examples_per_sec)


class InstallSignalHandlerHook(tf.compat.v1.train.SessionRunHook):
    """Makes CTRL-C quit the process during the run (a pending in-graph loop would otherwise hang it)."""

    def __init__(self):
        self._signal_fn = None

    def begin(self):
        self._signal_fn = signal.getsignal(signal.SIGINT)

    def before_run(self, run_context):
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        except ValueError:  # Not the main thread: nothing to install.
            pass

    def end(self, session):
        try:
            signal.signal(signal.SIGINT, self._signal_fn)
        except (ValueError, TypeError):
            pass


def logging_every_n_runs(log_every_n_steps: int, iterations_per_loop: IterationsPerLoopCounter) -> int:
    """Hooks see one run per loop: log every ceil(log_every_n_steps / iterations_per_loop) runs."""
    if iterations_per_loop.unit != "count":
        return 1
    return max(1, int(math.ceil(log_every_n_steps / float(iterations_per_loop.value))))


@dataclasses.dataclass(frozen=True)
class ProgressSettings:
    """When TRAIN reports progress (loss/step logging, examples/sec).

    Attributes:
      every_n_steps: `RunConfig.log_step_count_steps` (None with a time `iterations_per_loop`).
      every_n_secs: the period of a time `iterations_per_loop` (else None).
      output_dir: where examples/sec summaries are written (None: no summaries).
    """

    every_n_steps: Optional[int]
    every_n_secs: Optional[int]
    output_dir: Optional[str]


def progress_hooks(
    loss: tf.Tensor, global_batch_size: Optional[int], settings: ProgressSettings, every_n_runs: Optional[int]
) -> List[tf.compat.v1.train.SessionRunHook]:
    """Loss/step logging and examples/sec, as upstream's TPUEstimator installs them.

    Args:
      loss: the loss tensor that is logged.
      global_batch_size: examples per step (for examples/sec).
      settings: the reporting cadence and summary directory.
      every_n_runs: log the loss every this many `Session.run`s; None logs every `settings.every_n_secs` instead.

    Returns:
      No hooks when neither `every_n_steps` nor `every_n_secs` is set, else the logging and examples/sec hooks.
    """
    if settings.every_n_steps is None and settings.every_n_secs is None:
        return []
    tensors = {"loss": loss, "step": tf.compat.v1.train.get_global_step()}
    if every_n_runs is not None:
        logging = tf.compat.v1.train.LoggingTensorHook(tensors, every_n_iter=every_n_runs)
    else:
        logging = tf.compat.v1.train.LoggingTensorHook(tensors, every_n_secs=settings.every_n_secs)
    examples = ExamplesPerSecondHook(
        global_batch_size,
        every_n_steps=settings.every_n_steps,
        every_n_secs=settings.every_n_secs,
        output_dir=settings.output_dir,
    )
    return [logging, examples]
