"""With one process per host, TRAIN, EVAL and PREDICT read down the stack on every host, in every thread: no product
module calls back into a module it was called from (tests/estimator/test_train_step_reads_down.py on one host). A job
of 2 hosts on loopback, 2 shards each, tables sharded over both (`host_embedding_program.py`), each host's calls
traced (`traced_host_program.py`)."""

import json
import os

import pytest

from tests.cluster import host_jobs

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traced_host_program.py")
STEPS = 4
# What each call must visit on each host: the stages with one process per host (the check is not vacuous).
STAGES = {
    "train": (
        "modes/train_loop.py",
        "embedding_stage/embedding_infeed.py",
        "embedding_stage/embedding_exchange.py",
        "embedding_stage/embedding_update.py",
        "hosts/collectives.py",
        "replicas/stamping.py",
    ),
    "evaluate": (
        "modes/eval_loop.py",
        "embedding_stage/embedding_infeed.py",
        "embedding_stage/embedding_bridge.py",
        "hosts/collectives.py",
    ),
    "predict": ("modes/predict_step.py", "embedding_stage/embedding_infeed.py", "embedding_stage/embedding_bridge.py"),
}


@pytest.mark.timeout(600)
def test_every_host_reads_down_the_stack_in_every_thread(tmp_path):
    host_jobs.run_program(PROGRAM, [tmp_path, 4, STEPS, "div"], 2)
    assert host_jobs.checkpoint_values(tmp_path)["global_step"] == STEPS
    for host in range(2):
        with open(os.path.join(str(tmp_path), "trace_host{}.json".format(host))) as f:
            result = json.load(f)
        for call, stages in STAGES.items():
            trace = result[call]
            assert trace["callbacks"] == [], (host, call)
            for stage in stages:
                assert "tpu_estimator/" + stage in trace["visited"], (host, call, stage)
            assert "tensor_infeed" in trace["threads"], (host, call)  # the embedding infeed's thread was traced
        assert result["metrics"]["global_step"] == STEPS
        assert result["num_predictions"] == 12  # this host's half of the 24 rows
