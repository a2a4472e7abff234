"""Setup benchmark: how long `train()` takes to reach its first step, for a BERT-base-sized dense model.

A dense transformer encoder (BERT-base by default: 12 layers, hidden 768, 12 heads, intermediate 3072, a 30,522-word
vocabulary, no dropout), a classifier on the first token, Adam; synthetic token ids from `tf.data`. Each line runs
`train(max_steps=1)` from an empty `model_dir` in a fresh process:

* `ours`: `tpu_estimator.TPUEstimator(use_tpu=True)` on 1, 2, 4 shards (`iterations_per_loop=1`);
* `upstream`: `tf.compat.v1.estimator.tpu.TPUEstimator(use_tpu=False)` (tensorflow-estimator 2.15).

Each child reports the time from the `train()` call to the start of the first step's `Session.run` (graph,
`model_fn` on every replica, Scaffold, session creation, variable initialisation, the initial checkpoint), the
seconds spent inside `model_fn` and how often it was called, the first step itself, and the sum of absolute values
of the model's weights after the step (with explicit initializer seeds, every line trains the same weights from
the same initial values on the same global batch, so the sums agree: a check that the lines compare like with like).
Rounds run the lines in turn; ratios are taken within a round.

Programs are YAML files in `configs/bench/S_*.yaml` (keys = `SetupProgram` fields):
`python scripts/benchmark_setup.py --program=S_bert_base --runs=3`.
"""

import contextlib
import dataclasses
import json
import math
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from tpu_estimator.app import program_benchmark
from tpu_estimator.specs.batch_size import check_divisible

PROGRAM_DIR = program_benchmark.PROGRAM_DIR


@dataclasses.dataclass
class SetupProgram:
    """A dense transformer program whose setup is measured.

    Attributes:
      name: the program's name (its file is `configs/bench/<name>.yaml`).
      description: one line for reports.
      layers: transformer layers.
      hidden: hidden width.
      heads: attention heads (must divide `hidden`).
      intermediate: feed-forward width.
      vocab: word-embedding rows.
      seq_length: tokens per example.
      batch_size: global batch size (divisible by every entry of `shards`).
      shards: ours' shard counts, one line each.
      learning_rate: Adam's.
      seed: graph seed (initializers also get explicit op seeds) and data seed.
    """

    name: str
    description: str = ""
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    intermediate: int = 3072
    vocab: int = 30522
    seq_length: int = 128
    batch_size: int = 8
    shards: List[int] = dataclasses.field(default_factory=lambda: [1, 2, 4])
    learning_rate: float = 1e-4
    seed: int = 0

    def __post_init__(self):
        if self.hidden % self.heads:
            raise ValueError(f"program {self.name}: heads ({self.heads}) must divide hidden ({self.hidden})")
        for shards in self.shards:
            if shards < 1:
                raise ValueError(f"program {self.name}: shards {self.shards} must all be positive")
            check_divisible(self.batch_size, f"program {self.name}: batch_size", shards, "shards")


def load_setup_program(name_or_path: str, program_dir: str = PROGRAM_DIR) -> SetupProgram:
    """A setup program from a YAML path or from its name in `configs/bench/`.

    Raises:
      ValueError: no such file, unknown keys, or invalid values.
    """
    return program_benchmark.load_yaml_program(SetupProgram, "S_", "setup program", name_or_path, program_dir)


# ----------------------------------------------------------------------------------------------------------
# The program, run inside a child process.


def input_fn_of(p: SetupProgram) -> Callable:
    """The program's `input_fn`: token ids and binary labels, generated per batch from stateless seeds.

    Args:
      p: the setup program.

    Returns:
      An `input_fn(params)` returning an endless `Dataset` of `({"input_ids": [batch, seq]}, labels)`.
    """
    import tensorflow as tf

    def input_fn(params):
        batch_size = params["batch_size"]

        def make_batch(index):
            seed = tf.stack([tf.constant(p.seed, tf.int64), index])
            ids = tf.random.stateless_uniform([batch_size, p.seq_length], seed, 0, p.vocab, tf.int32)
            labels = tf.random.stateless_uniform([batch_size], seed + 1, 0, 2, tf.int32)
            return {"input_ids": ids}, labels

        return tf.data.Dataset.range(2**62).map(make_batch).prefetch(2)

    return input_fn


