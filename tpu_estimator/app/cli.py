"""tpu-estimator: train, evaluate, export and serve the built-in models (DLRM, Wide & Deep) from a YAML config.

Usage:
  tpu-estimator SUBCOMMAND --config=path.yaml [--set=key.path=value ...] [--model_dir=DIR] [flags]

Subcommands:
  train               train up to train.steps (a global step: rerunning with a larger value resumes)
  evaluate            evaluate the latest checkpoint on the evaluation data
  train_and_evaluate  train, evaluating every train.eval_every_steps steps and at the end
  export              write a SavedModel (default base: export.dir or MODEL_DIR/export)
  predict             predict rows (--input files, else the evaluation data) from --export_dir (a SavedModel)
                      or from the checkpoint in the model directory; writes --output (.csv or .jsonl)
  benchmark           train --benchmark_steps steps in a fresh directory and print examples/sec

Examples:
  tpu-estimator train --config=configs/dlrm_tiny.yaml --model_dir=/tmp/dlrm --set=train.steps=200
  tpu-estimator evaluate --config=configs/dlrm_tiny.yaml --model_dir=/tmp/dlrm
  tpu-estimator export --config=configs/dlrm_tiny.yaml --model_dir=/tmp/dlrm
  tpu-estimator predict --export_dir=/tmp/dlrm/export/1700000000 --input=data/day_0.tsv --output=/tmp/p.csv

Flags (all: --helpfull):
  --config=PATH        the YAML config (configs/dlrm_tiny.yaml, configs/dlrm_demo.yaml, configs/wide_deep_tiny.yaml)
  --set=KEY.PATH=VALUE override a config value (repeatable), e.g. --set=tpu.num_shards=1
  --model_dir=DIR      overrides model_dir of the config
  --export_dir=DIR     predict: the SavedModel to serve; export: the export base directory
  --input=FILES        predict: Criteo TSV/TFRecord files (--input_format=tsv|tfrecord if the names don't say)
  --output=FILE        predict: .csv or .jsonl;  --max_rows=N, --print_rows=N
  --benchmark_steps=N  benchmark: steps to train
  --progress_secs=S, --progress_steps=N   how often progress lines are printed

Final metrics are printed and written to MODEL_DIR/metrics_SUBCOMMAND.json; TensorBoard events go to the model
directory. TensorFlow logs only warnings unless --verbosity is given (0 = info, 1 = debug, -2 = errors only).
"""

import dataclasses
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np
import tensorflow as tf
from absl import app, flags
from absl import logging as absl_logging

from tpu_estimator.app import config_file, models
from tpu_estimator.app import predict as cli_predict
from tpu_estimator.app import progress as cli_progress

FLAGS = flags.FLAGS
PROG = "tpu-estimator"
SUBCOMMANDS = ("train", "evaluate", "train_and_evaluate", "predict", "export", "benchmark")


