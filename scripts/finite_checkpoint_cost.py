"""Cost of the finite-checkpoint check (tpu_estimator/checkpoints/finite_checkpoints.py) next to the save it guards, for
workload A's and D's variables (tables, Adagrad accumulators, MLP). Run: PYTHONPATH=. python scripts/finite_checkpoint_cost.py
"""

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf

from tpu_estimator.checkpoints.finite_checkpoints import FiniteCheckpointListener


def measure(name, shapes, runs=5):
    g = tf.Graph()
    with g.as_default():
        for i, shape in enumerate(shapes):
            tf.compat.v1.get_variable(f"v{i}", shape, initializer=tf.compat.v1.random_uniform_initializer())
        tf.compat.v1.train.get_or_create_global_step()
        listener = FiniteCheckpointListener()
        listener.begin()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            d = tempfile.mkdtemp()
            check, save = [], []
            for _ in range(runs):
                t = time.perf_counter()
                listener.before_save(s, 0)
                check.append(time.perf_counter() - t)
                t = time.perf_counter()
                saver.save(s, os.path.join(d, "m"), global_step=0)
                save.append(time.perf_counter() - t)
    mb = sum(np.prod(x) for x in shapes) * 4 / 1e6
    print(
        f"| {name} | {mb:,.2f} MB | {np.median(check) * 1e3:.1f} ms | {np.median(save) * 1e3:.1f} ms | {np.median(check) / np.median(save):.0%} |"
    )


print("| workload | saved floats | check (median of 5) | save (median of 5) | check / save |")
print("|---|---:|---:|---:|---:|")
# A: 26 tables x 100k x 16 with Adagrad accumulators; MLP 416-512-256-1 with accumulators.
dense_a = [(416, 512), (512,), (512, 256), (256,), (256, 1), (1,)]
measure("A", [(100000, 16)] * 52 + dense_a * 2)
# D: 2 tables x 1000 x 4 with accumulators; MLP 8-1 with accumulators.
measure("D", [(1000, 4)] * 4 + [(8, 1), (1,)] * 2)