def encoder(p: SetupProgram, input_ids):
    """Builds the program's transformer encoder; every initializer has its own op seed.

    Args:
      p: the setup program (layers, hidden size, heads, vocabulary, sequence length).
      input_ids: `[batch, seq_length]` token ids.

    Returns:
      The pooled first-token output, `[batch, hidden]`.
    """
    import tensorflow as tf

    seeds = iter(range(1, 10**6))

    def weight(name, shape):
        init = tf.compat.v1.truncated_normal_initializer(stddev=0.02, seed=next(seeds))
        return tf.compat.v1.get_variable(name, shape, initializer=init)

    def dense(x, units, name, activation=None):
        with tf.compat.v1.variable_scope(name):
            kernel = weight("kernel", [x.shape[-1], units])
            bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
            y = tf.matmul(x, kernel) + bias
        return activation(y) if activation else y

    def layer_norm(x, name):
        with tf.compat.v1.variable_scope(name):
            gamma = tf.compat.v1.get_variable("gamma", [p.hidden], initializer=tf.compat.v1.ones_initializer())
            beta = tf.compat.v1.get_variable("beta", [p.hidden], initializer=tf.compat.v1.zeros_initializer())
            mean, variance = tf.nn.moments(x, [-1], keepdims=True)
            return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta

    batch = tf.shape(input_ids)[0]
    head_size = p.hidden // p.heads
    with tf.compat.v1.variable_scope("bert"):
        words = tf.gather(weight("word_embeddings", [p.vocab, p.hidden]), input_ids)
        positions = weight("position_embeddings", [p.seq_length, p.hidden])
        x = layer_norm(words + positions, "embeddings_norm")
        x = tf.reshape(x, [-1, p.hidden])
        for index in range(p.layers):
            with tf.compat.v1.variable_scope(f"layer_{index}"):

                def heads(t):
                    return tf.transpose(tf.reshape(t, [batch, p.seq_length, p.heads, head_size]), [0, 2, 1, 3])

                q, k, v = (heads(dense(x, p.hidden, n)) for n in ("query", "key", "value"))
                scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(head_size)
                context = tf.matmul(tf.nn.softmax(scores), v)
                context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, p.hidden])
                x = layer_norm(x + dense(context, p.hidden, "attention_output"), "attention_norm")
                inner = dense(x, p.intermediate, "intermediate", activation=tf.nn.gelu)
                x = layer_norm(x + dense(inner, p.hidden, "output"), "output_norm")
        first_token = tf.reshape(x, [batch, p.seq_length, p.hidden])[:, 0]
        return dense(first_token, p.hidden, "pooler", activation=tf.tanh)


def _model_fn(p: SetupProgram, spec_cls, cross_shard, calls: Dict[str, float]):
    import tensorflow as tf

    def model_fn(features, labels, mode, params):
        del params
        start = time.perf_counter()
        logits = tf.compat.v1.layers.dense(
            encoder(p, features["input_ids"]),
            2,
            kernel_initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02, seed=0),
            name="classifier",
        )
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
        optimizer = tf.compat.v1.train.AdamOptimizer(p.learning_rate)
        if cross_shard is not None:
            optimizer = cross_shard(optimizer)
        train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
        calls["model_fn_calls"] = calls.get("model_fn_calls", 0) + 1
        calls["model_fn_seconds"] = calls.get("model_fn_seconds", 0.0) + time.perf_counter() - start
        return spec_cls(mode=mode, loss=loss, train_op=train_op)

    return model_fn


def _estimator(p: SetupProgram, implementation: str, shards: int, model_dir: str, calls: Dict[str, float]):
    import tensorflow as tf

    if implementation == "upstream":
        up = tf.compat.v1.estimator.tpu
        return up.TPUEstimator(
            model_fn=_model_fn(p, up.TPUEstimatorSpec, None, calls),
            config=up.RunConfig(model_dir=model_dir, tf_random_seed=p.seed),
            use_tpu=False,
            train_batch_size=p.batch_size,
        )
    import tpu_estimator as te

    return te.TPUEstimator(
        model_fn=_model_fn(p, te.TPUEstimatorSpec, te.CrossShardOptimizer, calls),
        config=te.RunConfig(
            model_dir=model_dir,
            tf_random_seed=p.seed,
            tpu_config=te.TPUConfig(iterations_per_loop=1, num_shards=shards),
        ),
        use_tpu=True,
        train_batch_size=p.batch_size,
    )


