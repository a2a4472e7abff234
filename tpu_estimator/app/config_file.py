"""YAML run configurations: typed, validated dataclasses with defaults for every field.

A file is read with `yaml.safe_load` and mapped onto `Config`; a minimal (even empty) file gives the defaults.
Every problem is a `ValueError` naming the full key path::

    train.batch_size: expected int, got str 'abc'
    model.bottom_mlpp: unknown key (allowed: name, embedding_dim, bottom_mlp, top_mlp, interaction)

Overrides use the same path syntax and yaml values: `apply_overrides(config, ['train.batch_size=2048'])`.

Types are strict (an int field rejects `2.0`, `'2'` and `true`); float fields accept ints, and also strings like
`1e-3` that YAML 1.2 reads as floats but PyYAML (YAML 1.1) reads as strings.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import reprlib
import typing
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union

import yaml

from tpu_estimator.app.data import schema as _criteo
from tpu_estimator.specs.batch_size import check_divisible

DENSE_OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam", "rmsprop", "ftrl")

# Arguments of the embedding optimizers (names as in upstream's `*Parameters` classes) and their types.
_COMMON_EMBEDDING_ARGS = {
    "use_gradient_accumulation": bool,
    "clip_weight_min": float,
    "clip_weight_max": float,
    "weight_decay_factor": float,
    "multiply_weight_decay_factor_by_learning_rate": bool,
    "clip_gradient_min": float,
    "clip_gradient_max": float,
}
EMBEDDING_OPTIMIZER_ARGS: Dict[str, Dict[str, type]] = {
    "sgd": {},
    "adagrad": {"initial_accumulator": float},
    "adagrad_momentum": {"momentum": float, "use_nesterov": bool, "exponent": float, "beta2": float, "epsilon": float},
    "adam": {"beta1": float, "beta2": float, "epsilon": float, "lazy_adam": bool, "sum_inside_sqrt": bool},
    "ftrl": {
        "learning_rate_power": float,
        "initial_accumulator_value": float,
        "l1_regularization_strength": float,
        "l2_regularization_strength": float,
        "multiply_linear_by_learning_rate": bool,
        "beta": float,
        "allow_zero_accumulator": bool,
    },
}
for _args in EMBEDDING_OPTIMIZER_ARGS.values():
    _args.update(_COMMON_EMBEDDING_ARGS)
DENSE_OPTIMIZER_ARGS: Dict[str, Dict[str, type]] = {
    "sgd": {},
    "momentum": {"momentum": float, "use_nesterov": bool},
    "adagrad": {"initial_accumulator_value": float},
    "adam": {"beta1": float, "beta2": float, "epsilon": float},
    "rmsprop": {"decay": float, "momentum": float, "epsilon": float, "centered": bool},
    "ftrl": {
        "learning_rate_power": float,
        "initial_accumulator_value": float,
        "l1_regularization_strength": float,
        "l2_regularization_strength": float,
    },
}

Scalar = Union[bool, int, float, str]
InputModeName = Union[bool, Literal["PER_SHARD_V1", "PER_HOST_V1", "PER_HOST_V2", "BROADCAST"]]


@dataclasses.dataclass
class ModelConfig:
    """The built-in model.

    Attributes:
      name: 'dlrm' or 'wide_deep'.
      embedding_dim: default dimension of every categorical feature's embedding.
      bottom_mlp: DLRM: hidden layers applied to the dense features (the last must equal `embedding_dim` for the
        'dot' interaction); wide_deep: unused.
      top_mlp: hidden layers after the interaction (DLRM) or of the deep tower (wide_deep); the 1-unit logit layer
        is added after them.
      interaction: DLRM feature interaction: 'dot' (pairwise dot products) or 'cat' (concatenation).
    """

    name: Literal["dlrm", "wide_deep"] = "dlrm"
    embedding_dim: int = 16
    bottom_mlp: List[int] = dataclasses.field(default_factory=lambda: [64, 16])
    top_mlp: List[int] = dataclasses.field(default_factory=lambda: [64, 32])
    interaction: Literal["dot", "cat"] = "dot"


@dataclasses.dataclass
class DataConfig:
    """Where examples come from (see `tpu_estimator.app.data`).

    Attributes:
      source: 'synthetic' (generated), 'tsv' (Criteo text files) or 'tfrecord' (`tf.train.Example` files).
      train_paths: files or glob patterns of training data (tsv/tfrecord).
      eval_paths: files or glob patterns of evaluation data (tsv/tfrecord; default: `train_paths`).
      num_examples: synthetic training examples (None = endless stream).
      eval_num_examples: synthetic evaluation examples (drawn after the training ones).
      seed: synthetic data seed (also the shuffle seed).
      vocab_sizes: hash buckets for the 26 categorical features; default `criteo_cardinalities(max_vocab)`.
      max_vocab: cap on the Criteo cardinalities (used when `vocab_sizes` is not given).
      skip_malformed: skip malformed TSV lines instead of failing.
      shuffle: shuffle training files and examples.
      shuffle_buffer_size: examples in the shuffle buffer.
      compression: compression of tsv/tfrecord files: '', 'GZIP' or 'ZLIB'.
    """

    source: Literal["synthetic", "tsv", "tfrecord"] = "synthetic"
    train_paths: List[str] = dataclasses.field(default_factory=list)
    eval_paths: List[str] = dataclasses.field(default_factory=list)
    num_examples: Optional[int] = None
    eval_num_examples: int = 10000
    seed: int = 0
    vocab_sizes: Optional[List[int]] = None
    max_vocab: Optional[int] = 100000
    skip_malformed: bool = False
    shuffle: bool = True
    shuffle_buffer_size: int = 10000
    compression: Literal["", "GZIP", "ZLIB"] = ""

    def resolved_vocab_sizes(self) -> List[int]:
        """The 26 vocabulary sizes: `vocab_sizes`, or the Criteo cardinalities capped at `max_vocab`."""
        if self.vocab_sizes is not None:
            return list(self.vocab_sizes)
        return _criteo.criteo_cardinalities(max_vocab=self.max_vocab)


@dataclasses.dataclass
class DenseOptimizerConfig:
    """The optimizer of the model's dense variables.

    Attributes:
      name: one of `DENSE_OPTIMIZERS`.
      learning_rate: learning rate.
      args: further constructor arguments, checked against `DENSE_OPTIMIZER_ARGS[name]`.
    """

    name: Literal[DENSE_OPTIMIZERS] = "adam"  # type: ignore[valid-type]
    learning_rate: float = 0.001
    args: Dict[str, Scalar] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class EmbeddingOptimizerConfig:
    """The embedding optimizer (`optimization_parameters` of `EmbeddingConfigSpec`).

    Attributes:
      name: one of `EMBEDDING_OPTIMIZER_ARGS`.
      learning_rate: learning rate.
      args: further arguments, checked against `EMBEDDING_OPTIMIZER_ARGS[name]` (e.g. adagrad
        `initial_accumulator`, adam `beta1`/`beta2`/`epsilon`/`lazy_adam`, `clip_weight_min`).
    """

    name: Literal[tuple(EMBEDDING_OPTIMIZER_ARGS)] = "adagrad"  # type: ignore[valid-type]
    learning_rate: float = 0.05
    args: Dict[str, Scalar] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class OptimizerConfig:
    """Dense and embedding optimizers."""

    dense: DenseOptimizerConfig = dataclasses.field(default_factory=DenseOptimizerConfig)
    embedding: EmbeddingOptimizerConfig = dataclasses.field(default_factory=EmbeddingOptimizerConfig)


@dataclasses.dataclass
class TableOverride:
    """Per-feature overrides of the embedding table settings (None = the default).

    Attributes:
      dim: embedding dimension.
      combiner: 'mean', 'sum' or 'sqrtn'.
      vocab_size: vocabulary size (the hash buckets of the feature).
    """

    dim: Optional[int] = None
    combiner: Optional[Literal["mean", "sum", "sqrtn"]] = None
    vocab_size: Optional[int] = None


@dataclasses.dataclass
class EmbeddingConfig:
    """Embedding tables: one per categorical feature `cat_0`..`cat_25`.

    Attributes:
      combiner: default combiner.
      tables: overrides keyed by feature name (`cat_3: {dim: 8}`).
    """

    combiner: Literal["mean", "sum", "sqrtn"] = "mean"
    tables: Dict[str, TableOverride] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class TrainConfig:
    """Training.

    Attributes:
      batch_size: global training batch size (divisible by `tpu.num_shards`).
      steps: training steps.
      eval_every_steps: evaluate every this many steps in train-and-evaluate (None = only at the end).
      save_checkpoints_steps: checkpoint every this many steps.
      log_step_count_steps: log loss and steps/sec every this many steps.
    """

    batch_size: int = 256
    steps: int = 1000
    eval_every_steps: Optional[int] = None
    save_checkpoints_steps: int = 1000
    log_step_count_steps: int = 100


@dataclasses.dataclass
class EvalConfig:
    """Evaluation.

    Attributes:
      batch_size: global evaluation batch size (divisible by `tpu.num_shards`).
      steps: evaluation steps (None = until the evaluation data ends).
    """

    batch_size: int = 256
    steps: Optional[int] = 100


@dataclasses.dataclass
class ShardingSection:
    """Shards and loops (`tpu_config.TPUConfig`).

    Attributes:
      num_shards: number of shards (devices) a step runs on.
      iterations_per_loop: steps per in-graph training loop.
      per_host_input_for_training: True/False (PER_HOST_V1/PER_SHARD_V1) or an `InputPipelineConfig` name.
      partition_strategy: embedding table partitioning across shards, 'div' or 'mod'.
    """

    num_shards: int = 1
    iterations_per_loop: int = 100
    per_host_input_for_training: InputModeName = "PER_HOST_V2"
    partition_strategy: Literal["div", "mod"] = "div"


@dataclasses.dataclass
class ExportConfig:
    """SavedModel export.

    Attributes:
      dir: export base directory (None = `{model_dir}/export`, no export when `model_dir` is None too).
      export_to_tpu: also write the `{serve, tpu}` graph.
    """

    dir: Optional[str] = None
    export_to_tpu: bool = False


@dataclasses.dataclass
class Config:
    """A whole run: `load_config('configs/dlrm_demo.yaml')`."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    embedding: EmbeddingConfig = dataclasses.field(default_factory=EmbeddingConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    tpu: ShardingSection = dataclasses.field(default_factory=ShardingSection)
    model_dir: Optional[str] = None
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)

    def table_settings(self, feature: str) -> Dict[str, Any]:
        """`{'dim', 'combiner', 'vocab_size'}` of `feature` after applying its override."""
        index = _criteo.CATEGORICAL_FEATURE_NAMES.index(feature)
        override = self.embedding.tables.get(feature, TableOverride())
        return {
            "dim": override.dim if override.dim is not None else self.model.embedding_dim,
            "combiner": override.combiner or self.embedding.combiner,
            "vocab_size": (
                override.vocab_size if override.vocab_size is not None else self.data.resolved_vocab_sizes()[index]
            ),
        }


