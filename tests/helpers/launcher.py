"""Runs a program through the launcher (`python -m tpu_estimator.compat.launcher`) as a user's shell would."""

import os
import subprocess
import sys

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