@contextlib.contextmanager
def _timed_phases(phases: Dict[str, float], implementation: str):
    """Within the block, adds the seconds spent in each of TensorFlow's setup functions to `phases` (by name)."""
    import tensorflow as tf

    hooks = tf.compat.v1.train
    timed = [
        (hooks.Scaffold, "finalize", "Scaffold.finalize"),
        (hooks.SessionManager, "prepare_session", "session: create, initialise or restore"),
        (hooks.CheckpointSaverHook, "after_create_session", "initial checkpoint and graph.pbtxt"),
        (hooks.Saver, "save", "Saver.save, all calls"),
    ]
    if implementation == "ours":
        from tpu_estimator.estimator_core import checkpoint_saver

        timed.append((checkpoint_saver.CheckpointSaverHook, "after_create_session", timed[2][2]))
    with timed_calls(phases, timed):
        yield


@contextlib.contextmanager
def timed_calls(seconds: Dict[str, float], timed: List[Tuple[Any, str, str]]):
    """Within the block, adds the wall time of every call of `owner.name` to `seconds[label]`.

    Args:
      seconds: label -> seconds, added to.
      timed: `(owner, attribute name, label)` per function (a class's method or a module's function); several may
        share a label. The originals are put back when the block ends.
    """
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in timed]
    for (owner, name, label), (_, _, function) in zip(timed, originals):

        def wrapper(*args, _function=function, _label=label, **kwargs):
            start = time.perf_counter()
            try:
                return _function(*args, **kwargs)
            finally:
                seconds[_label] = seconds.get(_label, 0.0) + time.perf_counter() - start

        setattr(owner, name, wrapper)
    try:
        yield
    finally:
        for owner, name, function in reversed(originals):
            setattr(owner, name, function)


def run_setup(p: SetupProgram, implementation: str, shards: int, model_dir: str) -> Dict[str, Any]:
    """`train(max_steps=1)` from an empty `model_dir`: its phases in seconds and the trained weights' sum."""
    start = time.perf_counter()
    import numpy as np
    import tensorflow as tf

    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    if implementation == "ours":
        import tpu_estimator  # noqa: F401 (its import is part of the program)
    imported = time.perf_counter()
    calls: Dict[str, float] = {}
    marks: Dict[str, float] = {}

    class Marks(tf.compat.v1.train.SessionRunHook):
        def after_create_session(self, session, coord):
            marks.setdefault("session", time.perf_counter())

        def before_run(self, run_context):
            marks.setdefault("first_step_start", time.perf_counter())

        def after_run(self, run_context, run_values):
            marks.setdefault("first_step_end", time.perf_counter())

    estimator = _estimator(p, implementation, shards, model_dir, calls)
    phases: Dict[str, float] = {}
    with _timed_phases(phases, implementation):
        begin = time.perf_counter()
        estimator.train(input_fn_of(p), max_steps=1, hooks=[Marks()])
        end = time.perf_counter()
    weights = [n for n in estimator.get_variable_names() if n.startswith(("bert/", "classifier/")) and "/Adam" not in n]
    weights_abs_sum = float(sum(np.abs(estimator.get_variable_value(n)).astype(np.float64).sum() for n in weights))
    return {
        "seconds_import": imported - start,
        "seconds_train": end - begin,
        "seconds_to_session": marks["session"] - begin,
        "seconds_to_first_step": marks["first_step_start"] - begin,
        "seconds_first_step": marks["first_step_end"] - marks["first_step_start"],
        "model_fn_calls": int(calls.get("model_fn_calls", 0)),
        "model_fn_seconds": calls.get("model_fn_seconds", 0.0),
        "phases": phases,
        "weights": len(weights),
        "weights_abs_sum": weights_abs_sum,
    }


def _child_main(request_json: str) -> None:
    request = json.loads(request_json)
    p = SetupProgram(**request["program"])
    result = run_setup(p, request["implementation"], request["shards"], request["model_dir"])
    with open(request["output"], "w") as f:
        json.dump(result, f)


# ----------------------------------------------------------------------------------------------------------
# The parent: lines in turn, per-round ratios.


def lines_of(p: SetupProgram) -> List[Tuple[str, int]]:
    """The measured lines, in the order each round runs them: ours on each shard count, upstream after ours' 1."""
    lines = [("ours", p.shards[0]), ("upstream", 1)]
    return lines + [("ours", shards) for shards in p.shards[1:]]


