"""The subcommands of `tpu-estimator` (imported after the config is validated: this module imports TensorFlow).

Each subcommand returns the metrics it prints and writes to `MODEL_DIR/metrics_SUBCOMMAND.json`. `explain`
turns the errors TensorFlow raises for data and checkpoint problems into the command line's one-line messages.
"""

import dataclasses
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List, Optional

import numpy as np
import tensorflow as tf
from absl import flags

from tpu_estimator.app import config_file, models, run_config_file
from tpu_estimator.app import predict as cli_predict
from tpu_estimator.app import progress as cli_progress
from tpu_estimator.app.errors import CliError
from tpu_estimator.app.models import inputs as model_inputs
from tpu_estimator.checkpoints import checkpoint_state
from tpu_estimator.checkpoints.model_dir_lock import ModelDirLockedError
from tpu_estimator.checkpoints.train_guard import EmptyTrainingInputError
from tpu_estimator.estimator_core import checkpoint_step
from tpu_estimator.inputs import input_position
from tpu_estimator.modes.eval_loop import EvaluationInputEndedError

PROG = "tpu-estimator"


# ---------------------------------------------------------------------------------------------------------------
# Helpers.


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


# Why evaluation's `loss` and `log_loss` differ on shards (see `tpu-estimator --help`).
LOSS_NOTE = (
    "  (loss: the first of {num_shards} shards' rows of each batch, as TPUEstimator reports it; log_loss: all rows)"
)


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
    config: config_file.Config, last_step: int, flag_values: flags.FlagValues
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


def latest_checkpoint(model_dir: str, for_training: bool = False) -> Optional[str]:
    """The checkpoint `model_dir`'s state file names (None without one), after checking that file.

    Raises:
      checkpoint_state.DamagedCheckpointStateError: the state file cannot be trusted (see `verify_checkpoint_state`).
    """
    return checkpoint_state.verify_checkpoint_state(model_dir, for_training=for_training)


def global_step_of(model_dir: str, for_training: bool = False) -> Optional[int]:
    """The global step of the latest checkpoint in `model_dir` (None without one)."""
    path = latest_checkpoint(model_dir, for_training)
    return checkpoint_step.global_step_in(path) if path else None


# The settings that make a training input another one: a checkpointed position means nothing in another.
_INPUT_SETTINGS = ("data", "train.batch_size", "tpu.num_shards", "tpu.per_host_input_for_training")


def _input_setting(config: config_file.Config, name: str) -> Any:
    value = config
    for part in name.split("."):
        value = getattr(value, part)
    return value


def _input_restart_reason(config: config_file.Config, checkpoint: str) -> Optional[str]:
    """Why a run resuming from `checkpoint` cannot read on where it stood (None: it can).

    Checkpoints hold the training input's position (`input_position.py`) since this version; a run whose data,
    batch size or input sharding differ from the run that wrote the checkpoint (as `config.yaml` says) reads its
    input from the start.
    """
    names = {name for name, _ in tf.train.list_variables(checkpoint)}
    if f"{input_position.KEY_PREFIX}/0/skip" not in names:
        return f"{checkpoint} holds no input position (written by an older tpu-estimator)"
    saved_path = os.path.join(config.model_dir, "config.yaml")
    if not tf.io.gfile.exists(saved_path):
        return None
    try:
        saved = config_file.load_config(saved_path)
    except Exception:  # an unreadable config.yaml is reported where the command reads it (cli.py)
        return None
    for name in _INPUT_SETTINGS:
        if _input_setting(saved, name) != _input_setting(config, name):
            return f"{name} differs from the run that wrote {checkpoint} (see {saved_path})"
    return None


class _ConfigWriter(tf.compat.v1.train.CheckpointSaverListener):
    """Writes `config.yaml` at the first checkpoint that holds a step of this run: while `train()` holds the
    model_dir lock, and never for a run that fails before it trained a step (the checkpoint saved when the session
    starts holds the step it started from)."""

    def __init__(self, config: config_file.Config, start_step: Optional[int]):
        self._config = config
        self._start_step = start_step or 0
        self.written = False

    def after_save(self, session, global_step_value):
        del session
        if not self.written and global_step_value > self._start_step:
            save_config(self._config, self._config.model_dir)
            self.written = True


