"""Whole-program benchmark: ours and upstream's CPU path as users run them, one process per program, in turn.

A *program* is what a user runs: a process that imports TensorFlow, builds an `input_fn` (a `tf.data` pipeline of
sparse features), builds a `TPUEstimator`, calls `train(max_steps=first_steps)` and then
`train(max_steps=total_steps)` with the Estimator's default checkpoint and summary cadence, then
`evaluate(steps=eval_steps)` and `predict()` over `predict_batches` batches (either skipped at 0). It runs as

* `ours`: `tpu_estimator.TPUEstimator(use_tpu=True)` with `EmbeddingConfigSpec(feature_columns=...)`;
* `upstream`: `tf.compat.v1.estimator.tpu.TPUEstimator(use_tpu=False)` (tensorflow_estimator, TF 2.15) with the
  same columns through `tf.compat.v1.tpu.experimental.embedding_column`.

Rounds run `ours` then `upstream`, each a fresh process; the parent measures each process's wall time and CPU time
(user + system, from `os.wait4`), so a round's pair shares the machine's state and is reported as a ratio
(`upstream wall / ours wall`: above 1 ours is faster). The child reports its phases: import, the first `train()`
(graph, session, first steps, checkpoints), the time from `train()` to its first step's start (its first
`Session.run`), and the loop rate of the
second `train()` (examples/sec between its `Session.run` calls after the first).

Two bounds for the loop rate, measured in their own processes: the input pipeline alone (the `input_fn`'s
dataset read by `get_next` in a while loop, as the training loop reads it; once, after the rounds) and the
computation alone (the same program fed from its batches, read into a file cache before it starts, "the pool",
none of them repeated; ours and upstream after each round's pair, so that each round's loop is compared with a
bound measured in the same state of the machine). A loop that overlaps input and computation perfectly on
separate cores reaches the smaller of the two.

Two closer looks, each optional: the overlap (`run_overlap`), one process per implementation alternating the loop
fed by the program's input and by the pool, so that each pair of loops is measured back to back in one process;
and the dense floor (`DENSE_FLOOR`), the program's dense part alone on ours' loop with the embedding activations
an input, in each pool round: the `evaluate()` and `predict()` rates that no embedding engine can beat.

The report also gives each implementation's spread over the rounds (`spread`): its range and its slowest run
against its median, of the whole process and of the second `train()`.

Programs are YAML files in `configs/bench/P_*.yaml` (keys = `Program` fields). Run with
`python scripts/benchmark_program.py --program=P_dlrm_zipf --runs=5`.
"""

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import yaml

PROGRAM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "bench")
IMPLEMENTATIONS = ("ours", "upstream")
SOURCES = ("synthetic", "arrays", "tfrecord")
# The program's dense part alone, on ours' loop, with the embedding activations an input (`dense_floor_input_fn`).
DENSE_FLOOR = "dense_floor"
ACTIVATIONS_KEY = "embedding_activations"


@dataclasses.dataclass
class Program:
    """One whole program.

    Attributes:
      name: the program's name (its file is `configs/bench/<name>.yaml`).
      description: one line for reports.
      source: 'synthetic' (Zipf ids generated in the process, sparse features in `tf.data`), 'arrays' (as a user
        writes it, workload A: `array_batches` batches of NumPy Zipf ids in memory,
        `from_tensor_slices`, a per-example `map`, `repeat`, `batch`, then `tf.sparse.from_dense` of the ids + 1 per
        feature) or 'tfrecord' (synthetic Criteo TFRecord files written before the rounds, read by the package's
        Criteo reader).
      num_tables: tables, one sparse feature each ('synthetic', 'arrays'; 'tfrecord' has Criteo's 26).
      rows: rows per table (for 'tfrecord': the largest hash-bucket count).
      dim: embedding width.
      batch_size: global batch size.
      mlp: hidden units then output units (last must be 1).
      num_dense: float inputs beside the embeddings ('synthetic', 'arrays'; 'tfrecord' has Criteo's 13).
      zipf_exponent: power-law exponent of the ids' frequencies ('arrays': NumPy's `zipf`, above 1).
      array_batches: batches of examples an 'arrays' program holds in memory and repeats.
      tfrecord_examples: examples written for 'tfrecord' (read repeatedly).
      prefetch: the dataset's `prefetch` buffer ('synthetic', 'arrays'; the reader uses AUTOTUNE).
      first_steps: `max_steps` of the first `train()`.
      total_steps: `max_steps` of the second `train()`.
      eval_steps: `evaluate(steps=...)` after training (AUC and loss); 0 skips it.
      predict_batches: batches `predict()` reads after evaluation; 0 skips it.
      iterations_per_loop: ours only (upstream's CPU path runs one step per `Session.run`).
      shards: ours only.
      learning_rate: Adagrad's (dense and embedding), initial accumulator 0.1.
      compute_pool_batches: batches cached for the compute-only bound; 0 (the default) caches as many as the program
        trains on (`total_steps`), so that no batch repeats: a few batches cycled keep the same table rows in the
        CPU caches and overstate the bound (P_dlrm_zipf: 8 batches cycled ran 10% faster than 320 distinct ones).
      seed: data seed.
      save_checkpoints: False runs both implementations with `RunConfig(save_checkpoints_steps=None,
        save_checkpoints_secs=None)`, as whole_program_a.py does: no checkpoint, so the second `train()` starts
        from step 0 again and runs `total_steps` steps; True keeps the Estimator's default cadence.
      log_step_count_steps: `RunConfig.log_step_count_steps` of both.
      per_host_v2: ours only: `per_host_input_for_training=PER_HOST_V2` (else `TPUConfig`'s default).
    """

    name: str
    description: str = ""
    source: str = "synthetic"
    num_tables: int = 26
    rows: int = 100000
    dim: int = 16
    batch_size: int = 1024
    mlp: List[int] = dataclasses.field(default_factory=lambda: [512, 256, 1])
    num_dense: int = 13
    zipf_exponent: float = 1.2
    tfrecord_examples: int = 65536
    prefetch: int = 4
    first_steps: int = 20
    total_steps: int = 320
    eval_steps: int = 100
    predict_batches: int = 50
    iterations_per_loop: int = 100
    shards: int = 1
    learning_rate: float = 0.05
    compute_pool_batches: int = 0
    seed: int = 0
    array_batches: int = 16
    save_checkpoints: bool = True
    log_step_count_steps: int = 100
    per_host_v2: bool = False

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"program {self.name}: source must be one of {SOURCES}, got {self.source!r}")
        if self.source == "arrays" and not (self.zipf_exponent > 1 and self.array_batches >= 1):
            raise ValueError(f"program {self.name}: an 'arrays' source needs zipf_exponent > 1 and array_batches >= 1")
        if not 0 < self.first_steps < self.total_steps:
            raise ValueError(f"program {self.name}: need 0 < first_steps < total_steps")
        if self.mlp[-1] != 1:
            raise ValueError(f"program {self.name}: the last mlp layer must have 1 unit, got {self.mlp}")


