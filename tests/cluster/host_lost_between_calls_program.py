"""A host is lost between `train()` and `evaluate()`: the other host's `evaluate()` must fail, not wait for it.

    python tests/cluster/host_lost_between_calls_program.py MODEL_DIR NUM_SHARDS STEPS LOST_HOST

Run as a 2-host job (`tpu-estimator-hosts`). Both hosts train `host_program`'s model; host LOST_HOST then exits (its
server goes with it); the other host calls `evaluate()` and writes MODEL_DIR/lost_host_result.json: the error's type
and text and how long `evaluate()` took to raise it.
"""

import json
import os
import sys
import time

import host_program  # this file's directory is on sys.path: it runs as a script
import tensorflow as tf

import tpu_estimator as te


def main(argv):
    model_dir, num_shards, steps, lost_host = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    config = te.RunConfig(model_dir=model_dir, tpu_config=te.TPUConfig(iterations_per_loop=2, num_shards=num_shards))
    estimator = te.TPUEstimator(
        model_fn=host_program.model_fn,
        config=config,
        params={"sleep": 0.0, "model_dir": model_dir},
        train_batch_size=host_program.GLOBAL_BATCH,
        eval_batch_size=host_program.GLOBAL_BATCH,
    )
    estimator.train(host_program.make_input_fn(0), max_steps=steps)
    if (config.task_id or 0) == lost_host:
        os._exit(0)  # lost: no clean shutdown of this host's server
    time.sleep(2.0)  # the lost host is gone
    result = host_program.call_result(lambda: estimator.evaluate(host_program.make_input_fn(0), steps=2))
    with open(os.path.join(model_dir, "lost_host_result.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv)
