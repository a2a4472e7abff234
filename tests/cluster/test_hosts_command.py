"""`tpu-estimator-hosts` ends with one line per host saying what it did (the global step its train() reached, its
exit status) and a summary line (issue 47 item 2)."""

import os
import subprocess
import sys

from tpu_estimator.app import hosts

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_hosts_command(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    code = "import sys; from tpu_estimator.app.hosts import run; sys.exit(run())"
    return subprocess.run(
        [sys.executable, "-c", code] + list(args), capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout
    )


def test_outcome_and_summary_lines():
    outcomes = [hosts.HostOutcome(0, 0, 6), hosts.HostOutcome(1, -9, None)]
    assert hosts.outcome_line(outcomes[0]) == "tpu-estimator-hosts: host 0: trained to global step 6, exit status 0"
    assert hosts.outcome_line(outcomes[1]) == (
        "tpu-estimator-hosts: host 1: reported no training step, stopped by SIGKILL (exit status -9)"
    )
    assert hosts.summary_line(outcomes) == "tpu-estimator-hosts: host(s) 1 failed (exit status -9) of 2"
    assert hosts.summary_line(outcomes[:1]) == "tpu-estimator-hosts: all 1 hosts succeeded (global step 6)"


def test_a_failed_host_is_named_in_its_line_and_the_summary():
    program = "import json, os, sys; sys.exit(3 * json.loads(os.environ['TF_CONFIG'])['task']['index'])"
    result = run_hosts_command("--num_hosts=2", "--grace_secs=30", "--", sys.executable, "-c", program, timeout=120)
    assert result.returncode == 3, result.stderr
    assert result.stdout.splitlines()[-3:] == [
        "tpu-estimator-hosts: host 0: reported no training step, exit status 0",
        "tpu-estimator-hosts: host 1: reported no training step, exit status 3",
        "tpu-estimator-hosts: host(s) 1 failed (exit status 3) of 2",
    ]


def test_the_readmes_two_host_run_ends_with_each_hosts_step_and_a_summary(tmp_path):
    model_dir = str(tmp_path / "two_hosts")
    result = run_hosts_command(
        "--num_hosts=2", "--", sys.executable, "tests/cluster/host_program.py", model_dir, "4", "6"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.splitlines()[-3:] == [
        "tpu-estimator-hosts: host 0: trained to global step 6, exit status 0",
        "tpu-estimator-hosts: host 1: trained to global step 6, exit status 0",
        "tpu-estimator-hosts: all 2 hosts succeeded (global step 6)",
    ]