def load_program(name_or_path: str, program_dir: str = PROGRAM_DIR) -> Program:
    """A program from a YAML path or from its name in `configs/bench/`.

    Raises:
      ValueError: no such file, unknown keys, or invalid values.
    """
    return load_yaml_program(Program, "P_", "program", name_or_path, program_dir)


def load_yaml_program(cls: Any, prefix: str, kind: str, name_or_path: str, program_dir: str) -> Any:
    """`cls(**fields)` from a YAML path, or from `program_dir/<name>.yaml` where known names start with `prefix`.

    Raises:
      ValueError: no such file (naming the known ones), unknown keys, or what `cls` refuses.
    """
    path = name_or_path
    if not os.path.exists(path):
        path = os.path.join(program_dir, name_or_path if name_or_path.endswith(".yaml") else name_or_path + ".yaml")
    if not os.path.exists(path):
        known = sorted(p[:-5] for p in os.listdir(program_dir) if p.startswith(prefix) and p.endswith(".yaml"))
        raise ValueError(f"No {kind} {name_or_path!r}: give a YAML path or one of {known}")
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    return cls(**data)


# ----------------------------------------------------------------------------------------------------------
# The program, run inside a child process.


def zipf_cdf(rows: int, exponent: float) -> np.ndarray:
    """The cumulative distribution of ranks `1..rows` with frequencies proportional to `rank ** -exponent`."""
    weights = np.arange(1, rows + 1, dtype=np.float64) ** -exponent
    return np.cumsum(weights / weights.sum()).astype(np.float32)


def _synthetic_input_fn(p: Program) -> Callable:
    """Batches generated in the pipeline (as a reader would produce them): per batch, Zipf ids for every feature
    (inverse CDF of stateless uniforms; hot ids scattered over the table by a multiplicative hash), normal dense
    inputs and Bernoulli(0.3) labels; each feature a `[B, 1]` SparseTensor."""
    import tensorflow as tf

    cdf = zipf_cdf(p.rows, p.zipf_exponent)

    def make_batch(index, batch_size):
        seed = tf.stack([tf.constant(p.seed, tf.int64), index])
        uniform = tf.random.stateless_uniform([batch_size, p.num_tables], seed=seed)
        ranks = tf.minimum(tf.searchsorted(tf.constant(cdf), tf.reshape(uniform, [-1])), p.rows - 1)
        ids = tf.reshape((tf.cast(ranks, tf.int64) * 2654435761) % p.rows, [batch_size, p.num_tables])
        indices = tf.stack([tf.range(batch_size, dtype=tf.int64), tf.zeros([batch_size], tf.int64)], axis=1)
        shape = tf.constant([batch_size, 1], tf.int64)
        features = {"f%02d" % t: tf.SparseTensor(indices, ids[:, t], shape) for t in range(p.num_tables)}
        if p.num_dense:
            features["dense"] = tf.random.stateless_normal([batch_size, p.num_dense], seed=seed + 1)
        labels = tf.cast(tf.random.stateless_uniform([batch_size], seed=seed + 2) < 0.3, tf.float32)
        return features, labels

    def input_fn(params):
        batch_size = params["batch_size"]
        dataset = tf.data.Dataset.range(2**62).map(lambda i: make_batch(i, batch_size))
        return dataset.prefetch(p.prefetch)

    return input_fn


def _arrays_input_fn(p: Program) -> Callable:
    """The input of workload A as its user wrote it: NumPy arrays of `array_batches` batches (Zipf ids modulo
    `rows`, uniform dense inputs, 0/1 labels), sliced per example, mapped into one feature per table, repeated,
    batched, and each feature made a `[B, 1]` SparseTensor of its ids + 1 (so that id 0 is not dropped)."""
    import tensorflow as tf

    names = ["f%02d" % t for t in range(p.num_tables)]

    def input_fn(params):
        batch_size = params["batch_size"]
        rng = np.random.default_rng(p.seed)
        n = batch_size * p.array_batches
        ids = (rng.zipf(p.zipf_exponent, size=(n, p.num_tables, 1)) - 1) % p.rows
        dense = rng.random((n, p.num_dense), dtype=np.float32)
        labels = rng.integers(0, 2, size=(n,)).astype(np.float32)

        def to_features(i, d, label):
            return dict(zip(names, tf.unstack(i, p.num_tables)), dense=d), label

        def sparsify(features, label):
            out = {name: tf.sparse.from_dense(tf.cast(features[name], tf.int64) + 1) for name in names}
            if p.num_dense:
                out["dense"] = features["dense"]
            return out, label

        dataset = tf.data.Dataset.from_tensor_slices((ids, dense, labels)).map(to_features)
        return dataset.repeat().batch(batch_size, drop_remainder=True).map(sparsify).prefetch(p.prefetch)

    return input_fn


def write_tfrecords(p: Program, directory: str) -> str:
    """Writes the synthetic Criteo TFRecord file of a 'tfrecord' program; returns its path."""
    from tpu_estimator.app import data_command

    path = os.path.join(directory, f"{p.name}.tfrecord")
    if not os.path.exists(path):
        data_command.write_synthetic(path, p.tfrecord_examples, 0, p.seed, p.rows)
    return path


def _tfrecord_input_fn(p: Program, path: str) -> Callable:
    from tpu_estimator.app.data import criteo, schema

    sizes = schema.criteo_cardinalities(p.rows)

    def input_fn(params):
        dataset = criteo.criteo_tfrecord_dataset(
            [path], params["batch_size"], sizes, drop_remainder=True, num_epochs=None
        )
        return dataset

    return input_fn


def _feature_names(p: Program):
    """`(categorical feature -> bucket count, dense feature name or None)`."""
    if p.source == "tfrecord":
        from tpu_estimator.app.data import criteo, schema

        sizes = schema.criteo_cardinalities(p.rows)
        return dict(zip(criteo.CATEGORICAL_FEATURE_NAMES, sizes)), criteo.DENSE_FEATURE_NAME
    buckets = p.rows + 1 if p.source == "arrays" else p.rows  # 'arrays' ids are shifted by one
    return {"f%02d" % t: buckets for t in range(p.num_tables)}, ("dense" if p.num_dense else None)


