"""`train_and_evaluate` of the embedding program (`host_embedding_program.py`), run on 1 host and on N.

    python tests/cluster/host_train_and_evaluate_program.py MODEL_DIR NUM_SHARDS STEPS THROTTLE_SECS

A checkpoint every 4 steps, loops of 2 steps. The evaluation (2 steps of the training data) runs after the checkpoints
the throttle lets through and after the last; after each, a recording exporter notes what it was given and a
`LatestExporter` exports. Writes MODEL_DIR/result_host<i>.json: every evaluation (global step, metrics, whether
final), what `train_and_evaluate` returned, and the exports.
"""

import json
import os
import sys

import host_embedding_program as program
import tensorflow as tf

from tpu_estimator import estimator as tf_estimator


class RecordingExporter(tf_estimator.Exporter):
    """Notes each evaluation's step, metrics and finality (exporters run after every evaluation)."""

    def __init__(self):
        self.seen = []

    @property
    def name(self):
        return "recording"

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        self.seen.append(
            {
                "step": int(eval_result["global_step"]),
                "checkpoint": os.path.basename(checkpoint_path),
                "mse": float(eval_result["mse"]),
                "final": bool(is_the_final_export),
            }
        )
        return None


def serving_input_receiver_fn():
    features = {
        "w": tf.compat.v1.sparse_placeholder(tf.int64, [None, 3], name="w"),
        "w_weight": tf.compat.v1.sparse_placeholder(tf.float32, [None, 3], name="w_weight"),
        "q": tf.compat.v1.sparse_placeholder(tf.int64, [None, 4], name="q"),
        "s": tf.compat.v1.placeholder(tf.int64, [None, 3], name="s"),
        "id": tf.compat.v1.placeholder(tf.int64, [None], name="id"),
    }
    return tf_estimator.export.ServingInputReceiver(features, features)


def main(argv):
    model_dir, num_shards, steps, throttle_secs = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    estimator = program.make_estimator(model_dir, num_shards, "div", save_checkpoints_steps=4)
    recording = RecordingExporter()
    exporters = [recording, tf_estimator.LatestExporter("latest", serving_input_receiver_fn, exports_to_keep=2)]
    metrics, exports = tf_estimator.train_and_evaluate(
        estimator,
        tf_estimator.TrainSpec(program.make_train_input_fn(program.latest_step(model_dir)), max_steps=steps),
        tf_estimator.EvalSpec(
            program.make_train_input_fn(0), steps=2, exporters=exporters, throttle_secs=throttle_secs
        ),
    )
    result = {
        "evaluations": recording.seen,
        "metrics": {k: float(v) for k, v in metrics.items()},
        "exports": [tf.compat.as_str(e) if e is not None else None for e in exports],
    }
    with open(os.path.join(model_dir, "result_host{}.json".format(estimator.config.task_id or 0)), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv)
