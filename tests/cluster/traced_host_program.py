"""`host_embedding_program.py`'s train(), evaluate() and predict(), each traced by `call_tracer.trace_calls` (every
thread): with one process per host, what each host's calls visited and their callbacks.

    python tests/cluster/traced_host_program.py MODEL_DIR NUM_SHARDS STEPS PARTITION_STRATEGY

Writes MODEL_DIR/trace_host<i>.json: per call, the callbacks, the product modules visited and the threads that ran
product code; and what the calls returned (the metrics, the number of predictions).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tensorflow as tf  # noqa: E402

from tests.cluster import host_embedding_program as program  # noqa: E402
from tests.estimator.call_tracer import trace_calls  # noqa: E402


def main(argv):
    model_dir, num_shards, steps, strategy = argv[1], int(argv[2]), int(argv[3]), argv[4]
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    estimator = program.make_estimator(model_dir, num_shards, strategy)
    returned = {}
    calls = {
        "train": lambda: estimator.train(program.make_train_input_fn(0), max_steps=steps),
        "evaluate": lambda: returned.update(metrics=estimator.evaluate(program.make_train_input_fn(0), steps=2)),
        "predict": lambda: returned.update(predictions=list(estimator.predict(program.predict_input_fn))),
    }
    result = {}
    for name, call in calls.items():
        trace = trace_calls(call)
        result[name] = {key: sorted(getattr(trace, key)) for key in ("callbacks", "visited", "threads")}
    result["metrics"] = {k: float(v) for k, v in returned["metrics"].items()}
    result["num_predictions"] = len(returned["predictions"])
    with open(os.path.join(model_dir, "trace_host{}.json".format(estimator.config.task_id or 0)), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv)