def _model_fn(p: Program, columns, dense_key: Optional[str], spec_cls, cross_shard):
    """The program's model; with `columns` None, the embedding activations are the input `ACTIVATIONS_KEY`."""
    import tensorflow as tf

    def metric_fn(labels, logits):
        return {"auc": tf.compat.v1.metrics.auc(labels, tf.sigmoid(logits))}

    def model_fn(features, labels, mode, params):
        del params
        if columns is None:
            net = features[ACTIVATIONS_KEY]
        else:
            net = tf.compat.v1.keras.layers.DenseFeatures(columns)(features)
        if dense_key is not None:
            net = tf.concat([net, features[dense_key]], axis=1)
        for units in p.mlp[:-1]:
            net = tf.compat.v1.layers.dense(net, units, activation=tf.nn.relu)
        logits = tf.squeeze(tf.compat.v1.layers.dense(net, p.mlp[-1]), 1)
        if mode == "infer":
            return spec_cls(mode=mode, predictions={"probability": tf.sigmoid(logits)})
        loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
        if mode == "eval":
            return spec_cls(mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
        optimizer = tf.compat.v1.train.AdagradOptimizer(p.learning_rate, initial_accumulator_value=0.1)
        if cross_shard is not None:
            optimizer = cross_shard(optimizer)
        return spec_cls(mode=mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))

    return model_fn


def _run_config_args(p: Program) -> Dict[str, Any]:
    """The `RunConfig` arguments both implementations get beside `model_dir`."""
    args: Dict[str, Any] = {"log_step_count_steps": p.log_step_count_steps}
    if not p.save_checkpoints:
        args.update(save_checkpoints_steps=None, save_checkpoints_secs=None)
    return args


def _estimator(p: Program, implementation: str, model_dir: str):
    import tensorflow as tf

    vocab, dense_key = _feature_names(p)
    categorical = [tf.feature_column.categorical_column_with_identity(k, n) for k, n in vocab.items()]
    columns = [tf.compat.v1.tpu.experimental.embedding_column(c, p.dim, combiner="sum") for c in categorical]
    batch_sizes = dict(train_batch_size=p.batch_size, eval_batch_size=p.batch_size, predict_batch_size=p.batch_size)
    if implementation == "upstream":
        up = tf.compat.v1.estimator.tpu
        spec = up.experimental.EmbeddingConfigSpec(
            feature_columns=columns,
            optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(p.learning_rate, 0.1),
        )
        return up.TPUEstimator(
            model_fn=_model_fn(p, columns, dense_key, up.TPUEstimatorSpec, None),
            config=up.RunConfig(model_dir=model_dir, **_run_config_args(p)),
            use_tpu=False,
            embedding_config_spec=spec,
            **batch_sizes,
        )
    import tpu_estimator as te
    from tpu_estimator import experimental as tex

    per_host = {"per_host_input_for_training": te.InputPipelineConfig.PER_HOST_V2} if p.per_host_v2 else {}

    if implementation == DENSE_FLOOR:
        columns, embedding = None, {}  # The activations are an input: no tables.
    else:
        optimizer = tex.AdagradParameters(p.learning_rate, initial_accumulator=0.1)
        embedding = {
            "embedding_config_spec": tex.EmbeddingConfigSpec(feature_columns=columns, optimization_parameters=optimizer)
        }
    return te.TPUEstimator(
        model_fn=_model_fn(p, columns, dense_key, te.TPUEstimatorSpec, te.CrossShardOptimizer),
        config=te.RunConfig(
            model_dir=model_dir,
            tpu_config=te.TPUConfig(iterations_per_loop=p.iterations_per_loop, num_shards=p.shards, **per_host),
            **_run_config_args(p),
        ),
        use_tpu=True,
        **embedding,
        **batch_sizes,
    )


def _input_fn(p: Program, tfrecord_path: Optional[str]) -> Callable:
    if p.source == "tfrecord":
        return _tfrecord_input_fn(p, tfrecord_path)
    return _arrays_input_fn(p) if p.source == "arrays" else _synthetic_input_fn(p)


def dense_floor_input_fn(p: Program, tfrecord_path: Optional[str]) -> Callable:
    """The program's `input_fn` with its sparse features replaced by what the embedding layer would output.

    Args:
      p: the program.
      tfrecord_path: its TFRecord file ('tfrecord' programs).

    Returns:
      An `input_fn(params)` of `(features, labels)`: `features[ACTIVATIONS_KEY]` normal `[batch, tables * dim]`
      activations times 0.1, seeded per batch; the dense features (if any) and the labels are the program's.
    """
    import tensorflow as tf

    vocab, dense_key = _feature_names(p)
    width = len(vocab) * p.dim
    program_input_fn = _input_fn(p, tfrecord_path)

    def replace_sparse(index, batch):
        features, labels = batch
        seed = tf.stack([tf.constant(p.seed + 7, tf.int64), index])
        rows = tf.shape(labels)[0]
        replaced = {ACTIVATIONS_KEY: 0.1 * tf.random.stateless_normal(tf.stack([rows, width]), seed=seed)}
        if dense_key is not None:
            replaced[dense_key] = features[dense_key]
        return replaced, labels

    def input_fn(params):
        return program_input_fn(params).enumerate().map(replace_sparse)

    return input_fn


class _RunTimes(object):
    """A session hook factory recording when the session was created, when each `Session.run` began and ended, and
    when the hooks' `end` began (after every hook's `after_run` of the last run: an evaluation's metric updates
    that the Estimator's own hooks run after the loop are done by then)."""

    def __init__(self):
        self.created: Optional[float] = None
        self.before: List[float] = []
        self.runs: List[float] = []
        self.cpu: List[float] = []
        self.ended: Optional[float] = None

    def hook(self):
        import tensorflow as tf

        times = self

        class RunTimesHook(tf.compat.v1.train.SessionRunHook):
            def after_create_session(self, session, coord):
                times.created = time.perf_counter()

            def before_run(self, run_context):
                times.before.append(time.perf_counter())

            def after_run(self, run_context, run_values):
                times.runs.append(time.perf_counter())
                times.cpu.append(time.process_time())

            def end(self, session):
                times.ended = time.perf_counter()

        return RunTimesHook()

    def seconds_after_hooks(self, call_end: float) -> Optional[float]:
        """From this hook's `end` to the call's return: mostly the session's close; also the `end` of the hooks after
        it (an evaluation's final metric values, ours' infeed thread joined) and the Estimator's summary writing."""
        return None if self.ended is None else call_end - self.ended


def steps_before_second_train(p: Program) -> int:
    """The global step the second `train()` starts from: the first's last, or 0 without checkpoints."""
    return p.first_steps if p.save_checkpoints else 0


