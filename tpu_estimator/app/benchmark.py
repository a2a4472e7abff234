"""Benchmarks of our `TPUEstimator` embedding engine against upstream's CPU path, on identical synthetic data.

Each measured configuration ("line") runs in its own subprocess, so that its peak memory (RSS high-water mark,
`VmHWM`) is its own and large workloads never share a process:

* `upstream`: `tf.compat.v1.estimator.tpu.TPUEstimator(use_tpu=False)` with
  `tf.compat.v1.tpu.experimental.embedding_column` features; on the CPU path the model's Adagrad optimizer trains
  the embedding variables.
* `ours_1shard` / `ours_2shards`: `tpu_estimator.TPUEstimator(use_tpu=True)` with the same feature columns and
  `AdagradParameters` (the engine applies them).
* `ours_dict_1shard` (optional): the same model through `feature_to_config_dict` / `table_to_config_dict`.
* `cluster_<H>x<S>` (optional): `ours` on a loopback cluster of H `tpu-estimator-server` workers with S logical
  CPU shards each (`loopback_cluster.py`, started and stopped inside the run); also reports the loopback bytes per
  measured step (`loopback_bytes_per_step`: what the gRPC runtime moves between client and workers).

The model is the same for every line: `DenseFeatures(columns)` (+ optional dense inputs) -> ReLU MLP -> logit,
sigmoid cross-entropy, Adagrad (lr and initial accumulator equal for dense and embedding variables).

Throughput is examples/sec over the steps after warm-up, from the wall time between `Session.run` calls.
The module also measures the machine's random row-gather rate and memory copy bandwidth with NumPy, and reports
the fraction of them the engine's bytes per step reach.

Use `run(...)` from code (the CLI's `benchmark` subcommand) or `scripts/benchmark.py` from a shell.
"""

import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from tpu_estimator.app import loopback_cluster

WORKLOADS = ("A", "B", "C", "D", "M")
DEFAULT_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "bench")


# ----------------------------------------------------------------------------------------------------------
# Configuration.


@dataclasses.dataclass
class Workload:
    """One benchmark workload (a YAML file in configs/bench).

    Attributes:
      name: workload letter or name ('A', 'B', 'C', 'D', 'tiny').
      description: one line for reports.
      num_tables: number of tables (one feature each).
      rows: rows per table; a list runs a vocabulary sweep (one set of lines per value).
      dim: embedding dimension.
      ids_per_feature: ids per example and feature (dense `[B, k]` ids).
      combiner: 'sum', 'mean' or 'sqrtn'.
      batch_size: global batch size.
      mlp: hidden units then output units (last must be 1).
      num_dense: float inputs concatenated with the embeddings.
      steps: measured steps (after warm-up).
      warmup_steps: steps excluded from the rate.
      iterations_per_loop: list of values; each gives its own lines ('ours' only).
      lines: which lines to run: upstream, ours_1shard, ours_2shards, ours_dict_1shard.
      learning_rate: Adagrad learning rate (dense and embedding).
      pool_batches: distinct synthetic batches cycled through by the input pipeline.
      seed: data seed.
      min_free_bytes_factor: lines are skipped (with a note) when available memory is below this factor times
        the table+slot bytes.
      save_checkpoints: save a checkpoint when the session starts and after the last step (as an Estimator with
        checkpointing does), so that the peak memory includes checkpoint saving; off by default.
    """

    name: str
    description: str = ""
    num_tables: int = 26
    rows: Any = 100000
    dim: int = 16
    ids_per_feature: int = 1
    combiner: str = "sum"
    batch_size: int = 1024
    mlp: List[int] = dataclasses.field(default_factory=lambda: [512, 256, 1])
    num_dense: int = 0
    steps: int = 100
    warmup_steps: int = 20
    iterations_per_loop: Any = 100
    lines: List[str] = dataclasses.field(default_factory=lambda: ["upstream", "ours_1shard", "ours_2shards"])
    learning_rate: float = 0.05
    pool_batches: int = 4
    seed: int = 0
    min_free_bytes_factor: float = 1.15
    save_checkpoints: bool = False

    @property
    def row_values(self) -> List[int]:
        return [int(r) for r in (self.rows if isinstance(self.rows, (list, tuple)) else [self.rows])]

    @property
    def ipl_values(self) -> List[int]:
        ipl = self.iterations_per_loop
        return [int(v) for v in (ipl if isinstance(ipl, (list, tuple)) else [ipl])]