def line_name(line: Tuple[str, int]) -> str:
    implementation, shards = line
    return "upstream, CPU path" if implementation == "upstream" else f"ours, {shards} shard{'s' * (shards > 1)}"


def run_line(
    p: SetupProgram, line: Tuple[str, int], interpreter: program_benchmark.Interpreter, timeout: float = 3600
) -> Dict[str, Any]:
    """One line in a fresh process: its result plus wall and CPU seconds, or `{'error': ...}`."""
    implementation, shards = line
    request = {"program": dataclasses.asdict(p), "implementation": implementation, "shards": shards}
    return program_benchmark.run_module_child(__name__, request, interpreter, timeout)


def compare(
    p: SetupProgram,
    runs: int,
    interpreters: Dict[str, program_benchmark.Interpreter],
    log: Callable[[str], None] = print,
) -> Dict[str, Any]:
    """Runs every line `runs` times in turn.

    Returns:
      `{'program', 'rounds': [{line name: result}], 'ratios': {...}}`: per round, upstream's time to the first step
      over ours' on the first shard count, and each shard count's time over that of the first.
    """
    rounds: List[Dict[str, Dict[str, Any]]] = []
    for r in range(runs):
        round_results = {}
        for line in lines_of(p):
            result = run_line(p, line, interpreters[line[0]])
            round_results[line_name(line)] = result
            if "error" in result:
                log(f"round {r + 1}/{runs} {line_name(line)}: ERROR {result['error']}")
            else:
                log(
                    f"round {r + 1}/{runs} {line_name(line)}: {result['seconds_to_first_step']:.1f} s to the first "
                    f"step, model_fn {result['model_fn_calls']} x ({result['model_fn_seconds']:.1f} s)"
                )
        rounds.append(round_results)
    first, upstream = line_name(lines_of(p)[0]), line_name(("upstream", 1))

    def ratio(numerator: str, denominator: str) -> Optional[Dict[str, Any]]:
        return program_benchmark.summary(
            [
                rr[numerator]["seconds_to_first_step"] / rr[denominator]["seconds_to_first_step"]
                for rr in rounds
                if "error" not in rr[numerator] and "error" not in rr[denominator]
            ]
        )

    ratios = {upstream + "_over_" + first: ratio(upstream, first)}
    for line in lines_of(p)[2:]:
        ratios[line_name(line) + "_over_" + first] = ratio(line_name(line), first)
    return {"program": dataclasses.asdict(p), "rounds": rounds, "ratios": ratios}


def markdown(result: Dict[str, Any]) -> str:
    """The report: per line, medians (ranges) of each phase; the per-round ratios."""
    p = SetupProgram(**result["program"])
    rounds = result["rounds"]
    figures = [
        ("`train()` to the first step (s)", "seconds_to_first_step", "{:.2f}"),
        ("`train()` to the session (s)", "seconds_to_session", "{:.2f}"),
        ("in `model_fn`, all calls (s)", "model_fn_seconds", "{:.2f}"),
        ("`model_fn` calls", "model_fn_calls", "{:.0f}"),
        ("the first step (s)", "seconds_first_step", "{:.2f}"),
        ("whole process (s)", "wall_seconds", "{:.1f}"),
        ("weights' sum of absolute values after the step", "weights_abs_sum", "{:.6g}"),
    ]
    names = [line_name(line) for line in lines_of(p)]
    lines = [
        f"Setup program `{p.name}`: {p.description} ({len(rounds)} rounds, lines in turn)",
        "",
        "| figure: median (range) | " + " | ".join(names) + " |",
        "|---" + "|---:" * len(names) + "|",
    ]
    for label, key, fmt in figures:
        cells = [
            program_benchmark.cell(
                program_benchmark.summary([rr[n].get(key) for rr in rounds if "error" not in rr[n]]), fmt
            )
            for n in names
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for phase in sorted({k for rr in rounds for n in names for k in rr[n].get("phases", {})}):
        cells = [
            program_benchmark.cell(
                program_benchmark.summary([rr[n]["phases"].get(phase) for rr in rounds if "error" not in rr[n]]),
                "{:.2f}",
            )
            for n in names
        ]
        lines.append(f"| {phase} (s) | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Per-round ratios of the time to the first step: "
        + "; ".join(
            f"{k.replace('_over_', ' / ')} {program_benchmark.cell(v, '{:.2f}')}" for k, v in result["ratios"].items()
        )
        + "."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    _child_main(sys.argv[1])