def _train_phase(estimator, input_fn, max_steps: int, previous_steps: int, batch_size: int) -> Dict[str, float]:
    """One `train()` call: its duration, time to session and to first step, and its loop rate after the first run."""
    times = _RunTimes()
    start = time.perf_counter()
    estimator.train(input_fn, max_steps=max_steps, hooks=[times.hook()])
    end = time.perf_counter()
    steps = max_steps - previous_steps
    out = {
        "seconds": end - start,
        "seconds_to_session": (times.created or end) - start,
        # When the first `Session.run` of the loop begins (graph, session, initial checkpoint done); its end would
        # count ours' first loop of up to iterations_per_loop steps against upstream's one step.
        "seconds_to_first_step": (times.before[0] if times.before else end) - start,
        "runs": len(times.runs),
        "seconds_after_hooks": times.seconds_after_hooks(end),
    }
    if len(times.runs) >= 2:
        steps_after_first = steps * (len(times.runs) - 1) / len(times.runs)
        seconds = times.runs[-1] - times.runs[0]
        out["loop_examples_per_sec"] = steps_after_first * batch_size / seconds
        # Cores the whole process kept busy during the loop (all threads: input, infeed, step).
        out["loop_cores_busy"] = (times.cpu[-1] - times.cpu[0]) / seconds
    return out


def run_program(p: Program, implementation: str, model_dir: str, tfrecord_path: Optional[str]) -> Dict[str, Any]:
    """The program itself: import, build, `train(first_steps)`, `train(total_steps)`; its phases in seconds."""
    start = time.perf_counter()
    import tensorflow as tf

    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    if implementation == "ours":
        import tpu_estimator  # noqa: F401 (its import is part of the program)
    imported = time.perf_counter()
    input_fn = _input_fn(p, tfrecord_path)
    estimator = _estimator(p, implementation, model_dir)
    first = _train_phase(estimator, input_fn, p.first_steps, 0, p.batch_size)
    second = _train_phase(estimator, input_fn, p.total_steps, steps_before_second_train(p), p.batch_size)
    out = {
        "seconds_import": imported - start,
        "first_train": first,
        "second_train": second,
        "loop_examples_per_sec": second.get("loop_examples_per_sec"),
    }
    if p.eval_steps:
        times = _RunTimes()
        begin = time.perf_counter()
        metrics = estimator.evaluate(input_fn, steps=p.eval_steps, hooks=[times.hook()])
        end = time.perf_counter()
        out["evaluate"] = {
            "seconds": end - begin,
            "auc": float(metrics["auc"]),
            "seconds_after_hooks": times.seconds_after_hooks(end),
        }
    if p.predict_batches:

        def predict_input_fn(params):
            return input_fn(params).take(p.predict_batches).map(lambda features, labels: features)

        times = _RunTimes()
        begin = time.perf_counter()
        rows = sum(1 for _ in estimator.predict(predict_input_fn, hooks=[times.hook()], yield_single_examples=True))
        end = time.perf_counter()
        out["predict"] = {"seconds": end - begin, "rows": rows, "seconds_after_hooks": times.seconds_after_hooks(end)}
    return out


def seconds_after_hooks(run: Dict[str, Any]) -> Optional[float]:
    """A program's calls' time from the timing hook's end to their return (`train()` twice, and `evaluate()` and
    `predict()` when the program makes them), summed; None when a call did not report it."""
    calls = [run["first_train"], run["second_train"], run.get("evaluate"), run.get("predict")]
    values = [call.get("seconds_after_hooks") for call in calls if call is not None]
    return None if any(v is None for v in values) else sum(values)


def run_input_only(p: Program, tfrecord_path: Optional[str], batches: int = 300) -> Dict[str, Any]:
    """The input pipeline alone, consumed as a training loop consumes it: one iterator, `get_next` in a while loop
    (one `Session.run` of 30 batches to warm up, then one of `batches`)."""
    import tensorflow as tf

    with tf.Graph().as_default():
        dataset = _input_fn(p, tfrecord_path)({"batch_size": p.batch_size})
        iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)
        count = tf.compat.v1.placeholder(tf.int32, [])

        def read_one(i):
            with tf.control_dependencies(tf.nest.flatten(iterator.get_next(), expand_composites=True)):
                return i + 1

        drained = tf.compat.v1.while_loop(lambda i: i < count, read_one, [tf.constant(0)], parallel_iterations=1)
        with tf.compat.v1.Session() as session:
            session.run(drained, {count: 30})
            start, cpu = time.perf_counter(), time.process_time()
            read = session.run(drained, {count: batches})
            seconds = time.perf_counter() - start
            cores = (time.process_time() - cpu) / seconds
    return {"examples_per_sec": read * p.batch_size / seconds, "batches": int(read), "loop_cores_busy": cores}


def _filled_pool(p: Program, input_fn: Callable, model_dir: str) -> Callable:
    """Reads `input_fn`'s first batches into a `tf.data` file cache in `model_dir`; returns an `input_fn` of them.

    `compute_pool_batches` batches (or `total_steps`), read once here, before anything is timed; the returned
    `input_fn` repeats them with the program's `prefetch`.
    """
    import tensorflow as tf

    pool_dir = os.path.join(model_dir, "pool")
    shutil.rmtree(pool_dir, ignore_errors=True)  # a pool of another program, or a partial one, is never reused
    os.makedirs(pool_dir)
    pool_file = os.path.join(pool_dir, "batches")

    def pool(params):
        return input_fn(params).take(p.compute_pool_batches or p.total_steps).cache(pool_file)

    with tf.Graph().as_default():
        batch = tf.compat.v1.data.make_one_shot_iterator(pool({"batch_size": p.batch_size})).get_next()
        with tf.compat.v1.Session() as session:
            try:
                while True:
                    session.run(tf.nest.flatten(batch, expand_composites=True))
            except tf.errors.OutOfRangeError:
                pass
    os.sync()  # the pool's pages are written back now, not while the loop is timed

    def pooled_input_fn(params):
        return pool(params).repeat().prefetch(p.prefetch)

    return pooled_input_fn