class CliError(Exception):
    """A problem with the command line or the config: printed as one line, exit status 2."""


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines the command-line flags (once)."""
    if "config" in flag_values:
        return
    flags.DEFINE_string("config", None, "YAML run configuration (see configs/).", flag_values=flag_values)
    flags.DEFINE_multi_string(
        "set",
        [],
        "Config override key.path=value (YAML value); repeatable, applied in "
        "order, e.g. --set=train.steps=500 --set=model.top_mlp=[64,32].",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "model_dir",
        None,
        "Checkpoints, summaries and metrics (overrides model_dir of the config).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "export_dir",
        None,
        "predict: the SavedModel to serve; export: the export base directory.",
        flag_values=flag_values,
    )
    flags.DEFINE_list("input", None, "predict: input files or globs (Criteo TSV or TFRecord).", flag_values=flag_values)
    flags.DEFINE_enum(
        "input_format",
        None,
        ["tsv", "tfrecord"],
        "predict: format of --input (default: from the file names).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output",
        None,
        "predict: predictions file, .csv or .jsonl (default: MODEL_DIR/predictions.csv).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer("max_rows", None, "predict: at most this many rows.", flag_values=flag_values)
    flags.DEFINE_integer("print_rows", 5, "predict: rows printed.", flag_values=flag_values)
    flags.DEFINE_integer(
        "benchmark_steps", None, "benchmark: training steps (default train.steps).", flag_values=flag_values
    )
    flags.DEFINE_float(
        "progress_secs", 10.0, "Print a progress line at most this often (seconds).", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "progress_steps", None, "Also print a progress line every this many steps.", flag_values=flag_values
    )


# ---------------------------------------------------------------------------------------------------------------
# Helpers.


def _not_a_deprecation_notice(record: logging.LogRecord) -> bool:
    return not record.pathname.endswith("deprecation.py")


def set_tf_verbosity(flag_values: flags.FlagValues = FLAGS) -> None:
    """TensorFlow's Python logging: warnings (without API deprecation notices), or what --verbosity asks for."""
    logger = tf.get_logger()
    logger.propagate = False  # TensorFlow's logger has its own handler: absl's would print every line twice
    if "verbosity" in flag_values and flag_values["verbosity"].present:
        v = flag_values.verbosity
        logger.setLevel(
            "DEBUG" if v >= 1 else "INFO" if v == 0 else "WARNING" if v == -1 else "ERROR" if v == -2 else "FATAL"
        )
    else:
        logger.setLevel("WARNING")
        logger.addFilter(_not_a_deprecation_notice)
        absl_logging.set_verbosity(absl_logging.WARNING)  # TensorFlow also logs through absl (SavedModel loading)


def load(flag_values: flags.FlagValues = FLAGS, config_path: Optional[str] = None) -> config_file.Config:
    """The config of --config (or `config_path`) with --set overrides and --model_dir.

    Raises:
      CliError: no config, or a validation error (its message names the key path).
    """
    path = flag_values.config or config_path
    if not path:
        raise CliError("--config is required")
    try:
        config = config_file.load_config(path, flag_values.set)
    except FileNotFoundError:
        raise CliError(f"--config: no such file: {path}") from None
    except ValueError as e:
        raise CliError(str(e)) from None
    if flag_values.model_dir:
        config = dataclasses.replace(config, model_dir=flag_values.model_dir)
    return config


def require_model_dir(config: config_file.Config) -> str:
    """`config.model_dir`; CliError when it is not set."""
    if not config.model_dir:
        raise CliError("model_dir: not set; give --model_dir or set model_dir in the config")
    return config.model_dir


