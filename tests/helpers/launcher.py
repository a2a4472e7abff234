"""Runs a program through the launcher (`python -m tpu_estimator.compat.launcher`) as a user's shell would."""

import os
import subprocess
import sys
from typing import Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_launcher(script, timeout: int = 300, **env_overrides) -> subprocess.CompletedProcess:
    """The launcher's run of `script`, without the test session's `TF_USE_LEGACY_KERAS` and `TF_CPP_MIN_LOG_LEVEL`
    (a variable in `env_overrides` is set as given)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL")}
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-m", "tpu_estimator.compat.launcher", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_together(
    runs: Dict[str, Tuple[List[str], Dict[str, str], str]], timeout_secs: float
) -> Dict[str, Tuple[int, str]]:
    """Starts every run at once and waits for all; name -> (returncode, stdout+stderr text).

    Args:
      runs: name -> (command, environment, work dir); the work dir (made if missing) gets the output as `log.txt`.
      timeout_secs: how long each run may take after the previous ones ended; a run still going is killed.
    """
    processes = {}
    for name, (command, env, work_dir) in runs.items():
        os.makedirs(work_dir, exist_ok=True)
        log = open(os.path.join(work_dir, "log.txt"), "w+")
        processes[name] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work_dir), log)
    done = {}
    for name, (process, log) in processes.items():
        try:
            process.wait(timeout=timeout_secs)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.seek(0)
        done[name] = (process.returncode, log.read())
        log.close()
    return done