def run_overlap(
    p: Program, implementation: str, model_dir: str, tfrecord_path: Optional[str], pairs: int
) -> Dict[str, Any]:
    """The loop fed by the program's input and by the pool, alternately, in one process: how close input and
    computation together come to the computation alone.

    After the setup (`train(max_steps=first_steps)` from the program's input), `2 * pairs` further `train()` calls
    of `total_steps - first_steps` steps each; each pair runs one from the program's input and one from the pool
    (`_filled_pool`), the program's first in even pairs and second in odd ones, so that a drift of the machine
    within a pair cancels in the median. A pair's ratio is its program-fed loop rate over its pool-fed one: both
    measured back to back, in the same process, on the same model, as `_train_phase` measures the second
    `train()` of a program. Each call's predecessor is recorded (`<feed>_after`: 'setup', 'program' or 'pool'):
    with this order, the program-fed call of every even pair after the first follows a program-fed call.

    Args:
      p: the program.
      implementation: 'ours' or 'upstream'.
      model_dir: an empty directory for the pool and the model.
      tfrecord_path: the program's TFRecord file ('tfrecord' programs).
      pairs: how many pairs.

    Returns:
      `{'pairs': [{'order', 'program', 'pool', 'program_cores_busy', 'pool_cores_busy', 'program_after',
      'pool_after', 'ratio'}], 'global_step'}`: rates in examples/s; `global_step` is the step the last call ended
      at.

    Raises:
      ValueError: `pairs` is below 1, or the program saves no checkpoints.
    """
    if pairs < 1:
        raise ValueError(f"overlap pairs must be at least 1, got {pairs}")
    if not p.save_checkpoints:
        raise ValueError(f"program {p.name}: the overlap continues training across calls; it needs save_checkpoints")
    input_fn = _input_fn(p, tfrecord_path)
    feeds = {"program": input_fn, "pool": _filled_pool(p, input_fn, model_dir)}
    estimator = _estimator(p, implementation, os.path.join(model_dir, "model"))
    _train_phase(estimator, input_fn, p.first_steps, 0, p.batch_size)
    step, span = p.first_steps, p.total_steps - p.first_steps
    measured, previous = [], "setup"
    for pair in range(pairs):
        order = ("program", "pool") if pair % 2 == 0 else ("pool", "program")
        record: Dict[str, Any] = {"order": list(order)}
        for feed in order:
            phase = _train_phase(estimator, feeds[feed], step + span, step, p.batch_size)
            step += span
            record[feed] = phase.get("loop_examples_per_sec")
            record[f"{feed}_cores_busy"] = phase.get("loop_cores_busy")
            record[f"{feed}_after"], previous = previous, feed
        record["ratio"] = record["program"] / record["pool"] if record["program"] and record["pool"] else None
        measured.append(record)
    return {"pairs": measured, "global_step": step}


def run_compute_only(p: Program, implementation: str, model_dir: str, tfrecord_path: Optional[str]) -> Dict[str, Any]:
    """The same program fed from `compute_pool_batches` batches cached before it runs: the rates without input.

    The pool is a `tf.data` file cache in `model_dir`, filled by reading the input once before the program starts
    (an in-memory cache is filled by the measured pass itself, which then runs the input pipeline too). Training as
    the program trains (setup, then the second `train()` measured); then `evaluate(steps=eval_steps)` and
    `predict()` of `predict_batches` batches from the pool: `evaluate()`'s rate from its first `Session.run` to the
    hooks' `end` (ours runs an evaluation in one run, then its metric updates; upstream runs one per step),
    `predict()`'s from the first prediction to the last. `implementation` `DENSE_FLOOR`: the program's dense part
    alone (`dense_floor_input_fn`), ours' loop: the rates that no embedding engine can beat.

    Args:
      p: the program.
      implementation: 'ours', 'upstream' or `DENSE_FLOOR`.
      model_dir: an empty directory for the pool and the model.
      tfrecord_path: the program's TFRecord file ('tfrecord' programs).

    Returns:
      `{'examples_per_sec', 'loop_cores_busy'}` of the measured `train()`, plus `'evaluate_examples_per_sec'` and
      `'predict_examples_per_sec'` when the program evaluates and predicts.
    """
    input_fn = dense_floor_input_fn(p, tfrecord_path) if implementation == DENSE_FLOOR else _input_fn(p, tfrecord_path)
    pooled_input_fn = _filled_pool(p, input_fn, model_dir)
    estimator = _estimator(p, implementation, model_dir)
    _train_phase(estimator, pooled_input_fn, p.first_steps, 0, p.batch_size)  # as the program: setup, then measure
    second = _train_phase(estimator, pooled_input_fn, p.total_steps, steps_before_second_train(p), p.batch_size)
    out = {"examples_per_sec": second.get("loop_examples_per_sec"), "loop_cores_busy": second.get("loop_cores_busy")}
    if p.eval_steps:
        times = _RunTimes()
        estimator.evaluate(pooled_input_fn, steps=p.eval_steps, hooks=[times.hook()])
        # To the hooks' end: ours' metric updates (the Estimator's evaluation hooks) are then done, as upstream's.
        out["evaluate_examples_per_sec"] = p.eval_steps * p.batch_size / (times.ended - times.before[0])
    if p.predict_batches > 1:

        def predict_input_fn(params):
            return pooled_input_fn(params).take(p.predict_batches).map(lambda features, labels: features)

        stamps = [time.perf_counter() for _ in estimator.predict(predict_input_fn, yield_single_examples=False)]
        # From the first batch's predictions to the last: the batches after the first.
        out["predict_examples_per_sec"] = (len(stamps) - 1) * p.batch_size / (stamps[-1] - stamps[0])
    return out


def _child_main(request_json: str) -> None:
    request = json.loads(request_json)
    p = Program(**request["program"])
    kind, implementation = request["kind"], request["implementation"]
    if kind == "program":
        result = run_program(p, implementation, request["model_dir"], request.get("tfrecord_path"))
    elif kind == "input":
        result = run_input_only(p, request.get("tfrecord_path"))
    elif kind == "overlap":
        result = run_overlap(p, implementation, request["model_dir"], request.get("tfrecord_path"), request["pairs"])
    else:
        result = run_compute_only(p, implementation, request["model_dir"], request.get("tfrecord_path"))
    with open(request["output"], "w") as f:
        json.dump(result, f)


# ----------------------------------------------------------------------------------------------------------
# The parent: processes in turn, per-pair ratios.


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """The Python (and source tree, first on `PYTHONPATH`) that runs one implementation."""

    python: str = sys.executable
    source_dir: Optional[str] = None


def run_child(
    p: Program,
    kind: str,
    implementation: str,
    interpreter: Interpreter,
    tfrecord_path: Optional[str],
    timeout: float = 3600,
    pairs: int = 0,
) -> Dict[str, Any]:
    """Runs one child process; returns its result plus the process's wall and CPU seconds, or `{'error': ...}`.

    `kind` is 'program', 'input', 'compute' or 'overlap' (with `pairs`).
    """
    request = {
        "program": dataclasses.asdict(p),
        "kind": kind,
        "implementation": implementation,
        "tfrecord_path": tfrecord_path,
        "pairs": pairs,
    }
    return run_module_child(__name__, request, interpreter, timeout)