class _RunCounter(tf.compat.v1.train.SessionRunHook):
    """Counts the `Session.run` calls of an evaluation (0 = the data gave no batch)."""

    def __init__(self):
        self.runs = 0

    def after_run(self, run_context, run_values):
        self.runs += 1


def _data_description(config: config_file.Config, training: bool) -> str:
    data = config.data
    batch = config.train.batch_size if training else config.eval.batch_size
    batch_key = "train.batch_size" if training else "eval.batch_size"
    if data.source == "synthetic":
        count = data.num_examples if training else data.eval_num_examples
        key = "data.num_examples" if training else "data.eval_num_examples"
        return f"{key} ({count}) is less than one batch ({batch_key} {batch})"
    key = "data.train_paths" if training or not data.eval_paths else "data.eval_paths"
    paths = data.train_paths if key == "data.train_paths" else data.eval_paths
    lines = " of well-formed lines (data.skip_malformed=true skipped the others)" if data.skip_malformed else ""
    return f"{key} ({', '.join(paths)}) holds less than one batch{lines} ({batch_key} {batch})"


# ---------------------------------------------------------------------------------------------------------------
# Subcommands.


class NothingToDo(Exception):
    """Not an error: the subcommand had nothing to do (its message says why); no metrics are written."""


class TargetReached(NothingToDo):
    """`train` found the model directory already at the target step."""


def train(config: config_file.Config, flag_values: flags.FlagValues, last_step: Optional[int] = None) -> Dict[str, Any]:
    """Trains up to global step `last_step` (default `train.steps`), resuming from the model directory.

    `config.yaml` is written to the model directory at the first checkpoint this run saves with a step it trained,
    so only while the run holds the model_dir lock: a trainer refused by the lock, or a run that fails before it
    trained a step (bad data, a checkpoint of another model), leaves the directory's description as it found it.

    Raises:
      TargetReached: the latest checkpoint is at `last_step` or beyond.
      CliError: the training data gave no batch.
      checkpoint_state.DamagedCheckpointStateError: the model directory's `checkpoint` file cannot be trusted.
    """
    model_dir = config.model_dir
    last_step = last_step or config.train.steps
    start_step = global_step_of(model_dir, for_training=True)
    if start_step is not None and start_step >= last_step:
        raise TargetReached(
            f"the model in {model_dir} is at global step {start_step}, already at the target step {last_step}: "
            "nothing to train (give a larger --set=train.steps=N to train further)"
        )
    estimator = models.make_estimator(config)
    hook = progress_hook(config, last_step, flag_values)
    describe = _ConfigWriter(config, start_step)
    restart_reason = None
    if start_step is not None and not model_inputs.one_process_per_host():  # else no position is saved at all
        restart_reason = _input_restart_reason(config, latest_checkpoint(model_dir))
    if restart_reason:
        print(f"train: {restart_reason}: the training data is read again from its beginning")
    start = time.time()
    try:
        estimator.train(
            models.make_input_fn(config, "train", checkpoint_position=not restart_reason),
            max_steps=last_step,
            hooks=[hook],
            saving_listeners=[describe],
        )
    except EmptyTrainingInputError:
        raise CliError(f"no training examples: {_data_description(config, training=True)}") from None
    elapsed = time.time() - start
    global_step = int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP))
    if hook.steps_run == 0 and global_step < last_step:
        raise CliError(f"no training examples: {_data_description(config, training=True)}")
    return {
        "global_step": global_step,
        "steps_run": hook.steps_run,
        "final_loss": hook.last_loss,
        "examples_per_sec": hook.examples_per_sec(),
        "elapsed_secs": elapsed,
    }


