"""What `tpu-estimator` says when Ctrl-C (SIGINT) stops a command: one line naming the last checkpointed step and
the command that resumes (exit status 130, as a shell's).

Python raises `KeyboardInterrupt` in the main thread only between bytecodes, so not while a training loop runs in
`Session.run`; TPUEstimator's `InstallSignalHandlerHook` therefore restores SIGINT's default action during each run
(Ctrl-C ends the process at once, as upstream's), which left no word. `watch` keeps that promptness and adds the
line: the command's threads block SIGINT and one thread waits for it (`sigwait`), says the line and ends the process
with status 130 at once, whatever the main thread is doing.
"""

import os
import shlex
import signal
import sys
import threading
from typing import Callable, List, Optional

from absl import flags

PROG = "tpu-estimator"
EXIT_STATUS = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended
# Subcommands whose rerun resumes from the model directory's latest checkpoint.
RESUMABLE = ("train", "train_and_evaluate")


def command_line(subcommand: str, flag_values: flags.FlagValues, names: List[str]) -> str:
    """The command line of this run, from the flags given on it (`names`, in that order), shell-quoted."""
    words = [PROG, subcommand]
    for name in names:
        if name not in flag_values or not flag_values[name].present:
            continue
        flag = flag_values[name]
        if flag.boolean:
            words.append(f"--{name}" if flag.value else f"--no{name}")
            continue
        values = flag.value if isinstance(flag.value, list) else [flag.value]
        if name == "input":  # a list flag: one comma-separated value
            values = [",".join(flag.value)]
        words.extend(f"--{name}={value}" for value in values)
    return " ".join(shlex.quote(w) for w in words)


def interrupted_message(
    subcommand: str, model_dir: Optional[str], checkpoint_step: Optional[int], resume_command: str
) -> str:
    """The line printed when Ctrl-C stops `subcommand`.

    Args:
      subcommand: the subcommand stopped.
      model_dir: its model directory (None when it has none).
      checkpoint_step: the global step of the model directory's latest checkpoint (None: none there).
      resume_command: the command that runs it again (for `train`: resumes from that checkpoint).
    """
    if subcommand not in RESUMABLE or not model_dir:
        return f"interrupted; run it again with: {resume_command}"
    if checkpoint_step is None:
        return f"interrupted before the first checkpoint in {model_dir}: nothing was kept; start again with: " + (
            resume_command
        )
    return (
        f"interrupted; the last checkpoint in {model_dir} is at global step {checkpoint_step}; resume from it with: "
        f"{resume_command}"
    )


def watch(message: Callable[[], str]) -> None:
    """From now on, SIGINT (Ctrl-C) prints `message()` on stderr and ends the process with status 130 at once.

    Call it in the main thread before any other thread starts (threads inherit the blocked SIGINT). For command
    line entry points only: the process ends without unwinding (as with SIGINT's default action).
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def wait() -> None:
        signal.sigwait({signal.SIGINT})
        try:
            sys.stdout.flush()
            line = message()
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        finally:
            os._exit(EXIT_STATUS)

    threading.Thread(target=wait, name="tpu-estimator-ctrl-c", daemon=True).start()