def load_workload(path: str) -> Workload:
    """Reads a workload YAML file (keys = `Workload` fields)."""
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    unknown = set(data) - {f.name for f in dataclasses.fields(Workload)}
    if unknown:
        raise ValueError("{}: unknown keys {}".format(path, sorted(unknown)))
    if "name" not in data:
        raise ValueError('{}: missing key "name"'.format(path))
    return Workload(**data)


def workload_paths(config: Optional[str], workload: str, config_dir: str = DEFAULT_CONFIG_DIR) -> List[str]:
    """The YAML files to run: `config` if given, else the files of `workload` ('A'..'D' or 'all')."""
    if config:
        return [config]
    names = WORKLOADS if workload.lower() == "all" else [workload.upper()]
    paths = []
    for name in names:
        matches = sorted(p for p in os.listdir(config_dir) if p.startswith(name + "_") and p.endswith(".yaml"))
        if not matches:
            raise ValueError("No config for workload {} in {}".format(name, config_dir))
        paths.extend(os.path.join(config_dir, m) for m in matches)
    return paths


# ----------------------------------------------------------------------------------------------------------
# Machine baselines (NumPy).


def machine_rates(
    table_rows: int = 2_000_000, dim: int = 64, gathers: int = 500_000, copy_bytes: int = 512 * 2**20, repeats: int = 3
) -> Dict[str, float]:
    """Random row-gather rate (rows/s, bytes/s) of a float32 table and memory copy bandwidth (bytes/s).

    The gather table is larger than the caches (2M x 64 floats = 512 MiB); ids are uniform. The copy is
    `np.copyto` of `copy_bytes` (counted once: bytes copied per second).
    """
    rng = np.random.default_rng(0)
    table = rng.standard_normal((table_rows, dim), dtype=np.float32)
    ids = rng.integers(0, table_rows, gathers)
    out = np.empty((gathers, dim), np.float32)
    best_gather = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.take(table, ids, axis=0, out=out)
        best_gather = min(best_gather, time.perf_counter() - start)
    del table, out
    src = np.ones(copy_bytes // 4, np.float32)
    dst = np.empty_like(src)
    best_copy = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best_copy = min(best_copy, time.perf_counter() - start)
    return {
        "gather_rows_per_sec": gathers / best_gather,
        "gather_bytes_per_sec": gathers * dim * 4 / best_gather,
        "gather_row_bytes": dim * 4,
        "copy_bytes_per_sec": copy_bytes / best_copy,
    }


def engine_bytes_per_step(w: Workload, rows: int) -> Dict[str, float]:
    """Bytes the engine must move per step at least, and the random rows it touches.

    Per table: the unique ids of the step (estimated for uniform ids) are gathered once (lookup) and updated once
    (Adagrad: read params + accumulator, write both), i.e. 5 random row accesses per unique id.
    """
    n = w.batch_size * w.ids_per_feature
    unique = rows * (1.0 - (1.0 - 1.0 / rows) ** n)  # expected distinct ids of n uniform draws
    row_bytes = w.dim * 4
    accesses = 5 * unique * w.num_tables
    return {"unique_ids_per_table": unique, "row_accesses_per_step": accesses, "bytes_per_step": accesses * row_bytes}


# ----------------------------------------------------------------------------------------------------------
# One line, run inside a child process.


def _synthetic_pool(w: Workload, rows: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(w.seed)
    pool = {}
    shape = (w.pool_batches, w.batch_size, w.ids_per_feature)
    for t in range(w.num_tables):
        pool["f%02d" % t] = rng.integers(0, rows, shape, dtype=np.int64)
    if w.num_dense:
        pool["dense"] = rng.standard_normal((w.pool_batches, w.batch_size, w.num_dense), dtype=np.float32)
    pool["label"] = (rng.random((w.pool_batches, w.batch_size)) < 0.3).astype(np.float32)
    return pool


def _input_fn_for(pool: Dict[str, np.ndarray]):
    import tensorflow as tf

    def input_fn(params):
        batch = next(iter(pool.values())).shape[1]
        host_batch = params["batch_size"]
        context = params.get("context")
        num_hosts = context.num_hosts if context is not None else 1
        if host_batch * num_hosts != batch:
            raise ValueError("input_fn batch {} x {} hosts != pool batch {}".format(host_batch, num_hosts, batch))
        # On a cluster (PER_HOST input) each host reads its slice of every global batch.
        host = context.current_host if context is not None else 0
        sliced = {k: v[:, host * host_batch : (host + 1) * host_batch] for k, v in pool.items()}
        features = {k: v for k, v in sliced.items() if k != "label"}
        dataset = tf.data.Dataset.from_tensor_slices((features, sliced["label"]))
        return dataset.repeat().prefetch(2)

    return input_fn


def _columns(w: Workload, rows: int):
    import tensorflow as tf

    columns = []
    for t in range(w.num_tables):
        cat = tf.feature_column.categorical_column_with_identity("f%02d" % t, rows)
        columns.append(tf.compat.v1.tpu.experimental.embedding_column(cat, w.dim, combiner=w.combiner))
    return columns


def _model_fn_for(w: Workload, columns, spec_cls, cross_shard):
    import tensorflow as tf

    def model_fn(features, labels, mode, params):
        del params
        if columns is not None:
            net = tf.compat.v1.keras.layers.DenseFeatures(columns)(features)
        else:
            net = tf.concat([features["f%02d" % t] for t in range(w.num_tables)], axis=1)
        if w.num_dense:
            net = tf.concat([net, features["dense"]], axis=1)
        for units in w.mlp[:-1]:
            net = tf.compat.v1.layers.dense(net, units, activation=tf.nn.relu)
        logits = tf.squeeze(tf.compat.v1.layers.dense(net, w.mlp[-1]), 1)
        loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
        opt = tf.compat.v1.train.AdagradOptimizer(w.learning_rate, initial_accumulator_value=0.1)
        if cross_shard is not None:
            opt = cross_shard(opt)
        train_op = opt.minimize(loss, tf.compat.v1.train.get_global_step())
        return spec_cls(mode=mode, loss=loss, train_op=train_op)

    return model_fn


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_line(
    w: Workload, line: str, rows: int, iterations_per_loop: int, model_dir: str, trace_path: Optional[str] = None
) -> Dict[str, Any]:
    """Trains one configuration and measures it (call in a fresh process for a meaningful peak RSS).

    With `trace_path`, the first run after warm-up is traced (`RunOptions.FULL_TRACE`): a Chrome timeline is
    written to `trace_path` and the result gets `op_profile` (op type -> summed microseconds, top 25).

    Returns:
      `{'examples_per_sec', 'steps_per_sec', 'peak_rss_bytes', 'seconds', 'measured_steps', ...}`.
    """
    cluster_shape = _cluster_shape(line)
    if cluster_shape is not None:
        with loopback_cluster.loopback_cluster(*cluster_shape) as spec:
            return _run_line(w, line, rows, iterations_per_loop, model_dir, trace_path, spec)
    return _run_line(w, line, rows, iterations_per_loop, model_dir, trace_path, None)


def _cluster_shape(line: str) -> Optional[Tuple[int, int]]:
    """`(hosts, shards per host)` of a `cluster_<H>x<S>` line, else None."""
    match = re.fullmatch(r"cluster_(\d+)x(\d+)", line)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _run_line(
    w: Workload,
    line: str,
    rows: int,
    iterations_per_loop: int,
    model_dir: str,
    trace_path: Optional[str],
    cluster_spec: Optional[Dict[str, List[str]]],
) -> Dict[str, Any]:
    import tensorflow as tf

    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    pool = _synthetic_pool(w, rows)
    input_fn = _input_fn_for(pool)
    times: List[float] = []
    traces: List[Any] = []
    cpu_times: List[float] = []
    wire_bytes: List[int] = []

    def record():
        times.append(time.perf_counter())
        cpu_times.append(time.process_time())
        if cluster_spec is not None:
            wire_bytes.append(loopback_cluster.loopback_bytes())

    class TimingHook(tf.compat.v1.train.SessionRunHook):
        def after_create_session(self, session, coord):
            record()

        def before_run(self, run_context):
            if trace_path and len(times) == warmup_runs + 1:
                return tf.compat.v1.train.SessionRunArgs(
                    None, options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
                )
            return None

        def after_run(self, run_context, run_values):
            record()
            if trace_path and len(times) == warmup_runs + 2:
                traces.append(run_values.run_metadata)

    common = dict(
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=10**9,
        save_summary_steps=10**9,
        model_dir=model_dir,
    )
    if w.save_checkpoints:
        common["save_checkpoints_steps"] = 10**9  # At session start and after the last step only.
    if line == "upstream":
        up = tf.compat.v1.estimator.tpu
        spec = up.experimental.EmbeddingConfigSpec(
            feature_columns=_columns(w, rows),
            optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(w.learning_rate, 0.1),
        )
        estimator = up.TPUEstimator(
            model_fn=_model_fn_for(w, spec.feature_columns, up.TPUEstimatorSpec, None),
            config=up.RunConfig(**common),
            use_tpu=False,
            train_batch_size=w.batch_size,
            embedding_config_spec=spec,
        )
        steps_per_run = 1
    else:
        import tpu_estimator as te
        from tpu_estimator import experimental as tex

        shards = 2 if line.endswith("2shards") else 1
        if cluster_spec is not None:
            hosts, per_host = _cluster_shape(line)
            shards = hosts * per_host
            common["cluster"] = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster_spec))
        params = tex.AdagradParameters(w.learning_rate, initial_accumulator=0.1)
        if line.startswith("ours_dict"):
            columns = None
            spec = tex.EmbeddingConfigSpec(
                table_to_config_dict={
                    "t%02d" % t: tex.TableConfig(rows, w.dim, combiner=w.combiner) for t in range(w.num_tables)
                },
                feature_to_config_dict={"f%02d" % t: tex.FeatureConfig("t%02d" % t) for t in range(w.num_tables)},
                optimization_parameters=params,
            )
        else:
            columns = _columns(w, rows)
            spec = tex.EmbeddingConfigSpec(feature_columns=columns, optimization_parameters=params)
        config = te.RunConfig(
            tpu_config=te.TPUConfig(iterations_per_loop=iterations_per_loop, num_shards=shards), **common
        )
        estimator = te.TPUEstimator(
            model_fn=_model_fn_for(w, columns, te.TPUEstimatorSpec, te.CrossShardOptimizer),
            config=config,
            use_tpu=True,
            train_batch_size=w.batch_size,
            embedding_config_spec=spec,
        )
        steps_per_run = iterations_per_loop
    warmup_runs = max(1, -(-w.warmup_steps // steps_per_run))
    measured_runs = max(1, -(-w.steps // steps_per_run)) + (1 if trace_path else 0)
    total_steps = (warmup_runs + measured_runs) * steps_per_run
    start = time.perf_counter()
    estimator.train(input_fn, max_steps=total_steps, hooks=[TimingHook()])
    wall = time.perf_counter() - start
    runs = len(times) - 1
    if runs < warmup_runs + measured_runs:
        raise RuntimeError("{}: expected {} runs, timed {}".format(line, warmup_runs + measured_runs, runs))
    start_index = warmup_runs + (1 if trace_path else 0)  # The traced run is not measured.
    elapsed = times[-1] - times[start_index]
    measured_steps = (runs - start_index) * steps_per_run
    out = {
        "examples_per_sec": measured_steps * w.batch_size / elapsed,
        "steps_per_sec": measured_steps / elapsed,
        "measured_steps": measured_steps,
        "seconds_measured": elapsed,
        "seconds_total": wall,
        "seconds_to_first_step": times[0] - start,
        "peak_rss_bytes": _peak_rss_bytes(),
        # Process CPU seconds (all threads) per wall second over the measured steps, divided by the core count.
        "cpu_utilisation": (cpu_times[-1] - cpu_times[start_index]) / elapsed / (os.cpu_count() or 1),
    }
    if wire_bytes:
        out["loopback_bytes_per_step"] = (wire_bytes[-1] - wire_bytes[start_index]) / measured_steps
    if trace_path and traces:
        out["op_profile"] = _write_trace(traces[0], trace_path)
    return out


def _write_trace(run_metadata, path: str) -> Dict[str, float]:
    """Writes a Chrome timeline and returns `{op type: summed microseconds}` (top 25 by time)."""
    from tpu_estimator import _tf_internal

    with open(path, "w") as f:
        f.write(_tf_internal.chrome_trace(run_metadata.step_stats))
    totals: Dict[str, float] = {}
    for dev in run_metadata.step_stats.dev_stats:
        for node in dev.node_stats:
            label = node.timeline_label or node.node_name
            op = label.split("(")[0].split(" = ")[-1].strip() if " = " in label else node.node_name.split(":")[0]
            totals[op] = totals.get(op, 0.0) + (node.all_end_rel_micros or node.op_end_rel_micros)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1])[:25])


# ----------------------------------------------------------------------------------------------------------
# The parent: subprocesses, medians, reports.


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


def table_bytes(w: Workload, rows: int) -> int:
    """Bytes of all tables plus their Adagrad accumulators."""
    return 2 * w.num_tables * rows * w.dim * 4


def run_line_in_subprocess(w: Workload, line: str, rows: int, ipl: int, timeout: float = 7200) -> Dict[str, Any]:
    """Runs `run_line` in a fresh Python process; returns its result or `{'error': ...}`."""
    with tempfile.TemporaryDirectory(prefix="bench_") as tmp:
        request = {
            "workload": dataclasses.asdict(w),
            "line": line,
            "rows": rows,
            "ipl": ipl,
            "model_dir": os.path.join(tmp, "model"),
            "output": os.path.join(tmp, "result.json"),
        }
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        cmd = [sys.executable, "-m", "tpu_estimator.app.benchmark", json.dumps(request)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0 or not os.path.exists(request["output"]):
            tail = (proc.stderr or "").strip().splitlines()[-15:]
            return {"error": "exit code {}: {}".format(proc.returncode, "\n".join(tail))}
        with open(request["output"]) as f:
            return json.load(f)


def _median_of(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    good = [r for r in results if "error" not in r]
    if not good:
        return {"error": results[-1].get("error", "no result"), "runs": results}
    out = {k: statistics.median(r[k] for r in good) for k in good[0] if isinstance(good[0][k], (int, float))}
    out["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in good)
    out["examples_per_sec_runs"] = [r["examples_per_sec"] for r in good]
    if len(good) < len(results):
        out["failed_runs"] = [r["error"] for r in results if "error" in r]
    return out


def run_workload(
    w: Workload, runs: int = 3, steps: Optional[int] = None, log=print, machine: Optional[Dict[str, float]] = None
) -> Dict[str, Any]:
    """Runs every line of a workload `runs` times (each run its own subprocess; lines interleaved per run)."""
    if steps:
        w = dataclasses.replace(w, steps=int(steps))
    points = []
    for rows in w.row_values:
        for line in w.lines:
            ipls = w.ipl_values if line != "upstream" else [1]
            for ipl in ipls:
                points.append((rows, line, ipl))
    collected: Dict[tuple, List[Dict[str, Any]]] = {p: [] for p in points}
    notes: List[str] = []
    for run in range(runs):
        for point in points:
            rows, line, ipl = point
            # Upstream's CPU path peaks at ~2.4x its table+slot bytes (see BENCHMARKS.md).
            need = table_bytes(w, rows) * (2.6 if line == "upstream" else w.min_free_bytes_factor)
            if need > _available_bytes():
                note = "{} rows={} skipped: needs ~{:.1f} GB, {:.1f} GB available".format(
                    line, rows, need / 1e9, _available_bytes() / 1e9
                )
                collected[point].append({"error": note})
                if note not in notes:
                    notes.append(note)
                continue
            result = run_line_in_subprocess(w, line, rows, ipl)
            collected[point].append(result)
            if "error" in result:
                log(
                    "  [{} run {}] {} rows={} ipl={}: ERROR {}".format(
                        w.name, run + 1, line, rows, ipl, result["error"]
                    )
                )
            else:
                log(
                    "  [{} run {}] {} rows={} ipl={}: {:.0f} examples/s, peak RSS {:.2f} GB".format(
                        w.name, run + 1, line, rows, ipl, result["examples_per_sec"], result["peak_rss_bytes"] / 1e9
                    )
                )
    lines = []
    for point in points:
        rows, line, ipl = point
        entry = {"rows": rows, "line": line, "iterations_per_loop": ipl, "table_and_slot_bytes": table_bytes(w, rows)}
        entry.update(_median_of(collected[point]))
        lines.append(entry)
    out = {"workload": dataclasses.asdict(w), "lines": lines, "notes": notes}
    out["ratios"] = _ratios(lines)
    if machine:
        out["machine_fraction"] = _machine_fraction(w, lines, machine)
    return out


def _ratios(lines: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """examples/sec of each 'ours' line divided by upstream's at the same rows."""
    upstream = {l["rows"]: l["examples_per_sec"] for l in lines if l["line"] == "upstream" and "examples_per_sec" in l}
    out = []
    for l in lines:
        if l["line"] != "upstream" and "examples_per_sec" in l and l["rows"] in upstream:
            out.append(
                {
                    "rows": l["rows"],
                    "line": l["line"],
                    "iterations_per_loop": l["iterations_per_loop"],
                    "ours_over_upstream": l["examples_per_sec"] / upstream[l["rows"]],
                }
            )
    return out


def _machine_fraction(w: Workload, lines: List[Dict[str, Any]], machine: Dict[str, float]) -> List[Dict[str, Any]]:
    out = []
    for l in lines:
        if "steps_per_sec" not in l:
            continue
        need = engine_bytes_per_step(w, l["rows"])
        rows_per_sec = need["row_accesses_per_step"] * l["steps_per_sec"]
        # Row accesses at the NumPy gather rate of rows of this width (scaled by row bytes from the dim-64 probe).
        gather_rows_per_sec = machine["gather_bytes_per_sec"] / (w.dim * 4)
        out.append(
            {
                "rows": l["rows"],
                "line": l["line"],
                "iterations_per_loop": l["iterations_per_loop"],
                "row_accesses_per_sec": rows_per_sec,
                "fraction_of_gather_rate": rows_per_sec / gather_rows_per_sec,
                "fraction_of_copy_bandwidth": need["bytes_per_step"]
                * l["steps_per_sec"]
                / machine["copy_bytes_per_sec"],
            }
        )
    return out


def _machine_fraction_line(m: Dict[str, Any]) -> str:
    """One line's share of the machine (an entry of `machine_fraction`), as both reports say it."""
    return (
        "{} rows={:,} ipl={}: {:.1f}M random row accesses/s = {:.0%} of the NumPy gather rate, {:.0%} of the copy "
        "bandwidth".format(
            m["line"],
            m["rows"],
            m["iterations_per_loop"],
            m["row_accesses_per_sec"] / 1e6,
            m["fraction_of_gather_rate"],
            m["fraction_of_copy_bandwidth"],
        )
    )


def _ratio_texts(result: Dict[str, Any]) -> Dict[tuple, str]:
    """`{(rows, line, iterations_per_loop): "1.50x"}`: one workload's ours / upstream ratios as the reports say them
    (a line without one: "-", see `_ratio_text`)."""
    return {
        (r["rows"], r["line"], r["iterations_per_loop"]): "{:.2f}x".format(r["ours_over_upstream"])
        for r in result["ratios"]
        if r["ours_over_upstream"] is not None
    }


def _ratio_text(ratios: Dict[tuple, str], line: Dict[str, Any]) -> str:
    return ratios.get((line["rows"], line["line"], line["iterations_per_loop"]), "-")


def format_report(result: Dict[str, Any]) -> str:
    """A plain-text table of one workload's result."""
    w = result["workload"]
    rows_out = [
        "Workload {} -- {}".format(w["name"], w.get("description", "")),
        "{:<18} {:>10} {:>5} {:>14} {:>8} {:>12} {:>9}".format(
            "line", "rows", "ipl", "examples/sec", "ratio", "peak RSS GB", "x tables"
        ),
    ]
    ratios = _ratio_texts(result)
    for l in result["lines"]:
        if "error" in l:
            rows_out.append(
                "{:<18} {:>10} {:>5} ERROR {}".format(
                    l["line"], l["rows"], l["iterations_per_loop"], l["error"].splitlines()[-1][:120]
                )
            )
            continue
        rows_out.append(
            "{:<18} {:>10} {:>5} {:>14.0f} {:>8} {:>12.2f} {:>9.2f}".format(
                l["line"],
                l["rows"],
                l["iterations_per_loop"],
                l["examples_per_sec"],
                _ratio_text(ratios, l),
                l["peak_rss_bytes"] / 1e9,
                l["peak_rss_bytes"] / l["table_and_slot_bytes"],
            )
        )
    for m in result.get("machine_fraction", []):
        rows_out.append("  " + _machine_fraction_line(m))
    for note in result.get("notes", []):
        rows_out.append("  note: " + note)
    return "\n".join(rows_out)


def run(
    config: Optional[str] = None,
    workload: str = "all",
    runs: int = 3,
    steps: Optional[int] = None,
    output_json: Optional[str] = None,
    config_dir: str = DEFAULT_CONFIG_DIR,
    measure_machine: bool = True,
    log=print,
) -> Dict[str, Any]:
    """Runs the selected workloads and returns (and optionally writes) the JSON-able results.

    Args:
      config: one workload YAML file; overrides `workload`.
      workload: 'A', 'B', 'C', 'D', 'M' or 'all' (every file `configs/bench/<letter>_*.yaml` of the letter).
      runs: runs per line (medians reported).
      steps: measured steps per run (overrides the config).
      output_json: path to write the results to.
      measure_machine: also measure the NumPy gather rate and copy bandwidth.
    """
    import platform

    machine = machine_rates() if measure_machine else None
    results = {"machine": {"nproc": os.cpu_count(), "platform": platform.platform(), "rates": machine}, "workloads": {}}
    if machine:
        log(
            "Machine: NumPy random row gather {:.1f}M rows/s of 256 B ({:.2f} GB/s), copy {:.2f} GB/s".format(
                machine["gather_rows_per_sec"] / 1e6,
                machine["gather_bytes_per_sec"] / 1e9,
                machine["copy_bytes_per_sec"] / 1e9,
            )
        )
    for path in workload_paths(config, workload, config_dir):
        w = load_workload(path)
        log("Running workload {} ({})".format(w.name, path))
        result = run_workload(w, runs=runs, steps=steps, log=log, machine=machine)
        results["workloads"][w.name] = result
        log(format_report(result))
        if output_json:
            with open(output_json, "w") as f:
                json.dump(results, f, indent=1)
    return results


def markdown_tables(results: Dict[str, Any]) -> str:
    """Markdown tables of every workload in `results` (medians; ratio = ours / upstream at the same rows)."""
    out = []
    for name, result in results.get("workloads", {}).items():
        w = result["workload"]
        out.append("**{}**: {}\n".format(name, w.get("description", "")))
        out.append(
            "| line | rows | ipl | examples/sec (median) | runs | ours/upstream | steps/sec | peak RSS GB | "
            "peak / table+slot bytes | CPU use |"
        )
        out.append("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
        ratios = _ratio_texts(result)
        for l in result["lines"]:
            if "examples_per_sec" not in l:
                out.append(
                    "| {} | {} | {} | not run: {} | | | | | | |".format(
                        l["line"], l["rows"], l["iterations_per_loop"], l.get("error", "").splitlines()[-1][:100]
                    )
                )
                continue
            out.append(
                "| {} | {:,} | {} | {:,.0f} | {} | {} | {:.1f} | {:.2f} | {:.2f} | {:.0%} |".format(
                    l["line"],
                    l["rows"],
                    l["iterations_per_loop"],
                    l["examples_per_sec"],
                    " / ".join("{:,.0f}".format(x) for x in l["examples_per_sec_runs"]),
                    _ratio_text(ratios, l),
                    l["steps_per_sec"],
                    l["peak_rss_bytes"] / 1e9,
                    l["peak_rss_bytes"] / l["table_and_slot_bytes"],
                    l.get("cpu_utilisation", float("nan")),
                )
            )
        for m in result.get("machine_fraction", []):
            if m["line"] == "upstream":
                continue
            out.append("")
            out.append("- " + _machine_fraction_line(m))
        for note in result.get("notes", []):
            out.append("- note: " + note)
        out.append("")
    return "\n".join(out)


def plot_vocabulary_sweep(results: Dict[str, Any], path: str, workloads: Sequence[str] = ("C", "C2")) -> bool:
    """Plots examples/sec against rows (log x) for the sweep workloads; returns False without matplotlib/data."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return False
    present = [w for w in workloads if w in results.get("workloads", {})]
    if not present:
        return False
    fig, axes = plt.subplots(1, len(present), figsize=(6 * len(present), 4.2), squeeze=False)
    for ax, name in zip(axes[0], present):
        result = results["workloads"][name]
        by_line: Dict[str, List[tuple]] = {}
        for l in result["lines"]:
            if "examples_per_sec" in l:
                by_line.setdefault(l["line"], []).append((l["rows"], l["examples_per_sec"]))
        for line, points in sorted(by_line.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=line)
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("rows per table")
        ax.set_ylabel("examples/sec (median)")
        ax.set_title("{}: {}".format(name, result["workload"].get("description", ""))[:70], fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _child_main(request_json: str) -> None:
    request = json.loads(request_json)
    w = Workload(**request["workload"])
    result = run_line(w, request["line"], request["rows"], request["ipl"], request["model_dir"])
    with open(request["output"], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    _child_main(sys.argv[1])