def evaluate(config: config_file.Config, flag_values: flags.FlagValues) -> Dict[str, Any]:
    """Evaluates the latest checkpoint.

    Raises:
      CliError: no checkpoint, or the evaluation data gave no batch.
    """
    del flag_values
    model_dir = config.model_dir
    if not latest_checkpoint(model_dir):
        raise CliError(f"evaluate: no checkpoint in {model_dir} (train first)")
    estimator = models.make_estimator(config)
    try:
        steps = models.eval_steps(config)
    except ValueError as e:  # eval.steps=null and fewer examples than one batch
        raise CliError(f"no evaluation examples: {e}") from None
    counter = _RunCounter()
    try:
        metrics = dict(estimator.evaluate(models.make_input_fn(config, "eval"), steps=steps, hooks=[counter]))
    except EvaluationInputEndedError as e:  # on shards all eval.steps run in one loop, as on a TPU
        if e.steps_read == 0:
            raise CliError(f"no evaluation examples: {_data_description(config, training=False)}") from None
        raise CliError(
            f"eval.steps {steps}: the evaluation data holds only {e.steps_read} batches of eval.batch_size "
            f"{config.eval.batch_size}; set eval.steps <= {e.steps_read}, or eval.steps=null to use every full batch"
        ) from None
    if counter.runs == 0:
        raise CliError(f"no evaluation examples: {_data_description(config, training=False)}")
    return metrics


