"""Per-row cost of TensorFlow's sparse update kernels, and fused kernel vs gather -> rule -> scatter per optimizer.

The measurements behind `embedding.optimizers.prefer_fused_sparse_apply` (`docs/benchmarks/HISTORY.md`,
"TensorFlow 2.15 and 2.21"). Each figure is the fastest of 3 `Session.run`s of a `while_loop` of `--steps` updates.
Run it with each interpreter to compare versions:

    PYTHONPATH=. .venv-tf215/bin/python scripts/sparse_apply_kernels.py
    PYTHONPATH=. TF_USE_LEGACY_KERAS=1 .venv/bin/python scripts/sparse_apply_kernels.py
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from absl import app, flags

from embedding import optimizers

flags.DEFINE_integer("steps", 100, "Updates per Session.run.")
flags.DEFINE_integer("rows", 100_000, "Rows of the table.")
FLAGS = flags.FLAGS


def _time_loop(build_update, rows: int, dim: int, num_ids: int, slot_values) -> float:
    """Microseconds per update: `build_update(var, slots, ids, grads)` in a loop of `--steps` iterations."""
    graph = tf.Graph()
    with graph.as_default():
        var = tf.Variable(tf.zeros([rows, dim]))
        slots = [tf.Variable(tf.fill([rows, dim], value)) for value in slot_values]
        chosen = np.sort(np.random.RandomState(0).choice(rows, num_ids, replace=False))

        def body(i):
            grads = tf.ones([num_ids, dim]) * tf.cast(i, tf.float32) * 1e-3
            with tf.control_dependencies([build_update(var, slots, chosen, grads)]):
                return i + 1

        loop = tf.compat.v1.while_loop(lambda i: i < FLAGS.steps, body, [tf.constant(0)])
    with tf.compat.v1.Session(graph=graph) as session:
        session.run([v.initializer for v in [var] + slots])
        session.run(loop)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            session.run(loop)
            times.append((time.perf_counter() - start) / FLAGS.steps * 1e6)
    return min(times)


def kernel_table(dim: int = 16, num_ids: int = 1000) -> None:
    """One row per kernel: microseconds per update of `num_ids` sorted unique rows."""
    kernels = {
        "ResourceSparseApplyAdagrad": lambda v, s, ids, g: tf.raw_ops.ResourceSparseApplyAdagrad(
            var=v.handle, accum=s[0].handle, lr=0.01, grad=g, indices=tf.constant(ids, tf.int64)
        ),
        "ResourceSparseApplyProximalAdagrad": lambda v, s, ids, g: tf.raw_ops.ResourceSparseApplyProximalAdagrad(
            var=v.handle, accum=s[0].handle, lr=0.01, l1=0.0, l2=0.0, grad=g, indices=tf.constant(ids, tf.int64)
        ),
        "ResourceScatterAdd (int64 ids)": lambda v, s, ids, g: tf.raw_ops.ResourceScatterAdd(
            resource=v.handle, indices=tf.constant(ids, tf.int64), updates=g
        ),
        "ResourceScatterUpdate (int64 ids)": lambda v, s, ids, g: tf.raw_ops.ResourceScatterUpdate(
            resource=v.handle, indices=tf.constant(ids, tf.int64), updates=g
        ),
        "ResourceScatterUpdate (int32 ids)": lambda v, s, ids, g: tf.raw_ops.ResourceScatterUpdate(
            resource=v.handle, indices=tf.constant(ids, tf.int32), updates=g
        ),
    }
    print(f"TensorFlow {tf.__version__}: {num_ids} rows x {dim} of a {FLAGS.rows}-row table, us per update")
    for name, build in kernels.items():
        print(f"| {name} | {_time_loop(build, FLAGS.rows, dim, num_ids, [0.1]):.1f} |")


def _gather_rule_scatter(opt):
    def update(var, slots, ids, grads):
        ids = tf.constant(ids, tf.int64)
        names = opt.slot_names()
        rows = tf.gather(var, ids)
        slot_rows = {n: tf.gather(s, ids) for n, s in zip(names, slots)}
        new_rows, new_slots = opt.apply_rows(rows, slot_rows, grads, tf.constant(0.01))
        with tf.control_dependencies([rows] + list(slot_rows.values())):
            writes = [tf.raw_ops.ResourceScatterUpdate(resource=var.handle, indices=ids, updates=new_rows)]
            writes += [
                tf.raw_ops.ResourceScatterUpdate(resource=s.handle, indices=ids, updates=new_slots[n])
                for n, s in zip(names, slots)
            ]
        return tf.group(writes)

    return update


def _fused(opt):
    def update(var, slots, ids, grads):
        slot_vars = dict(zip(opt.slot_names(), slots))
        return opt.fused_sparse_apply(var, slot_vars, tf.constant(ids, tf.int64), grads, tf.constant(0.01))

    return update


def optimizer_table(num_ids: int = 2000) -> None:
    """Per optimizer with a fused kernel and dim: fused time / gather-rule-scatter time."""
    candidates = [
        optimizers.SGD(0.1),
        optimizers.Adagrad(0.1),
        optimizers.FTRL(0.1),
        optimizers.to_optimizer(optimizers.ProximalAdagradParameters(0.1)),
        optimizers.to_optimizer(optimizers.MomentumParameters(0.1, 0.9)),
        optimizers.to_optimizer(optimizers.RMSPropParameters(0.1, 0.9, 0.9, 1e-3)),
    ]
    print(f"TensorFlow {tf.__version__}: fused / gather-rule-scatter time, {num_ids} rows (> 1: the second is faster)")
    for dim in (16, 64):
        cells = []
        for opt in candidates:
            assert opt.supports_fused_sparse_apply(), opt
            initial = [0.1] * len(opt.slot_names())
            fused = _time_loop(_fused(opt), FLAGS.rows, dim, num_ids, initial)
            unfused = _time_loop(_gather_rule_scatter(opt), FLAGS.rows, dim, num_ids, initial)
            cells.append(f"{type(opt).__name__} {fused / unfused:.2f}")
        print(f"| dim {dim} | " + " | ".join(cells) + " |")


def main(argv):
    del argv
    kernel_table()
    optimizer_table()


if __name__ == "__main__":
    app.run(main)
