"""One process per host: hosts that differ in what must be equal fail on every host, naming the field, before any step;
a host that fails before the hosts compare makes the others fail within seconds, naming it
(`tpu_estimator/modes/host_agreement.py`).

The program is `tests/cluster/host_disagree_program.py`, run as a job of 2 hosts in which one host (the chief or the
other) differs. Without the agreement, different model_dirs train and evaluate silently wrong, a different batch fails
at `evaluate()` with a raw collective error, and a different program leaves the chief waiting in its session's start.
"""

import io
import json
import os
import sys
import time

import pytest
import tensorflow as tf

from tests.cluster import host_jobs
from tpu_estimator.app import hosts

PROGRAM = os.path.join(os.path.dirname(__file__), "host_disagree_program.py")
# The job ends within this (every host fails well before; without the agreement the chief would wait longer).
GRACE_SECS = 60


def _run_job(base_dir, case: str, odd_host: int):
    """Runs the 2-host job; returns every host's exit status, result and the job's seconds."""
    out = io.StringIO()
    start = time.monotonic()
    codes = hosts.run_hosts(
        [sys.executable, PROGRAM, str(base_dir), case, str(odd_host)],
        2,
        grace_secs=GRACE_SECS,
        env=host_jobs.program_env(),
        out=out,
    )
    secs = time.monotonic() - start
    results = []
    for host in range(2):
        path = os.path.join(str(base_dir), "disagree_host{}.json".format(host))
        assert os.path.exists(path), "host {} wrote no result: {}".format(host, out.getvalue()[-4000:])
        with open(path) as f:
            results.append(json.load(f))
    return codes, results, secs


@pytest.mark.parametrize(
    "case,odd_host,field",
    [
        ("model_dir", 1, "model_dir differs: "),
        ("batch", 0, "train_batch_size differs: host /job:worker/task:0 has '48', host /job:worker/task:1 has '24'"),
        ("program", 1, "variables differ: host /job:worker/task:1 has 'dense/bias [9] float32 trainable', "),
    ],
)
def test_hosts_that_differ_fail_on_every_host_naming_the_field_before_any_step(tmp_path, case, odd_host, field):
    codes, results, secs = _run_job(tmp_path, case, odd_host)
    assert codes == [3, 3], results
    for result in results:
        assert result["error"] == "HostsDisagreeError", result
        message = result["message"]
        assert message.startswith(
            "train() on the cluster refused before its first step: the hosts of this job (one process per host) do "
            "not agree. "
        ), message
        assert field in message, message
        assert result["secs"] < 60, result
    assert results[0]["message"] == results[1]["message"]  # every host names every host's value
    if case == "model_dir":
        assert (
            "model_dir differs: host /job:worker/task:0 has {!r}, host /job:worker/task:1 has {!r}. What to do: give "
            "every host the same model_dir".format(str(tmp_path / "job"), str(tmp_path / "other"))
        ) in results[0]["message"]
    if case == "program":
        assert "where host /job:worker/task:0 has 'dense/bias [8] float32 trainable'" in results[0]["message"]
    # Refused before any step: no checkpoint anywhere.
    for model_dir in ("job", "other"):
        assert tf.train.latest_checkpoint(str(tmp_path / model_dir)) is None
    assert secs < GRACE_SECS, secs


@pytest.mark.parametrize("failing", [0, 1], ids=["chief_fails", "host1_fails"])
def test_a_host_failing_before_the_hosts_compare_fails_the_others_within_seconds_naming_it(tmp_path, failing):
    # Without the agreement's watch, the chief waits in its session's start for a host that is gone, and a host
    # waits for a chief that is gone until the job's grace period ends.
    codes, results, secs = _run_job(tmp_path, "fails", failing)
    assert codes == [3, 3], results
    assert results[failing] == {
        "error": "ValueError",
        "message": "host {}'s model_fn fails".format(failing),
        "secs": results[failing]["secs"],
    }
    other = results[1 - failing]
    assert other["error"] == "ClusterError", other
    assert other["message"].startswith(
        "train() on the cluster failed: host /job:worker/task:{} (127.0.0.1:".format(failing)
    ), other
    assert "stopped answering before the hosts compared their settings" in other["message"], other
    assert other["secs"] < 30, other
    assert secs < GRACE_SECS, secs
