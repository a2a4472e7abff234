"""Ctrl-C on `tpu-estimator train` (issue 47 item 3): a real SIGINT to the command's process gives one line naming
the last checkpointed step and the exact command that resumes; the exit status stays 130."""

import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
from absl import flags

from tpu_estimator.app import cli, interrupt

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(REPO, "configs", "dlrm_tiny.yaml")


def checkpoint_steps(model_dir):
    names = os.listdir(model_dir) if os.path.isdir(model_dir) else []
    return sorted(int(m.group(1)) for m in (re.match(r"model\.ckpt-(\d+)\.index$", n) for n in names) if m)


@pytest.mark.quick
def test_sigint_names_the_last_checkpointed_step_and_the_command_that_resumes(tmp_path):
    model_dir = str(tmp_path / "model")
    args = [
        "train",
        f"--config={TINY}",
        f"--model_dir={model_dir}",
        "--set=train.steps=1000000",
        "--set=train.save_checkpoints_steps=10",
    ]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(
        [sys.executable, "-c", "from tpu_estimator.app.cli import main; main()"] + args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        deadline = time.time() + 240
        while not [s for s in checkpoint_steps(model_dir) if s >= 10] and time.time() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.2)
        assert [s for s in checkpoint_steps(model_dir) if s >= 10], "no checkpoint after step 0 within 240 s"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, (out, err)
    last_step = checkpoint_steps(model_dir)[-1]
    assert last_step >= 10
    resume = "tpu-estimator " + " ".join(shlex.quote(a) for a in args)
    lines = err.strip().splitlines()
    assert lines[-1] == (
        f"tpu-estimator train: error: interrupted; the last checkpoint in {model_dir} is at global step {last_step}; "
        f"resume from it with: {resume}"
    ), err
    assert "Traceback" not in err


def test_the_resume_command_is_the_flags_given_shell_quoted():
    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    flag_values(["tpu-estimator", "--config", "my config.yaml", "--set=a.b=1", "--set=c=[1, 2]", "--traceback"])
    assert interrupt.command_line("train", flag_values, list(cli.OUR_FLAGS)) == (
        "tpu-estimator train '--config=my config.yaml' --set=a.b=1 '--set=c=[1, 2]' --traceback"
    )


def test_interrupted_messages():
    assert interrupt.interrupted_message("train", "/m", None, "tpu-estimator train --model_dir=/m") == (
        "interrupted before the first checkpoint in /m: nothing was kept; start again with: "
        "tpu-estimator train --model_dir=/m"
    )
    assert interrupt.interrupted_message("evaluate", "/m", 5, "tpu-estimator evaluate --model_dir=/m") == (
        "interrupted; run it again with: tpu-estimator evaluate --model_dir=/m"
    )
