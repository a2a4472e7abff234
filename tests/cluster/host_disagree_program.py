"""Hosts of one job that disagree on what must be equal, or a host that fails before they agree.

    python tests/cluster/host_disagree_program.py BASE_DIR CASE ODD_HOST

Run as a 2-host job (`tpu-estimator-hosts`): every host runs `host_program`'s model, except that host ODD_HOST
differs by CASE:

* `model_dir`: it trains into BASE_DIR/other instead of BASE_DIR/job;
* `batch`: its global training batch is 48 instead of 24;
* `program`: its hidden layer has 9 units instead of 8;
* `fails`: its `model_fn` raises before the hosts agree (a bug in that host's program).

Each host calls `train()` once and writes BASE_DIR/disagree_host<i>.json: the error's type and text and the seconds
from the call to the error; then it exits with status 3 (0 if `train()` returned).
"""

import json
import os
import sys

import host_program  # this file's directory is on sys.path: it runs as a script
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator.hosts import cluster


def main(argv):
    base_dir, case, odd_host = argv[1], argv[2], int(argv[3])
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    host = cluster.tf_config_task()[1]
    odd = host == odd_host
    model_dir = os.path.join(base_dir, "other" if odd and case == "model_dir" else "job")
    config = te.RunConfig(model_dir=model_dir, tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=2))

    def model_fn(features, labels, mode, params):
        if odd and case == "fails":
            raise ValueError("host {}'s model_fn fails".format(host))
        return host_program.model_fn(features, labels, mode, params)

    batch = 48 if odd and case == "batch" else host_program.GLOBAL_BATCH
    estimator = te.TPUEstimator(
        model_fn=model_fn,
        config=config,
        params={"sleep": 0.0, "model_dir": model_dir, "hidden": 9 if odd and case == "program" else 8},
        train_batch_size=batch,
        eval_batch_size=batch,
    )
    result = host_program.call_result(lambda: estimator.train(host_program.make_input_fn(0), max_steps=4))
    with open(os.path.join(base_dir, "disagree_host{}.json".format(host)), "w") as f:
        json.dump(result, f)
    print(json.dumps(result), flush=True)
    sys.exit(0 if result["error"] is None else 3)


if __name__ == "__main__":
    main(sys.argv)
