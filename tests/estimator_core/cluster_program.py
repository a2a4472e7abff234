"""One task of a loopback Estimator cluster, run by `test_distributed_training.py` as its own process.

`TF_CONFIG` says which task; `TPU_ESTIMATOR_CORE` which Estimator core (`tpu_estimator.estimator` is the active
one). argv[1] is a JSON dict: `model_dir`, `max_steps`, `save_checkpoints_steps`, `throttle_secs`, `files` (a
directory where each task writes `<task>.steps`, the training steps it ran, and `<task>.done`). A worker trains on
`WORKER_BATCHES` batches and ends; a chief with workers waits after its first step until every worker is done, so
the steps of each task are known exactly.
"""

import json
import os
import sys
import time

import tensorflow as tf

from tests.estimator_core import helpers
from tpu_estimator import estimator as tf_estimator

WORKER_BATCHES = 8
WAIT_SECS = 180


class _CountSteps(tf.compat.v1.train.SessionRunHook):
    """Writes the number of training steps this task ran to `path` when the session ends."""

    def __init__(self, path):
        self._path = path
        self._steps = 0

    def after_run(self, run_context, run_values):
        self._steps += 1

    def end(self, session):
        with open(self._path, "w") as f:
            f.write(str(self._steps))


class _WaitForFiles(tf.compat.v1.train.SessionRunHook):
    """After the first step, waits (bounded) until every path exists."""

    def __init__(self, paths):
        self._paths = paths
        self._waited = False

    def after_run(self, run_context, run_values):
        if self._waited:
            return
        self._waited = True
        deadline = time.time() + WAIT_SECS
        while not all(os.path.exists(p) for p in self._paths):
            if time.time() > deadline:
                raise RuntimeError("Timed out waiting for {}".format(self._paths))
            time.sleep(0.1)


def main(args):
    tf_config = json.loads(os.environ["TF_CONFIG"])
    task = tf_config["task"]["type"]
    workers = len(tf_config["cluster"].get("worker", []))
    files = args["files"]
    config = tf_estimator.RunConfig(
        model_dir=args["model_dir"], save_checkpoints_steps=args["save_checkpoints_steps"], tf_random_seed=1
    )
    estimator = tf_estimator.Estimator(helpers.linear_model_fn(tf_estimator), config=config)
    hooks = [_CountSteps(os.path.join(files, task + ".steps"))]
    train_input = helpers.input_fn()
    if task == "worker":
        train_input = helpers.input_fn(repeat=False)  # WORKER_BATCHES batches of 8 rows
    elif task == "chief" and workers:
        hooks.append(_WaitForFiles([os.path.join(files, "worker.done")]))
    serving_fn = tf_estimator.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 3])})
    exporters = [
        tf_estimator.FinalExporter("final", serving_fn),
        tf_estimator.BestExporter("best", serving_fn, exports_to_keep=2),
    ]
    tf_estimator.train_and_evaluate(
        estimator,
        tf_estimator.TrainSpec(train_input, max_steps=args["max_steps"], hooks=hooks),
        tf_estimator.EvalSpec(
            helpers.input_fn(repeat=False),
            steps=None,
            exporters=exporters,
            start_delay_secs=0,
            throttle_secs=args["throttle_secs"],
        ),
    )
    with open(os.path.join(files, task + ".done"), "w") as f:
        f.write("done")
    print("task {} done".format(task), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