def to_json_value(value: Any) -> Any:
    """`value` with NumPy scalars as Python numbers and non-finite floats as None (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (np.integer, int)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    return value


def write_metrics(model_dir: Optional[str], subcommand: str, metrics: Dict[str, Any]) -> Optional[str]:
    """Writes `metrics` to `{model_dir}/metrics_{subcommand}.json`; returns the path."""
    if not model_dir:
        return None
    tf.io.gfile.makedirs(model_dir)
    path = os.path.join(model_dir, f"metrics_{subcommand}.json")
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(to_json_value(metrics), indent=2, sort_keys=True) + "\n")
    return path


def print_metrics(title: str, metrics: Dict[str, Any]) -> None:
    """Prints the scalar entries of `metrics`, one per line, sorted."""
    print(title)
    for key in sorted(metrics):
        value = metrics[key]
        if isinstance(value, (float, np.floating)):
            print(f"  {key:<20} {value:.4f}")
        elif not isinstance(value, (dict, list)):
            print(f"  {key:<20} {value}")
    sys.stdout.flush()


def progress_hook(
    config: config_file.Config, last_step: int, flag_values: flags.FlagValues = FLAGS
) -> cli_progress.ProgressHook:
    """The progress printer of a training run up to `last_step`."""
    return cli_progress.ProgressHook(
        config.train.batch_size,
        last_step=last_step,
        every_secs=flag_values.progress_secs,
        every_steps=flag_values.progress_steps,
    )


def save_config(config: config_file.Config, model_dir: str) -> str:
    """Writes the effective config (after overrides) to `{model_dir}/config.yaml`."""
    tf.io.gfile.makedirs(model_dir)
    path = os.path.join(model_dir, "config.yaml")
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(config_file.dump_config(config))
    return path


# ---------------------------------------------------------------------------------------------------------------
# Subcommands: each returns the metrics it prints and writes.


def train(
    config: config_file.Config, flag_values: flags.FlagValues = FLAGS, last_step: Optional[int] = None
) -> Dict[str, Any]:
    """Trains up to global step `last_step` (default `train.steps`), resuming from the model directory."""
    model_dir = require_model_dir(config)
    save_config(config, model_dir)
    last_step = last_step or config.train.steps
    estimator = models.make_estimator(config)
    hook = progress_hook(config, last_step, flag_values)
    start = time.time()
    estimator.train(models.make_input_fn(config, "train"), max_steps=last_step, hooks=[hook])
    elapsed = time.time() - start
    global_step = int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP))
    return {
        "global_step": global_step,
        "steps_run": hook.steps_run,
        "final_loss": hook.last_loss,
        "examples_per_sec": hook.examples_per_sec(),
        "elapsed_secs": elapsed,
    }


def evaluate(config: config_file.Config, flag_values: flags.FlagValues = FLAGS) -> Dict[str, Any]:
    """Evaluates the latest checkpoint."""
    del flag_values
    model_dir = require_model_dir(config)
    if not tf.train.latest_checkpoint(model_dir):
        raise CliError(f"evaluate: no checkpoint in {model_dir} (train first)")
    estimator = models.make_estimator(config)
    return dict(estimator.evaluate(models.make_input_fn(config, "eval"), steps=models.eval_steps(config)))


def train_and_evaluate(config: config_file.Config, flag_values: flags.FlagValues = FLAGS) -> Dict[str, Any]:
    """Alternates training and evaluation every `train.eval_every_steps` steps up to `train.steps`."""
    every = config.train.eval_every_steps or config.train.steps
    history: List[Dict[str, Any]] = []
    step = 0
    model_dir = require_model_dir(config)
    if tf.train.latest_checkpoint(model_dir):
        step = int(tf.train.load_variable(model_dir, tf.compat.v1.GraphKeys.GLOBAL_STEP))
    trained: Dict[str, Any] = {}
    while step < config.train.steps:
        target = min(config.train.steps, (step // every + 1) * every)
        trained = train(config, flag_values, last_step=target)
        step = trained["global_step"]
        metrics = evaluate(config, flag_values)
        print_metrics(f"evaluation at step {step}:", metrics)
        history.append(metrics)
    if not history:
        history.append(evaluate(config, flag_values))
    return dict(history[-1], history=history, train=trained)


def export(config: config_file.Config, flag_values: flags.FlagValues = FLAGS) -> Dict[str, Any]:
    """Exports a SavedModel of the latest checkpoint (with the config in `assets.extra`)."""
    model_dir = require_model_dir(config)
    if not tf.train.latest_checkpoint(model_dir):
        raise CliError(f"export: no checkpoint in {model_dir} (train first)")
    base = flag_values.export_dir or config.export.dir or os.path.join(model_dir, "export")
    estimator = models.make_estimator(config)
    with tempfile.TemporaryDirectory() as tmp:
        config_path = os.path.join(tmp, cli_predict.CONFIG_ASSET)
        with open(config_path, "w", encoding="utf-8") as f:
            f.write(config_file.dump_config(config))
        path = estimator.export_saved_model(
            base, models.serving_input_receiver_fn(config), assets_extra={cli_predict.CONFIG_ASSET: config_path}
        )
    path = path.decode() if isinstance(path, bytes) else path
    print(f"exported SavedModel: {path}")
    return {"export_dir": path, "global_step": int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP))}


def predict(config: Optional[config_file.Config], flag_values: flags.FlagValues = FLAGS) -> Dict[str, Any]:
    """Predicts rows from a SavedModel (--export_dir) or the latest checkpoint; writes and prints them."""
    export_dir = flag_values.export_dir
    if config is None:  # the config saved in the export by the export command, with --set and --model_dir
        path = cli_predict.export_config_path(export_dir) if export_dir else None
        if not path or not tf.io.gfile.exists(path):
            raise CliError("predict: --config is required (or an --export_dir written by the export command)")
        config = load(flag_values, config_path=path)
    batch_size = config.eval.batch_size

    def rows(batch: int) -> tf.data.Dataset:
        return cli_predict.rows_dataset(
            config, batch, flag_values.input, flag_values.input_format, flag_values.max_rows
        )

    if export_dir:
        predictions = cli_predict.predict_from_export(export_dir, rows(batch_size))
    else:
        model_dir = require_model_dir(config)
        if not tf.train.latest_checkpoint(model_dir):
            raise CliError(f"predict: no checkpoint in {model_dir} (train first, or give --export_dir)")
        predictions = cli_predict.predict_from_checkpoint(config, model_dir, rows)
    labels = cli_predict.labels_of(rows(batch_size))
    output = flag_values.output or (os.path.join(config.model_dir, "predictions.csv") if config.model_dir else None)
    if not output:
        raise CliError("predict: give --output (no model_dir to write predictions.csv to)")
    cli_predict.write_predictions(output, predictions, labels)
    n = len(next(iter(predictions.values()))) if predictions else 0
    print(f"wrote {n} predictions to {output}")
    for i, row in enumerate(cli_predict.iter_rows(predictions, labels)):
        if i >= flag_values.print_rows:
            break
        print("  " + "  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    return {
        "num_predictions": n,
        "output": output,
        "source": export_dir or "checkpoint",
        "mean_probability": float(np.mean(predictions["probability"])) if n else None,
    }


def benchmark(config: config_file.Config, flag_values: flags.FlagValues = FLAGS) -> Dict[str, Any]:
    """Trains `--benchmark_steps` steps from scratch in a temporary directory; examples/sec after warm-up."""
    steps = flag_values.benchmark_steps or config.train.steps
    tmp = tempfile.mkdtemp(prefix="tpu_estimator_benchmark_")
    try:
        bench = dataclasses.replace(
            config, model_dir=tmp, train=dataclasses.replace(config.train, save_checkpoints_steps=10**9)
        )
        result = train(bench, flag_values, last_step=steps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.update(
        batch_size=config.train.batch_size,
        num_shards=config.tpu.num_shards,
        iterations_per_loop=config.tpu.iterations_per_loop,
        model=config.model.name,
    )
    return result


_RUNNERS = {
    "train": train,
    "evaluate": evaluate,
    "train_and_evaluate": train_and_evaluate,
    "predict": predict,
    "export": export,
    "benchmark": benchmark,
}


def run(argv: List[str], flag_values: flags.FlagValues = FLAGS) -> int:
    """Runs the subcommand of `argv` (after flag parsing); returns the exit status."""
    set_tf_verbosity(flag_values)
    args = argv[1:]
    if len(args) != 1 or args[0] not in SUBCOMMANDS:
        print(
            f"{PROG}: error: expected one subcommand of {', '.join(SUBCOMMANDS)}; got {' '.join(args) or 'none'}"
            f"\nTry: {PROG} --help",
            file=sys.stderr,
        )
        return 2
    subcommand = args[0]
    try:
        if subcommand == "predict" and not flag_values.config:
            config = None
        else:
            config = load(flag_values)
        metrics = _RUNNERS[subcommand](config, flag_values)
    except (CliError, FileNotFoundError) as e:
        print(f"{PROG} {subcommand}: error: {e}", file=sys.stderr)
        return 2
    # benchmark trains in a temporary directory: its metrics go to --model_dir only when one is given.
    model_dir = flag_values.model_dir if subcommand == "benchmark" or not config else config.model_dir
    if subcommand == "benchmark":
        print(
            f"benchmark: {metrics['examples_per_sec'] or 0:,.0f} examples/sec "
            f"({metrics['steps_run']} steps of {metrics['batch_size']} on {metrics['num_shards']} shards)"
        )
    print_metrics(f"{subcommand}:", metrics)
    path = write_metrics(model_dir, subcommand, metrics)
    if path:
        print(f"metrics written to {path}")
    return 0


def _main(argv: List[str]) -> None:
    sys.exit(run(argv))


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point (`tpu-estimator`)."""
    define_flags()
    # absl prints the __main__ module's docstring as the usage (--help): the console script has none.
    sys.modules["__main__"].__doc__ = __doc__
    app.run(_main, argv=argv)


if __name__ == "__main__":
    main()
