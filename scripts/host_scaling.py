"""Per-process cost of one process per host as the hosts grow: graph nodes, build seconds, memory, bytes per step.

    python scripts/host_scaling.py --hosts=1,2,3,4 --steps=40

For each host count H, runs a TPUEstimator program (an MLP of `--layers` x `--width` with Adam, with `--tables`
embedding tables sharded over every host, 1 shard per host, a fixed per-host batch) as an H-host job on loopback (`tpu_estimator.app.hosts`), and reports per process:
the training graph's nodes, the CPU seconds its main thread spent from `train()` to a built graph (on a shared 2-core
machine, wall seconds grow with the processes sharing the cores; the building thread's CPU seconds are its own cost), the wall
seconds from `train()` to the end of the first loop, the peak resident memory, and
the loopback bytes per step and host (the machine's `lo` counters over the steps after the first loop, divided by
the hosts: every byte between the hosts crosses `lo`). Prints a markdown table and, with `--json`, the figures.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("hosts", ["1", "2", "3", "4"], "Host counts to run.")
flags.DEFINE_integer("steps", 40, "Training steps of each job (one loop of 10 first, then the rest).")
flags.DEFINE_integer("layers", 4, "Hidden layers of the MLP.")
flags.DEFINE_integer("width", 256, "Width of each hidden layer.")
flags.DEFINE_integer("host_batch", 64, "Rows per host and step (the global batch grows with the hosts).")
flags.DEFINE_integer("tables", 0, "Embedding tables (Adagrad, sharded over every host), one feature of 4 ids each.")
flags.DEFINE_integer("vocabulary", 100000, "Rows of each embedding table.")
flags.DEFINE_integer("dimension", 16, "Width of each embedding table.")
flags.DEFINE_string("json", None, "Also write the figures to this file.")
flags.DEFINE_string("as_host", None, "Internal: run one host of a job and write its figures to this directory.")

_FEATURES = 32


def _lo_bytes() -> int:
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith("lo:"):
                fields = line.split(":", 1)[1].split()
                return int(fields[0]) + int(fields[8])
    return 0


def _run_host(out_dir: str) -> None:
    import numpy as np
    import tensorflow as tf

    import tpu_estimator as te

    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    figures = {}

    class Timing(tf.compat.v1.train.SessionRunHook):
        def begin(self):
            figures["graph_nodes"] = len(tf.compat.v1.get_default_graph().get_operations())
            figures["build_cpu_secs"] = time.thread_time() - start_cpu

        def after_run(self, run_context, run_values):
            figures.setdefault("first_loop_secs", time.time() - start)
            figures.setdefault("lo_bytes_after_first_loop", _lo_bytes())
            figures["lo_bytes_last"] = _lo_bytes()
            figures["runs"] = figures.get("runs", 0) + 1

    def model_fn(features, labels, mode, params):
        net = tf.concat([features["x"]] + [features["t{}".format(t)] for t in range(FLAGS.tables)], axis=1)
        for _ in range(FLAGS.layers):
            net = tf.compat.v1.layers.dense(net, FLAGS.width, activation=tf.nn.relu)
        loss = tf.reduce_mean(tf.square(tf.compat.v1.layers.dense(net, 1) - labels))
        optimizer = te.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(1e-3))
        train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
        return te.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[Timing()])

    def input_fn(params):
        rng = np.random.RandomState(params["context"].current_host)
        x = rng.randn(1024, _FEATURES).astype(np.float32)
        features = {"x": x}
        for t in range(FLAGS.tables):
            features["t{}".format(t)] = rng.zipf(1.2, size=(1024, 4)).astype(np.int64) % FLAGS.vocabulary
        dataset = tf.data.Dataset.from_tensor_slices((features, x[:, :1])).repeat()
        return dataset.batch(params["batch_size"], drop_remainder=True)

    num_hosts = len(json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {}).get("worker", [None]))
    config = te.RunConfig(
        model_dir=os.path.join(out_dir, "model"),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        save_summary_steps=0,
        tpu_config=te.TPUConfig(iterations_per_loop=10, num_shards=num_hosts),
    )
    spec = None
    if FLAGS.tables:
        from tpu_estimator import experimental as tex

        spec = tex.EmbeddingConfigSpec(
            table_to_config_dict={
                "table{}".format(t): tex.TableConfig(FLAGS.vocabulary, FLAGS.dimension) for t in range(FLAGS.tables)
            },
            feature_to_config_dict={
                "t{}".format(t): tex.FeatureConfig("table{}".format(t)) for t in range(FLAGS.tables)
            },
            optimization_parameters=tex.AdagradParameters(0.1),
        )
    estimator = te.TPUEstimator(
        model_fn=model_fn,
        config=config,
        train_batch_size=FLAGS.host_batch * num_hosts,
        embedding_config_spec=spec,
    )
    start, start_cpu = time.time(), time.thread_time()
    estimator.train(input_fn, max_steps=FLAGS.steps)
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    figures["steps_after_first_loop"] = FLAGS.steps - 10
    with open(os.path.join(out_dir, "host{}.json".format(config.task_id or 0)), "w") as f:
        json.dump(figures, f)


def _job(num_hosts: int) -> dict:
    from tpu_estimator.app import hosts

    out_dir = tempfile.mkdtemp(prefix="host_scaling_")
    command = [sys.executable, os.path.abspath(__file__), "--as_host=" + out_dir]
    command += ["--steps={}".format(FLAGS.steps), "--layers={}".format(FLAGS.layers)]
    command += ["--width={}".format(FLAGS.width), "--host_batch={}".format(FLAGS.host_batch)]
    command += ["--tables={}".format(FLAGS.tables), "--vocabulary={}".format(FLAGS.vocabulary)]
    command += ["--dimension={}".format(FLAGS.dimension)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1", CUDA_VISIBLE_DEVICES="")
    if num_hosts == 1:
        env.pop("TF_CONFIG", None)
        subprocess.run(command, env=env, check=True)
    else:
        codes = hosts.run_hosts(command, num_hosts, env=env, out=open(os.devnull, "w"))
        if any(codes):
            raise RuntimeError("the {}-host job failed: exit statuses {}".format(num_hosts, codes))
    per_host = [json.load(open(os.path.join(out_dir, "host{}.json".format(h)))) for h in range(num_hosts)]
    window = max(h["lo_bytes_last"] for h in per_host) - min(h["lo_bytes_after_first_loop"] for h in per_host)
    steps = per_host[0]["steps_after_first_loop"]
    return {
        "hosts": num_hosts,
        "graph_nodes": max(h["graph_nodes"] for h in per_host),
        "first_loop_secs": max(h["first_loop_secs"] for h in per_host),
        "build_cpu_secs": max(h["build_cpu_secs"] for h in per_host),
        "peak_rss_mb": max(h["peak_rss_mb"] for h in per_host),
        "bytes_per_step_per_host": window / steps / num_hosts if num_hosts > 1 else 0.0,
    }


def main(argv) -> None:
    del argv
    if FLAGS.as_host:
        _run_host(FLAGS.as_host)
        return
    rows = [_job(int(h)) for h in FLAGS.hosts]
    print(
        "| hosts | graph nodes per process | build CPU seconds per process | wall seconds to the first loop | "
        "peak memory per process, MB | bytes sent + received per step per host |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            "| {hosts} | {graph_nodes} | {build_cpu_secs:.2f} | {first_loop_secs:.1f} | {peak_rss_mb:.0f} | "
            "{bytes_per_step_per_host:,.0f} |".format(**row)
        )
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    app.run(main)