def train_and_evaluate(config: config_file.Config, flag_values: flags.FlagValues) -> Dict[str, Any]:
    """Alternates training and evaluation every `train.eval_every_steps` steps up to `train.steps`.

    Intermediate evaluations are printed as they happen; the last one is the command's result (printed once).
    """
    every = config.train.eval_every_steps or config.train.steps
    history: List[Dict[str, Any]] = []
    step = global_step_of(config.model_dir) or 0
    trained: Dict[str, Any] = {}
    while step < config.train.steps:
        target = min(config.train.steps, (step // every + 1) * every)
        trained = train(config, flag_values, last_step=target)
        step = trained["global_step"]
        metrics = evaluate(config, flag_values)
        if step < config.train.steps:
            print_metrics(f"evaluation at step {step}:", metrics)
        history.append(metrics)
    if not history:
        history.append(evaluate(config, flag_values))
    return dict(history[-1], history=history, train=trained)


def export(config: config_file.Config, flag_values: flags.FlagValues) -> Dict[str, Any]:
    """Exports a SavedModel of the latest checkpoint (with the config in `assets.extra`)."""
    model_dir = config.model_dir
    if not latest_checkpoint(model_dir):
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


def _predict_config(flag_values: flags.FlagValues) -> config_file.Config:
    export_dir = flag_values.export_dir
    path = cli_predict.export_config_path(export_dir) if export_dir else None
    if not path or not tf.io.gfile.exists(path):
        if export_dir and not tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb")):
            raise CliError(f"--export_dir: {export_dir} is not a SavedModel (no saved_model.pb)")
        raise CliError("predict: --config is required (or an --export_dir written by the export command)")
    return run_config_file.load(flag_values, config_path=path)


def predict(config: Optional[config_file.Config], flag_values: flags.FlagValues) -> Dict[str, Any]:
    """Predicts rows from a SavedModel (--export_dir) or the latest checkpoint; writes and prints them.

    Rows without a label (39 fields) are accepted; their label is written empty (CSV) or null (JSON lines). No
    rows is not an error: nothing is written and the command says so.
    """
    export_dir = flag_values.export_dir
    if config is None:  # the config saved in the export by the export command, with --set and --model_dir
        config = _predict_config(flag_values)
    batch_size = config.eval.batch_size
    if flag_values.input:
        cli_predict.check_input(flag_values.input, flag_values.input_format, config)

    def rows(batch: int) -> tf.data.Dataset:
        return cli_predict.rows_dataset(
            config, batch, flag_values.input, flag_values.input_format, flag_values.max_rows
        )

    output = flag_values.output or (os.path.join(config.model_dir, "predictions.csv") if config.model_dir else None)
    if not output:
        raise CliError("predict: give --output (no model_dir to write predictions.csv to)")
    if export_dir:
        if not tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb")):
            raise CliError(f"--export_dir: {export_dir} is not a SavedModel (no saved_model.pb)")
        predictions = cli_predict.predict_from_export(export_dir, rows(batch_size))
    else:
        model_dir = config.model_dir
        if not model_dir or not latest_checkpoint(model_dir):
            raise CliError(f"predict: no checkpoint in {model_dir} (train first, or give --export_dir)")
        predictions = cli_predict.predict_from_checkpoint(config, model_dir, rows)
    n = len(next(iter(predictions.values()))) if predictions else 0
    source = ", ".join(flag_values.input) if flag_values.input else "the evaluation data"
    if n == 0:
        raise NothingToDo(f"no rows in {source}: nothing written (neither {output} nor metrics_predict.json)")
    labels = cli_predict.labels_of(rows(batch_size))
    cli_predict.write_predictions(output, predictions, labels)
    print(f"wrote {n} predictions to {output}")
    for i, row in enumerate(cli_predict.iter_rows(predictions, labels)):
        if i >= flag_values.print_rows:
            break
        print("  " + "  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    return {
        "num_predictions": n,
        "output": output,
        "source": export_dir or "checkpoint",
        "mean_probability": float(np.mean(predictions["probability"])),
    }


def benchmark(config: config_file.Config, flag_values: flags.FlagValues) -> Dict[str, Any]:
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


def data(config: Optional[config_file.Config], flag_values: flags.FlagValues) -> Dict[str, Any]:
    """Writes synthetic rows (`--rows`, `--held_out_rows`) or converts TSV files (`--input`) to `--output`."""
    del config
    from tpu_estimator.app import data_command

    return data_command.run(flag_values)


_RUNNERS = {
    "train": train,
    "evaluate": evaluate,
    "train_and_evaluate": train_and_evaluate,
    "predict": predict,
    "export": export,
    "benchmark": benchmark,
    "data": data,
}


def run(subcommand: str, config: Optional[config_file.Config], flag_values: flags.FlagValues) -> int:
    """Runs a subcommand (config already validated); prints and writes its metrics; returns the exit status.

    Raises:
      CliError, and whatever the subcommand raises (`explain` says which are data or checkpoint problems).
    """
    try:
        metrics = _RUNNERS[subcommand](config, flag_values)
    except TargetReached as e:
        print(f"{subcommand}: {e}; {os.path.join(config.model_dir, 'metrics_train.json')} is kept")
        return 0
    except NothingToDo as e:
        print(f"{subcommand}: {e}")
        return 0
    if subcommand == "data":
        return 0
    # benchmark trains in a temporary directory: its metrics go to --model_dir only when one is given.
    model_dir = flag_values.model_dir if subcommand == "benchmark" else config.model_dir if config else None
    if subcommand == "benchmark":
        print(
            f"benchmark: {metrics['examples_per_sec'] or 0:,.0f} examples/sec "
            f"({metrics['steps_run']} steps of {metrics['batch_size']} on {metrics['num_shards']} shards)"
        )
    print_metrics(f"{subcommand}:", metrics)
    if subcommand in ("evaluate", "train_and_evaluate") and config.tpu.num_shards > 1:
        print(LOSS_NOTE.format(num_shards=config.tpu.num_shards))
    path = write_metrics(model_dir, subcommand, metrics)
    if path:
        print(f"metrics written to {path}")
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Errors.

# `path:17: reason` of a malformed TSV line (see criteo.parse_tsv_lines).
_MALFORMED_LINE = re.compile(r"((?:[^\s\[\]'\"]+):(\d+): (?:expected|label|dense|malformed)[^\n\]'\"]*)")


def op_error_cause(error: "tf.errors.OpError") -> str:
    """The message of the op that failed, from a TensorFlow op error's text.

    A graph's error begins with `Graph execution error:` or `N root error(s) found.` and a stack of where the op
    was defined; the cause is the first root error's message (`(0) INVALID_ARGUMENT: <cause>`), or the line after
    the `Node: 'name'` line. Falls back to the first line.
    """
    text = str(getattr(error, "message", error))
    root = re.search(r"\(0\) [A-Z_]+: ([^\n]*)", text)
    if root:
        cause = root.group(1)
    else:
        lines = text.splitlines()
        nodes = [i for i, line in enumerate(lines) if line.startswith("Node: '")]
        after = nodes[-1] + 1 if nodes else len(lines)
        cause = lines[after] if after < len(lines) and lines[after].strip() else (lines[0] if lines else "")
    cause = re.sub(r"\{\{[^}]*\}\}\s*", "", cause)
    return re.split(r"\s*\[\[|\s*\[Op:", cause)[0].strip()


def one_line(error: BaseException) -> str:
    """`Type: first line of the message` (of a TensorFlow op error: its cause, `op_error_cause`), cut to 300
    characters."""
    if isinstance(error, tf.errors.OpError):
        return f"{type(error).__name__}: {op_error_cause(error)[:300]}"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def tf_message(error: "tf.errors.OpError") -> str:
    """The cause of a TensorFlow op error (`op_error_cause`: the failed op's message, without the graph error's
    header and `{{function_node ...}}`, `[[node]]` and `[Op:...]` decorations), cut to 200 characters."""
    text = op_error_cause(error)
    return text if len(text) <= 200 else text[:197] + "..."


def _raised_in_tensorflow(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and f"{os.sep}tensorflow{os.sep}" in frames[-1].filename


def explain(error: BaseException, config: Optional[config_file.Config]) -> Optional[str]:
    """The one-line message of a data, checkpoint or model directory problem, or None for other errors."""
    message = str(error)
    if isinstance(error, (ModelDirLockedError, checkpoint_state.DamagedCheckpointStateError)):
        return message  # whole: it names the directory, the file or the holder, and says what to do
    if isinstance(error, tf.errors.OpError):
        match = _MALFORMED_LINE.search(message)
        if match:
            skip = "data.skip_malformed=true" if config else "--skip_malformed"
            return f"{match.group(1).strip()} ({skip} skips malformed lines)"
    if isinstance(error, tf.errors.InvalidArgumentError) and re.search(r"Tensor had (NaN|Inf)", message):
        cause = op_error_cause(error)
        if "Non-finite training input" in cause:
            return f"the training data holds NaN or Inf: {cause}"
        return (
            f"training produced NaN or Inf values: {cause} (the model diverged: lower the learning rates, "
            "optimizer.dense.learning_rate and optimizer.embedding.learning_rate; the latest checkpoint holds finite "
            "values only)"
        )
    data = config.data if config else None
    paths = ", ".join((data.train_paths or []) + (data.eval_paths or [])) if data else ""
    source = f"data.source {data.source}" if data else "TFRecord"
    if isinstance(error, tf.errors.DataLossError):
        return (
            f"data ({paths or 'input'}): not readable as {source}: {tf_message(error)} (a truncated file, or "
            "data.source/data.compression not matching the files)"
        )
    parse_failures = ("ParseExample", "Could not parse example input", "is required but could not be found")
    if isinstance(error, tf.errors.InvalidArgumentError) and any(p in message for p in parse_failures):
        return (
            f"data ({paths or 'input'}): a record is not a Criteo tf.train.Example: {tf_message(error)} (TFRecord "
            "files of Criteo rows are written by `tpu-estimator data`)"
        )
    restore = re.search(
        r"(Key \S+ not found in checkpoint|[Ss]hape[^\n]*(?:mismatch|do not match|match)[^\n]*)", message
    )
    if isinstance(error, (tf.errors.NotFoundError, tf.errors.InvalidArgumentError)) and restore and config:
        return (
            f"model_dir {config.model_dir}: its checkpoint does not fit the model of this config "
            f"({config.model.name}): {restore.group(1)[:200]}; it was written by another model: use a new "
            "--model_dir, or the config it was trained with"
        )
    if isinstance(error, UnicodeDecodeError) and _raised_in_tensorflow(error):
        # TensorFlow fails to decode its own error message when it quotes a binary record (a parse failure).
        return (
            f"data ({paths or 'input'}): a record is not a Criteo tf.train.Example (TensorFlow's error quotes binary "
            "bytes); TFRecord files of Criteo rows are written by `tpu-estimator data`"
        )
    if isinstance(error, ValueError) and message.startswith("No files match"):
        return message
    return None
