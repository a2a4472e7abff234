"""Progress lines for long runs: a `SessionRunHook` printing step, loss, examples/sec and ETA."""

import sys
import time
from typing import Callable, List, Optional, Tuple

import tensorflow as tf


def format_duration(seconds: float) -> str:
    """`1h02m03s`, `4m05s` or `12s`."""
    seconds = int(round(max(seconds, 0.0)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Prints a progress line every `every_secs` seconds (or `every_steps` steps), and nothing else.

    `step 1200/2000  loss 0.4521  23,410 examples/s  ETA 34s`. Hooks see one `Session.run` per training loop
    (`iterations_per_loop` steps), so lines come at loop boundaries. The loss is the estimator's training loss
    (the last tensor of the `LOSSES` collection, where `Estimator.train` puts it).

    The ETA is the remaining steps at the pace of the loops after the first: the first loop also builds and warms
    up what the later ones reuse (5x too slow a pace in the first hour's run: an ETA of 14m58s for a ~3 minute run).
    Until a second loop has run, lines say `ETA after the first loop`.

    Args:
      batch_size: global batch size (examples per step).
      last_step: the global step training stops at (for the percentage and ETA), or None.
      every_secs: print at most this often (seconds); None = only by steps.
      every_steps: print when this many steps passed since the last line; None = only by time.
      printer: where lines go (default: print to stdout, flushed).
      phases: also print a line when the session is being created and when the first loop starts (the seconds
        before the first progress line).
    """

    def __init__(
        self,
        batch_size: int,
        last_step: Optional[int] = None,
        every_secs: Optional[float] = 10.0,
        every_steps: Optional[int] = None,
        printer: Optional[Callable[[str], None]] = None,
        phases: bool = True,
    ):
        self._batch_size = batch_size
        self._last_step = last_step
        self._every_secs = every_secs
        self._every_steps = every_steps
        self._printer = printer or (lambda line: print(line, file=sys.stdout, flush=True))
        self._phases = phases
        self.points: List[Tuple[float, int]] = []  # (time, global step) after session creation and after each run
        self.last_loss: Optional[float] = None

    def begin(self):
        if self._phases:
            self._printer("creating the session (initializing variables and embedding tables) ...")
        self._global_step = tf.compat.v1.train.get_global_step()
        losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
        self._loss = losses[-1] if losses else None

    def after_create_session(self, session, coord):
        step = int(session.run(self._global_step))
        self.points = [(time.time(), step)]
        self._printed = self.points[0]
        if self._phases:
            self._printer(f"training from step {step}: the first loop includes the warm-up ...")

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._loss) if self._loss is not None else None

    def after_run(self, run_context, run_values):
        if self._loss is not None:
            self.last_loss = float(run_values.results)
        now, step = time.time(), int(run_context.session.run(self._global_step))
        self.points.append((now, step))
        last_time, last_step = self._printed
        due = (
            (self._every_secs is not None and now - last_time >= self._every_secs)
            or (self._every_steps is not None and step - last_step >= self._every_steps)
            or (self._last_step is not None and step >= self._last_step)  # the last step is always shown
        )
        if due and step > last_step:
            self._printed = (now, step)
            examples_per_sec = (step - last_step) * self._batch_size / max(now - last_time, 1e-9)
            self._printer(self._line(step, examples_per_sec, self._eta_secs(step)))

    def _eta_secs(self, step: int) -> Optional[float]:
        """Seconds left at the pace of the runs after the first (the warm-up); None before a second run."""
        if len(self.points) < 3:
            return None
        (start_time, start_step), (end_time, end_step) = self.points[1], self.points[-1]
        if end_step <= start_step or end_time <= start_time:
            return None
        return max(self._last_step - step, 0) * (end_time - start_time) / (end_step - start_step)

    def _line(self, step: int, examples_per_sec: float, eta_secs: Optional[float]) -> str:
        parts = [f"step {step}/{self._last_step}" if self._last_step else f"step {step}"]
        if self.last_loss is not None:
            parts.append(f"loss {self.last_loss:.4f}")
        parts.append(f"{examples_per_sec:,.0f} examples/s")
        if self._last_step and step < self._last_step:
            parts.append("ETA after the first loop" if eta_secs is None else "ETA " + format_duration(eta_secs))
        return "  ".join(parts)

    @property
    def steps_run(self) -> int:
        """Steps trained by this run."""
        return self.points[-1][1] - self.points[0][1] if self.points else 0

    def examples_per_sec(self, skip_first_run: bool = True) -> Optional[float]:
        """Training throughput; with `skip_first_run` (and more than one run) the warm-up loop is left out."""
        points = self.points[1:] if skip_first_run and len(self.points) > 2 else self.points
        if len(points) < 2 or points[-1][0] <= points[0][0]:
            return None
        return (points[-1][1] - points[0][1]) * self._batch_size / (points[-1][0] - points[0][0])