def run_module_child(module: str, request: Dict[str, Any], interpreter: Interpreter, timeout: float) -> Dict[str, Any]:
    """Runs `python -m module <request as JSON>` in a fresh temporary directory.

    The request gains `model_dir` and `output` (paths in that directory); the child writes its result as JSON to
    `output`.

    Returns:
      The child's result plus `wall_seconds`, `cpu_seconds` (user + system, from `os.wait4`) and `cores_busy`; or
      `{'error': ...}` with the exit status and the end of its stderr, or the timeout.
    """
    os.sync()  # The previous child's checkpoints are on disk, not being written back while this one runs.
    with tempfile.TemporaryDirectory(prefix="program_bench_") as tmp:
        request = dict(request, model_dir=os.path.join(tmp, "model"), output=os.path.join(tmp, "result.json"))
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.setdefault("TF_USE_LEGACY_KERAS", "1")
        if interpreter.source_dir:
            env["PYTHONPATH"] = os.pathsep.join(x for x in (interpreter.source_dir, env.get("PYTHONPATH")) if x)
        cmd = [interpreter.python, "-m", module, json.dumps(request)]
        start = time.perf_counter()
        with open(os.path.join(tmp, "stderr"), "w+") as stderr:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp)
            try:
                _, status, usage = _wait4(proc, timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return {"error": f"timed out after {timeout:.0f} s"}
            wall = time.perf_counter() - start
            stderr.seek(0)
            tail = stderr.read().strip().splitlines()[-8:]
        if status != 0 or not os.path.exists(request["output"]):
            return {"error": f"exit status {status}: " + " | ".join(tail)}
        with open(request["output"]) as f:
            result = json.load(f)
    cpu = usage.ru_utime + usage.ru_stime
    result.update(wall_seconds=wall, cpu_seconds=cpu, cores_busy=cpu / wall)
    return result


def _wait4(proc: subprocess.Popen, timeout: float):
    """`os.wait4` with a deadline: `(pid, exit status, rusage)` of the child."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return pid, proc.returncode, usage
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.02)


def summary(values: Sequence[Optional[float]]) -> Optional[Dict[str, float]]:
    good = [v for v in values if v is not None]
    if not good:
        return None
    return {"median": statistics.median(good), "min": min(good), "max": max(good), "values": good}


# Spread figures: per implementation, a figure of each complete run (seconds: the slowest is the worst).
SPREAD_FIGURES = (
    ("wall time, whole process", lambda r: r["wall_seconds"]),
    ("second `train()`", lambda r: r["second_train"]["seconds"]),
)


def spread(values: Sequence[Optional[float]]) -> Optional[Dict[str, float]]:
    """How far a run can be from the typical one: `summary(values)` plus `worst_over_median` (the slowest over the
    median, e.g. 1.08: the worst run took 8% longer than the median one) and `best_over_median`; None when empty.

    Args:
      values: seconds of each run (None for a run without the figure, left out).
    """
    stats = summary(values)
    if stats is None:
        return None
    return dict(
        stats, worst_over_median=stats["max"] / stats["median"], best_over_median=stats["min"] / stats["median"]
    )


def spreads(rounds: List[Dict[str, Dict[str, Any]]]) -> Dict[str, Dict[str, Optional[Dict[str, float]]]]:
    """`{figure: {implementation: spread}}` over the rounds, each implementation's runs without an error."""
    return {
        label: {
            i: spread([get(rr[i]) for rr in rounds if "error" not in rr.get(i, {"error": 1})]) for i in IMPLEMENTATIONS
        }
        for label, get in SPREAD_FIGURES
    }


def spread_cell(stats: Optional[Dict[str, float]]) -> str:
    """`34.1-37.9 s, worst +6%` for a spread of seconds."""
    if stats is None:
        return "-"
    return f"{stats['min']:.1f}-{stats['max']:.1f} s, worst {stats['worst_over_median'] - 1:+.0%}"


def compare(
    p: Program,
    runs: int,
    interpreters: Dict[str, Interpreter],
    bounds: bool = True,
    log: Callable[[str], None] = print,
    overlap_pairs: int = 0,
    dense_floor: bool = False,
    pool_rounds: int = 1,
) -> Dict[str, Any]:
    """Runs the program `runs` times per implementation in turn (ours, upstream, ours, ...), with the bounds.

    With `bounds`, each round's pair is followed by the computation alone (the pool) of ours, then upstream's
    (`pool_rounds` such rounds when `runs` is 0; with `dense_floor`, each also runs the program's dense part alone,
    `DENSE_FLOOR`), and the input pipeline alone runs once at the end. With `overlap_pairs`,
    one process per implementation then alternates the program's input and the pool (`run_overlap`).

    Returns:
      `{'program', 'rounds': [{impl: result}], 'ratios': {...}}`, plus with `bounds` `'compute_rounds': [{impl:
      result}]` and `'bounds': {'input': result}`. Ratios are per round: upstream / ours for times (above 1 ours
      is faster), ours / upstream for rates, and ours' loop over min(input alone, that round's pool rate); with
      `overlap_pairs`, `'overlap': {impl: result}` and the ratios `overlap_<impl>` (program-fed loop over
      pool-fed loop, per pair); with `dense_floor`, each compute round's `DENSE_FLOOR` entry and the ratios
      `pool_{evaluate,predict}_floor_over_upstream` and `pool_{evaluate,predict}_ours_over_floor`.

    Raises:
      ValueError: `overlap_pairs` below 0, `dense_floor` without `bounds`, `pool_rounds` below 1 or other than 1
        with `runs`.
    """
    if overlap_pairs < 0:
        raise ValueError(f"overlap_pairs must be 0 (none) or more, got {overlap_pairs}")
    if dense_floor and not bounds:
        raise ValueError("dense_floor runs in the pool rounds: it needs bounds")
    if pool_rounds < 1 or (pool_rounds != 1 and runs):
        raise ValueError(f"pool_rounds ({pool_rounds}) is for runs=0 and must be at least 1; runs > 0 pools each round")
    with tempfile.TemporaryDirectory(prefix="program_bench_data_") as workdir:
        tfrecord_path = write_tfrecords(p, workdir) if p.source == "tfrecord" else None
        result = _compare_in_turn(p, runs, interpreters, bounds, log, tfrecord_path, dense_floor, pool_rounds)
        if overlap_pairs:
            result["overlap"] = {}
            for implementation in IMPLEMENTATIONS:
                overlap = run_child(
                    p, "overlap", implementation, interpreters[implementation], tfrecord_path, pairs=overlap_pairs
                )
                result["overlap"][implementation] = overlap
                ratios = [pair["ratio"] for pair in overlap.get("pairs", []) if pair["ratio"]]
                result["ratios"][f"overlap_{implementation}"] = summary(ratios)
                log(f"overlap, {implementation}: " + json.dumps(overlap.get("error") or ratios))
        return result


def _compare_in_turn(
    p: Program,
    runs: int,
    interpreters: Dict[str, Interpreter],
    bounds: bool,
    log: Callable[[str], None],
    tfrecord_path: Optional[str],
    dense_floor: bool = False,
    pool_rounds: int = 1,
) -> Dict[str, Any]:
    rounds: List[Dict[str, Dict[str, Any]]] = []
    compute_rounds: List[Dict[str, Dict[str, Any]]] = []
    for r in range(runs):
        round_results = {}
        for implementation in IMPLEMENTATIONS:
            result = run_child(p, "program", implementation, interpreters[implementation], tfrecord_path)
            round_results[implementation] = result
            if "error" in result:
                log(f"round {r + 1}/{runs} {implementation}: ERROR {result['error']}")
            else:
                log(
                    f"round {r + 1}/{runs} {implementation}: {result['wall_seconds']:.1f} s wall, "
                    f"{result['cpu_seconds']:.1f} s CPU, loop {result['loop_examples_per_sec'] or 0:,.0f} examples/s"
                )
        rounds.append(round_results)
        if bounds:
            label = f"round {r + 1}/{runs}"
            compute_rounds.append(_compute_round(p, interpreters, tfrecord_path, log, label, dense_floor))
    if bounds and not runs:
        for r in range(pool_rounds):
            label = f"pool {r + 1}/{pool_rounds}"
            compute_rounds.append(_compute_round(p, interpreters, tfrecord_path, log, label, dense_floor))
    complete = [rr for rr in rounds if all("error" not in rr[i] for i in IMPLEMENTATIONS)]
    ratios = {
        "wall_upstream_over_ours": summary(
            [rr["upstream"]["wall_seconds"] / rr["ours"]["wall_seconds"] for rr in complete]
        ),
        "evaluate_upstream_over_ours": _phase_ratio(complete, "evaluate"),
        "predict_upstream_over_ours": _phase_ratio(complete, "predict"),
        "evaluate_to_hooks_end_upstream_over_ours": _phase_ratio(complete, "evaluate", to_hooks_end=True),
        "predict_to_hooks_end_upstream_over_ours": _phase_ratio(complete, "predict", to_hooks_end=True),
        "loop_ours_over_upstream": summary(
            [
                rr["ours"]["loop_examples_per_sec"] / rr["upstream"]["loop_examples_per_sec"]
                for rr in complete
                if rr["ours"]["loop_examples_per_sec"] and rr["upstream"]["loop_examples_per_sec"]
            ]
        ),
    }
    result = {"program": dataclasses.asdict(p), "rounds": rounds, "ratios": ratios, "spread": spreads(rounds)}
    if bounds:
        result["compute_rounds"] = compute_rounds
        result["bounds"] = {"input": run_child(p, "input", "ours", interpreters["ours"], tfrecord_path)}
        log("input alone: " + json.dumps(result["bounds"]["input"].get("examples_per_sec")))
        ratios.update(_pool_ratios(rounds, compute_rounds, result["bounds"]["input"].get("examples_per_sec")))
    return result


def _compute_round(
    p: Program,
    interpreters: Dict[str, Interpreter],
    tfrecord_path: Optional[str],
    log: Callable[[str], None],
    label: str,
    dense_floor: bool = False,
) -> Dict[str, Dict[str, Any]]:
    """The computation alone (the pool), ours then upstream (then, with `dense_floor`, `DENSE_FLOOR` with ours'
    interpreter), each in its own process."""
    out = {}
    for implementation in IMPLEMENTATIONS + ((DENSE_FLOOR,) if dense_floor else ()):
        interpreter = interpreters["ours" if implementation == DENSE_FLOOR else implementation]
        out[implementation] = run_child(p, "compute", implementation, interpreter, tfrecord_path)
        rate = out[implementation].get("examples_per_sec", out[implementation].get("error"))
        log(f"{label} computation alone, {implementation}: {rate}")
    return out


def _pool_ratios(rounds, compute_rounds, input_rate: Optional[float]) -> Dict[str, Optional[Dict[str, float]]]:
    """Per round: the pool rates ours / upstream, and ours' loop over min(input alone, that round's pool rate)."""
    complete = [cr for cr in compute_rounds if all("error" not in cr[i] for i in IMPLEMENTATIONS)]

    def ours_over_upstream(key):
        return summary(
            [
                cr["ours"][key] / cr["upstream"][key]
                for cr in complete
                if cr["ours"].get(key) and cr["upstream"].get(key)
            ]
        )

    def over(numerator, denominator, key):
        return summary(
            [
                cr[numerator][key] / cr[denominator][key]
                for cr in compute_rounds
                if all("error" not in cr.get(i, {"error": 1}) for i in (numerator, denominator))
                and cr[numerator].get(key)
                and cr[denominator].get(key)
            ]
        )

    loop_over_bound = []
    for rr, cr in zip(rounds, compute_rounds):
        loop, compute = rr["ours"].get("loop_examples_per_sec"), cr["ours"].get("examples_per_sec")
        if loop and compute and input_rate:
            loop_over_bound.append(loop / min(input_rate, compute))
    return {
        "pool_compute_ours_over_upstream": ours_over_upstream("examples_per_sec"),
        "pool_evaluate_ours_over_upstream": ours_over_upstream("evaluate_examples_per_sec"),
        "pool_predict_ours_over_upstream": ours_over_upstream("predict_examples_per_sec"),
        "loop_over_bound_ours": summary(loop_over_bound),
        # The dense part alone (rounds that ran it): what the whole model's rates are bounded by.
        "pool_evaluate_floor_over_upstream": over(DENSE_FLOOR, "upstream", "evaluate_examples_per_sec"),
        "pool_predict_floor_over_upstream": over(DENSE_FLOOR, "upstream", "predict_examples_per_sec"),
        "pool_evaluate_ours_over_floor": over("ours", DENSE_FLOOR, "evaluate_examples_per_sec"),
        "pool_predict_ours_over_floor": over("ours", DENSE_FLOOR, "predict_examples_per_sec"),
    }


def _phase_ratio(rounds, phase: str, to_hooks_end: bool = False) -> Optional[Dict[str, float]]:
    """Per round, upstream's seconds in `phase` over ours (above 1: ours is faster); with `to_hooks_end`, each
    call's seconds up to the timing hook's end (without what follows it, mostly the session's close)."""

    def seconds(call):
        if not to_hooks_end:
            return call["seconds"]
        after = call.get("seconds_after_hooks")
        return None if after is None else call["seconds"] - after

    pairs = [(seconds(rr["upstream"][phase]), seconds(rr["ours"][phase])) for rr in rounds if phase in rr["ours"]]
    return summary([up / ours for up, ours in pairs if up is not None and ours is not None])


def _per_impl(rounds, implementation: str, get: Callable[[Dict[str, Any]], Optional[float]]):
    return summary([get(rr[implementation]) for rr in rounds if "error" not in rr.get(implementation, {"error": 1})])


def cell(stats: Optional[Dict[str, float]], fmt: str = "{:.1f}") -> str:
    if stats is None:
        return "-"
    return f"{fmt.format(stats['median'])} ({fmt.format(stats['min'])}-{fmt.format(stats['max'])})"


def markdown(result: Dict[str, Any]) -> str:
    """The report: per implementation, medians (ranges) of each figure; per-pair ratios; the bounds."""
    p = result["program"]
    rounds = result["rounds"]
    figures = [
        ("wall time, whole process (s)", lambda r: r["wall_seconds"], "{:.1f}"),
        ("CPU time, user + system (s)", lambda r: r["cpu_seconds"], "{:.1f}"),
        ("cores busy (CPU / wall)", lambda r: r["cores_busy"], "{:.2f}"),
        ("import (s)", lambda r: r["seconds_import"], "{:.1f}"),
        (
            "first `train()`: graph, session, first steps, checkpoints (s)",
            lambda r: r["first_train"]["seconds"],
            "{:.1f}",
        ),
        (
            "`train()` to its first step's start, first call (s)",
            lambda r: r["first_train"]["seconds_to_first_step"],
            "{:.2f}",
        ),
        ("second `train()` (s)", lambda r: r["second_train"]["seconds"], "{:.1f}"),
        ("loop, second `train()` (examples/s)", lambda r: r["loop_examples_per_sec"], "{:,.0f}"),
        ("cores busy in that loop", lambda r: r["second_train"].get("loop_cores_busy"), "{:.2f}"),
        ("`evaluate(steps=eval_steps)`, whole call (s)", lambda r: r.get("evaluate", {}).get("seconds"), "{:.1f}"),
        (
            "`predict()` of predict_batches batches, whole call (s)",
            lambda r: r.get("predict", {}).get("seconds"),
            "{:.1f}",
        ),
        ("after the timing hook's end, mostly the session's close, all calls (s)", seconds_after_hooks, "{:.2f}"),
    ]
    lines = [
        f"Program `{p['name']}`: {p['description']} ({len(rounds)} rounds, ours then upstream in each)",
        "",
        "| figure: median (range) | ours | upstream |",
        "|---|---:|---:|",
    ]
    for label, get, fmt in figures:
        cells = [cell(_per_impl(rounds, i, get), fmt) for i in IMPLEMENTATIONS]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    ratios = result["ratios"]
    lines += [
        "",
        f"Per-pair ratios: wall time upstream / ours **{cell(ratios['wall_upstream_over_ours'], '{:.2f}')}**; "
        f"loop rate ours / upstream {cell(ratios['loop_ours_over_upstream'], '{:.2f}')}; "
        f"`evaluate()` upstream / ours {cell(ratios['evaluate_upstream_over_ours'], '{:.2f}')} (to the timing "
        f"hook's end, without the close: {cell(ratios.get('evaluate_to_hooks_end_upstream_over_ours'), '{:.2f}')}); "
        f"`predict()` upstream / ours {cell(ratios['predict_upstream_over_ours'], '{:.2f}')} (without the close: "
        f"{cell(ratios.get('predict_to_hooks_end_upstream_over_ours'), '{:.2f}')}).",
    ]
    spread_by_figure = result.get("spread") or spreads(rounds)
    lines.append(
        "Spread (each implementation's range, and its slowest run against its median): "
        + "; ".join(
            f"{label}: ours {spread_cell(by_impl['ours'])}, upstream {spread_cell(by_impl['upstream'])}"
            for label, by_impl in spread_by_figure.items()
        )
        + "."
    )
    bounds = result.get("bounds")
    if bounds:
        compute_rounds = result["compute_rounds"]
        input_rate = bounds["input"].get("examples_per_sec")

        def rates(implementation, key):
            return cell(_per_impl(compute_rounds, implementation, lambda r: r.get(key)), "{:,.0f}")

        measured = sum(all("error" not in cr[i] for i in IMPLEMENTATIONS) for cr in compute_rounds)
        per_round = ", one after each round's pair" if result["rounds"] else ""
        lines.append(
            f"Bounds (examples/s, median (range) of {measured} pool run(s){per_round}): input pipeline "
            f"alone {f'{input_rate:,.0f}' if input_rate else 'failed'}; computation alone (pool): ours "
            f"{rates('ours', 'examples_per_sec')}, upstream {rates('upstream', 'examples_per_sec')}; per-pair ratio "
            f"ours / upstream {cell(ratios['pool_compute_ours_over_upstream'], '{:.2f}')}."
        )
        spans = (
            ("evaluate_examples_per_sec", "evaluate", "`evaluate()`", "first run to the hooks' end"),
            ("predict_examples_per_sec", "predict", "`predict()`", "first prediction to last"),
        )
        for key, name, what, span in spans:
            line = (
                f"{what} from the pool (examples/s, {span}): ours {rates('ours', key)}, upstream "
                f"{rates('upstream', key)}; per-pair ratio ours / upstream "
                f"**{cell(ratios[f'pool_{name}_ours_over_upstream'], '{:.2f}')}**."
            )
            if ratios.get(f"pool_{name}_floor_over_upstream"):
                line += (
                    f" The dense part alone (ours' loop, the embedding activations an input: no lookup at all) "
                    f"{rates(DENSE_FLOOR, key)}: per round "
                    f"**{cell(ratios[f'pool_{name}_floor_over_upstream'], '{:.2f}')}x** upstream's whole model; "
                    f"ours' whole model at {cell(ratios[f'pool_{name}_ours_over_floor'], '{:.0%}')} of it."
                )
            lines.append(line)
        if ratios["loop_over_bound_ours"]:
            lines.append(
                "Ours' loop over min(input alone, that round's computation alone): "
                f"**{cell(ratios['loop_over_bound_ours'], '{:.0%}')}**."
            )
    failed = [
        f"{implementation} {kind}: {run['error']}"
        for kind, runs in (("overlap", [result.get("overlap", {})]), ("pool", result.get("compute_rounds", [])))
        for by_implementation in runs
        for implementation, run in by_implementation.items()
        if "error" in run
    ]
    if failed:
        lines.append("Failed runs: " + "; ".join(failed) + ".")
    overlap = result.get("overlap")
    if overlap:
        pairs = max(len(overlap[i].get("pairs", [])) for i in IMPLEMENTATIONS)
        lines.append(
            f"The loop fed by the program's input over the loop fed by the pool, in one process, back to back "
            f"({pairs} pairs, alternating which runs first): ours **{cell(ratios.get('overlap_ours'), '{:.0%}')}**, "
            f"upstream {cell(ratios.get('overlap_upstream'), '{:.0%}')}."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    _child_main(sys.argv[1])