# ----------------------------------------------------------------------------------------------------------------
# Generic typed conversion.


_YAML11_FLOAT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


# Error messages quote at most this many characters of a value.
MAX_QUOTED_CHARS = 100
# A config (or an override value) may hold at most this many values once YAML aliases are expanded.
MAX_VALUES = 10000
# Config files larger than this are refused before parsing.
MAX_FILE_BYTES = 1 << 20
# Int fields are int64 in TensorFlow.
MAX_INT = 2**63 - 1

_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = MAX_QUOTED_CHARS
_SHORT_REPR.maxlist = _SHORT_REPR.maxtuple = _SHORT_REPR.maxdict = 8
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxlong = 40


def quote(value: Any) -> str:
    """`repr(value)`, cut to at most `MAX_QUOTED_CHARS` characters (cheap even for huge or nested values)."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= MAX_QUOTED_CHARS else text[: MAX_QUOTED_CHARS - 3] + "..."


def _describe(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {quote(value)}"


def check_size(data: Any, path: str = "", limit: int = MAX_VALUES) -> None:
    """Refuses YAML data with more than `limit` values once aliases are expanded (or with a recursive alias).

    PyYAML builds an alias as a reference to the anchored object, so nested aliases ("billion laughs") load
    instantly but expand exponentially when the value is walked. Sizes are counted once per object.

    Raises:
      ValueError: naming the key path of the innermost value that is too large.
    """
    sizes: Dict[int, int] = {}
    active: set = set()

    def children(node: Any) -> List[Any]:
        if isinstance(node, Mapping):
            return [(k, v) for k, v in node.items()]
        return list(enumerate(node))

    def size(node: Any, where: str) -> int:
        if not isinstance(node, (Mapping, list, tuple)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ValueError(f"{where or '<root>'}: a YAML alias refers to itself (recursive value)")
        active.add(key)
        total = 1
        for k, child in children(node):
            total += size(child, _join(where, k) if isinstance(node, Mapping) else f"{where}[{k}]")
            if total > limit:
                break
        active.discard(key)
        sizes[key] = total
        return total

    if size(data, path) <= limit:
        return
    node, where = data, path  # descend to the innermost value that is still too large
    while True:
        for k, child in children(node):
            child_where = _join(where, k) if isinstance(node, Mapping) else f"{where}[{k}]"
            if size(child, child_where) > limit:
                node, where = child, child_where
                break
        else:
            break
    raise ValueError(
        f"{where or '<root>'}: more than {limit} values once YAML aliases are expanded; "
        "a config this large is refused (check the anchors (&) and aliases (*))"
    )


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is type(None):
        return "null"
    if origin is Union:
        args = typing.get_args(tp)
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names + (["null"] if type(None) in args else []))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, List):
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin in (dict, Dict):
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Checks `value` against type `tp` and returns the typed value; ValueError names `path`."""
    where = path or "<root>"
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {_describe(value)}")
        hints = typing.get_type_hints(tp)
        names = [f.name for f in dataclasses.fields(tp)]
        for key in value:
            if key not in names:
                raise ValueError(f"{_join(path, key)}: unknown key (allowed: {', '.join(names)})")
        kwargs = {k: _convert(v, hints[k], _join(path, k)) for k, v in value.items()}
        return tp(**kwargs)
    if origin is Union:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path)
            except ValueError as e:
                errors.append(e)
        if len(errors) == 1 and not str(errors[0]).startswith(f"{where}: expected"):
            raise errors[0]  # a problem deeper inside the value: keep its path
        for error in errors:
            if str(error).startswith(f"{where}: expected a finite"):
                raise error  # the right type, a wrong value
        raise ValueError(f"{where}: expected {_type_name(tp)}, got {_describe(value)}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if (
            isinstance(value, bool)
            or value not in choices
            or isinstance(value, (int, float)) != any(isinstance(c, (int, float)) for c in choices)
        ):
            raise ValueError(f"{where}: expected {_type_name(tp)}, got {_describe(value)}")
        return value
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected {_type_name(tp)}, got {_describe(value)}")
        (item,) = typing.get_args(tp)
        return [_convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Dict):
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {_describe(value)}")
        key_tp, value_tp = typing.get_args(tp)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{_join(path, k)}: keys must be strings, got {_describe(k)}")
            out[k] = _convert(v, value_tp, _join(path, k))
        return out
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected bool, got {_describe(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected int, got {_describe(value)}")
        if abs(value) > MAX_INT:
            raise ValueError(f"{where}: {quote(value)} is out of range (at most {MAX_INT} in absolute value)")
        return value
    if tp is float:
        if isinstance(value, str) and _YAML11_FLOAT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.2 float that PyYAML (YAML 1.1) reads as a string, e.g. 1e-3
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: expected float, got {_describe(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ValueError(f"{where}: expected a finite float, got {quote(value)}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected str, got {_describe(value)}")
        return value
    raise TypeError(f"{where}: unsupported type {tp}")  # a bug in the schema, not in the file


# ----------------------------------------------------------------------------------------------------------------
# Semantic checks (after the types are right).


# The largest batch (rows) of a run: 26 int64 ids per row make 1.7 GB at 2**23 rows, under TensorFlow's 2 GB limit
# of one tensor (a larger batch failed after the graph was built, at a 2 GB tensor proto).
MAX_BATCH_SIZE = 2**23


def _positive(value: Optional[int], path: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ValueError(f"{path}: must be positive, got {value!r}")


# Ranges of the optimizer arguments that have one: (low, high, low included, high included); None = unbounded.
_ARG_RANGES: Dict[str, tuple] = {
    "beta1": (0.0, 1.0, True, False),
    "beta2": (0.0, 1.0, True, False),
    "epsilon": (0.0, None, False, False),
    "momentum": (0.0, None, True, False),
    "decay": (0.0, 1.0, True, True),
    "initial_accumulator": (0.0, None, False, False),
    "initial_accumulator_value": (0.0, None, True, False),
    "l1_regularization_strength": (0.0, None, True, False),
    "l2_regularization_strength": (0.0, None, True, False),
    "learning_rate_power": (None, 0.0, False, True),
    "weight_decay_factor": (0.0, None, True, False),
    "exponent": (0.0, None, False, False),
}


def _range_text(low: Optional[float], high: Optional[float], low_in: bool, high_in: bool) -> str:
    if high is None:
        return f"{'>=' if low_in else '>'} {low}"
    if low is None:
        return f"{'<=' if high_in else '<'} {high}"
    return f"in {'[' if low_in else '('}{low}, {high}{']' if high_in else ')'}"


def _check_range(value: float, bounds: tuple, path: str) -> None:
    low, high, low_in, high_in = bounds
    ok = (low is None or value > low or (low_in and value == low)) and (
        high is None or value < high or (high_in and value == high)
    )
    if not ok:
        raise ValueError(f"{path}: must be {_range_text(*bounds)}, got {quote(value)}")


def _check_args(args: Dict[str, Any], allowed: Dict[str, type], name: str, path: str) -> None:
    for key, value in args.items():
        if key not in allowed:
            raise ValueError(
                f"{path}.{key}: unknown argument for optimizer {name!r} "
                f"(allowed: {', '.join(sorted(allowed)) or 'none'})"
            )
        args[key] = _convert(value, allowed[key], f"{path}.{key}")
        if key in _ARG_RANGES:
            _check_range(args[key], _ARG_RANGES[key], f"{path}.{key}")
    for low_key, high_key in (("clip_weight_min", "clip_weight_max"), ("clip_gradient_min", "clip_gradient_max")):
        if low_key in args and high_key in args and args[low_key] > args[high_key]:
            raise ValueError(f"{path}.{low_key}: {args[low_key]} is larger than {high_key} ({args[high_key]})")


def _validate(config: Config) -> Config:
    m = config.model
    _positive(m.embedding_dim, "model.embedding_dim")
    for name in ("bottom_mlp", "top_mlp"):
        for i, units in enumerate(getattr(m, name)):
            _positive(units, f"model.{name}[{i}]")
    if m.name == "dlrm" and m.interaction == "dot":
        if not m.bottom_mlp:
            raise ValueError(
                "model.bottom_mlp: dlrm with dot interaction needs a bottom MLP ending in "
                f"model.embedding_dim ({m.embedding_dim}) units"
            )
        if m.bottom_mlp[-1] != m.embedding_dim:
            raise ValueError(
                f"model.bottom_mlp: last layer ({m.bottom_mlp[-1]}) must equal model.embedding_dim "
                f"({m.embedding_dim}) for dlrm with dot interaction"
            )

    d = config.data
    if d.source != "synthetic" and not d.train_paths:
        raise ValueError(f"data.train_paths: required for data.source {d.source!r}")
    _positive(d.num_examples, "data.num_examples", allow_none=True)
    _positive(d.eval_num_examples, "data.eval_num_examples")
    _positive(d.max_vocab, "data.max_vocab", allow_none=True)
    _positive(d.shuffle_buffer_size, "data.shuffle_buffer_size")
    if d.seed < 0:
        raise ValueError(f"data.seed: must be non-negative, got {d.seed}")
    if d.vocab_sizes is not None:
        if len(d.vocab_sizes) != _criteo.NUM_CATEGORICAL_FEATURES:
            raise ValueError(
                f"data.vocab_sizes: expected {_criteo.NUM_CATEGORICAL_FEATURES} entries, got {len(d.vocab_sizes)}"
            )
        for i, v in enumerate(d.vocab_sizes):
            _positive(v, f"data.vocab_sizes[{i}]")

    for kind, allowed in (("dense", DENSE_OPTIMIZER_ARGS), ("embedding", EMBEDDING_OPTIMIZER_ARGS)):
        opt = getattr(config.optimizer, kind)
        if opt.learning_rate <= 0:
            raise ValueError(f"optimizer.{kind}.learning_rate: must be positive, got {opt.learning_rate}")
        _check_args(opt.args, allowed[opt.name], opt.name, f"optimizer.{kind}.args")

    for feature, override in config.embedding.tables.items():
        path = f"embedding.tables.{feature}"
        if feature not in _criteo.CATEGORICAL_FEATURE_NAMES:
            raise ValueError(f"{path}: unknown feature (expected cat_0 .. cat_{_criteo.NUM_CATEGORICAL_FEATURES - 1})")
        _positive(override.dim, f"{path}.dim", allow_none=True)
        _positive(override.vocab_size, f"{path}.vocab_size", allow_none=True)
        if m.name == "dlrm" and m.interaction == "dot" and override.dim is not None and override.dim != m.embedding_dim:
            raise ValueError(
                f"{path}.dim: dlrm with dot interaction needs every dim equal to model.embedding_dim "
                f"({m.embedding_dim}), got {override.dim}"
            )

    t, e, tpu = config.train, config.eval, config.tpu
    _positive(tpu.num_shards, "tpu.num_shards")
    _positive(tpu.iterations_per_loop, "tpu.iterations_per_loop")
    for path, value in (("train.batch_size", t.batch_size), ("eval.batch_size", e.batch_size)):
        _positive(value, path)
        if value > MAX_BATCH_SIZE:
            raise ValueError(
                f"{path}: at most {MAX_BATCH_SIZE} rows, got {value} (a batch's 26 categorical ids, 8 bytes each per "
                "row, must stay under TensorFlow's 2 GB limit of one tensor)"
            )
        check_divisible(value, path + ":", tpu.num_shards, "tpu.num_shards")
    _positive(t.steps, "train.steps")
    _positive(t.eval_every_steps, "train.eval_every_steps", allow_none=True)
    _positive(t.save_checkpoints_steps, "train.save_checkpoints_steps")
    _positive(t.log_step_count_steps, "train.log_step_count_steps")
    _positive(e.steps, "eval.steps", allow_none=True)
    return config


# ----------------------------------------------------------------------------------------------------------------
# Public entry points.


def config_from_dict(data: Optional[Mapping[str, Any]]) -> Config:
    """Builds and validates a `Config` from a (YAML-loaded) mapping; None gives the defaults.

    Raises:
      ValueError: unknown keys, wrong types or invalid values, naming the full key path.
    """
    check_size(data)
    return _validate(_convert(data, Config, ""))


def config_to_dict(config: Config) -> Dict[str, Any]:
    """The config as plain dicts/lists (what `config_from_dict` accepts)."""
    return dataclasses.asdict(config)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def load_yaml(text: str, path: str = "") -> Any:
    """`yaml.safe_load(text)`, refusing what a config cannot be: invalid YAML, too many values, too deep nesting.

    Raises:
      ValueError: one line naming the problem (and the key path for a too large value).
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"invalid YAML: {quote_text(_one_line(e))}") from None
    except RecursionError:
        raise ValueError("invalid YAML: nested too deeply") from None
    try:
        check_size(data, path)
    except RecursionError:
        raise ValueError(f"{path or '<root>'}: nested too deeply") from None
    return data


def quote_text(text: str, limit: int = 4 * MAX_QUOTED_CHARS) -> str:
    """`text` cut to `limit` characters (error messages of the YAML parser quote the offending input)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_config(text: str, overrides: Sequence[str] = ()) -> Config:
    """Parses YAML text (then applies `overrides`).

    Raises:
      ValueError: as `load_yaml` and `config_from_dict`.
    """
    data = load_yaml(text)
    try:
        config = config_from_dict(data)
    except RecursionError:
        raise ValueError("<root>: nested too deeply") from None
    return apply_overrides(config, overrides)


BUILTIN_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def builtin_config_names() -> List[str]:
    """Names of the packaged configs (`dlrm_tiny`, ...; `bench/...` for the benchmark ones)."""
    names = []
    for root, _, files in os.walk(BUILTIN_CONFIG_DIR):
        for name in files:
            if name.endswith(".yaml"):
                rel = os.path.relpath(os.path.join(root, name), BUILTIN_CONFIG_DIR)
                names.append(rel[: -len(".yaml")].replace(os.sep, "/"))
    return sorted(names)


def resolve_config_path(name_or_path: str) -> str:
    """The file of `--config`: an existing path, else a packaged config by name (`dlrm_tiny` or `dlrm_tiny.yaml`).

    Raises:
      FileNotFoundError: neither; the message lists the packaged names.
    """
    if os.path.exists(name_or_path):
        return name_or_path
    name = name_or_path[: -len(".yaml")] if name_or_path.endswith(".yaml") else name_or_path
    if name in builtin_config_names():
        return os.path.join(BUILTIN_CONFIG_DIR, *name.split("/")) + ".yaml"
    main_names = [n for n in builtin_config_names() if "/" not in n]
    raise FileNotFoundError(
        f"no such file: {quote(name_or_path)[1:-1]} (and no built-in config of that name: "
        f"{', '.join(main_names)}, or bench/...)"
    )


def read_config_text(path: str) -> str:
    """The text of a config file.

    Raises:
      ValueError: a directory, an unreadable, too large or non-UTF-8 file (naming `path`).
      FileNotFoundError: no such file.
    """
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory, not a YAML config file")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except PermissionError:
        raise ValueError(f"{path}: permission denied") from None
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_FILE_BYTES} bytes; not a config file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}); not a YAML config file") from None


def load_config(path: str, overrides: Sequence[str] = ()) -> Config:
    """Reads a YAML config file (then applies `overrides`).

    Raises:
      ValueError: as `read_config_text`, `load_yaml` and `config_from_dict`, the message prefixed with the file
        name.
      FileNotFoundError: no such file.
    """
    text = read_config_text(path)
    try:
        config = parse_config(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    return apply_overrides(config, overrides)


def dump_config(config: Config) -> str:
    """The config as YAML text (`parse_config(dump_config(c)) == c`)."""
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


def apply_overrides(config: Config, overrides: Sequence[str]) -> Config:
    """Returns a new config with `key.path=value` overrides applied (values parsed by `yaml.safe_load`).

    Examples: `train.batch_size=2048`, `model.top_mlp=[128, 64]`, `embedding.tables.cat_3.dim=8`,
    `data.max_vocab=null`. Paths into mappings (`embedding.tables`, `optimizer.*.args`) may create new keys.

    Raises:
      ValueError: a malformed override, an unknown key or an invalid value, naming the key path.
    """
    data = config_to_dict(config)
    for override in overrides:
        key, sep, raw = override.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"override {override!r}: expected key.path=value")
        try:
            value = load_yaml(raw, key) if raw.strip() else None
        except ValueError as e:
            raise ValueError(f"{key}: invalid YAML value {quote(raw)}: {e}") from None
        parts = key.split(".")
        node: Any = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part) if isinstance(node, dict) else None
            if child is None and isinstance(node, dict):
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ValueError(f"{'.'.join(parts[: i + 1])}: not a mapping, cannot set {key}")
            node = child
        node[parts[-1]] = value
    return config_from_dict(data)


def model_difference(first: Config, second: Config) -> str:
    """The first setting that makes the models of two configs differ in their variables ('' when none).

    Compares the `model` section and every embedding table's dimension and vocabulary size: what a checkpoint of
    one model needs to be restored by the other. Optimizers, data and training settings may differ.

    Returns:
      e.g. `"model.name: 'wide_deep' vs 'dlrm'"` or `''`.
    """
    for field in dataclasses.fields(ModelConfig):
        a, b = getattr(first.model, field.name), getattr(second.model, field.name)
        if a != b:
            return f"model.{field.name}: {quote(a)} vs {quote(b)}"
    for feature in _criteo.CATEGORICAL_FEATURE_NAMES:
        a, b = first.table_settings(feature), second.table_settings(feature)
        for key in ("dim", "vocab_size"):
            if a[key] != b[key]:
                return f"{feature} table {key}: {a[key]} vs {b[key]}"
    return ""
