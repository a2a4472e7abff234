"""tpu-estimator: train, evaluate, export and serve the built-in models (DLRM, Wide & Deep) from a YAML config.

Usage:
  tpu-estimator SUBCOMMAND [--config=NAME|PATH] [--set=key.path=value ...] [--model_dir=DIR] [flags]
  tpu-estimator SUBCOMMAND --help      the flags SUBCOMMAND reads, with an example

Flags (all: --helpfull):
  --config=NAME|PATH   the YAML config: a file, or a built-in config by name (dlrm_tiny, dlrm_demo,
                       wide_deep_tiny); default MODEL_DIR/config.yaml when it exists
  --set=KEY.PATH=VALUE override a config value (repeatable), e.g. --set=tpu.num_shards=1
  --model_dir=DIR      overrides model_dir of the config
  --export_dir=DIR     predict: the SavedModel to serve; export: the export base directory
  --input=FILES        predict: Criteo TSV/TFRecord files (--input_format=tsv|tfrecord if the names don't say);
                       rows without a label (39 fields, Criteo's test.txt) are accepted; data: TSV files to convert
  --output=FILE        predict: .csv or .jsonl;  --max_rows=N, --print_rows=N;  data: .tsv or .tfrecord
  --rows=N, --held_out_rows=M, --seed=S   data: synthetic rows (held-out rows go to OUTPUT_STEM.held_out.EXT)
  --overwrite          data: replace existing output files (written whole, then renamed over them)
  --benchmark_steps=N  benchmark: steps to train
  --progress_secs=S, --progress_steps=N   how often progress lines are printed
  --verbose            TensorFlow's INFO logs too;  --traceback  the full traceback of an error
  --version            print the version

Subcommands:
  train               train up to train.steps (a global step: rerunning with a larger value resumes)
                        tpu-estimator train --config=dlrm_tiny --model_dir=/tmp/dlrm --set=train.steps=200
  evaluate            evaluate the latest checkpoint on the evaluation data
                        tpu-estimator evaluate --model_dir=/tmp/dlrm      (the config saved in the model directory)
  train_and_evaluate  train, evaluating every train.eval_every_steps steps and at the end
                        tpu-estimator train_and_evaluate --config=wide_deep_tiny --model_dir=/tmp/wd
  export              write a SavedModel (default base: export.dir or MODEL_DIR/export)
                        tpu-estimator export --model_dir=/tmp/dlrm
  predict             predict rows (--input files, else the evaluation data) from --export_dir (a SavedModel)
                      or from the checkpoint in the model directory; writes --output (.csv or .jsonl)
                        tpu-estimator predict --export_dir=/tmp/dlrm/export/1700000000 --input=day_0.tsv --output=p.csv
  benchmark           train --benchmark_steps steps in a fresh directory and print examples/sec
                        tpu-estimator benchmark --config=dlrm_tiny --benchmark_steps=50
  data                write --rows synthetic Criteo-like rows to --output (.tsv or .tfrecord), or convert
                      --input TSV files to --output (.tfrecord)
                        tpu-estimator data --rows=100000 --output=data/day_0.tsv --held_out_rows=10000 --seed=1

Final metrics are printed and written to MODEL_DIR/metrics_SUBCOMMAND.json; TensorBoard events go to the model
directory. Evaluation metrics: `log_loss` is the binary cross-entropy over all evaluated rows (every shard's);
`loss` is the model's loss as TPUEstimator reports it: per batch, on the rows of the first shard only, averaged
over the batches. With tpu.num_shards=1 they agree; with more shards `loss` is a sample: use `log_loss`.
Errors are one line on stderr: exit status 2 for a problem with the command line, config, data or model directory,
1 for other failures (--traceback shows the full traceback).
"""

import os
import shlex
import sys
from typing import List, Optional

from absl import app, flags

import tpu_estimator
from tpu_estimator.app import config_file
from tpu_estimator.app.errors import CliError, data_error
from tpu_estimator.app.run_config_file import load

FLAGS = flags.FLAGS
PROG = "tpu-estimator"
SUBCOMMANDS = ("train", "evaluate", "train_and_evaluate", "predict", "export", "benchmark", "data")

__all__ = ["CliError", "FLAGS", "PROG", "SUBCOMMANDS", "define_flags", "load", "main", "run"]


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines the command-line flags (once)."""
    if "config" in flag_values:
        return
    flags.DEFINE_string(
        "config",
        None,
        "YAML run configuration: a file or a built-in name (dlrm_tiny, dlrm_demo, wide_deep_tiny); default "
        "MODEL_DIR/config.yaml when it exists.",
        flag_values=flag_values,
    )
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
    flags.DEFINE_list(
        "input",
        None,
        "predict: input files or globs (Criteo TSV or TFRecord); data: Criteo TSV files or globs to convert.",
        flag_values=flag_values,
    )
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
        "predict: predictions file, .csv or .jsonl (default: MODEL_DIR/predictions.csv); data: the file written, "
        ".tsv or .tfrecord.",
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
    flags.DEFINE_integer("rows", None, "data: synthetic rows to write to --output.", flag_values=flag_values)
    flags.DEFINE_integer(
        "held_out_rows",
        0,
        "data: also write this many further synthetic rows (disjoint from --rows) to OUTPUT_STEM.held_out.EXT.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer("seed", 0, "data: seed of the synthetic rows (as data.seed).", flag_values=flag_values)
    flags.DEFINE_integer(
        "max_vocab",
        100000,
        "data: cap on the categorical cardinalities of the synthetic rows (as data.max_vocab).",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "skip_malformed", False, "data: skip (and count) malformed TSV lines when converting.", flag_values=flag_values
    )
    flags.DEFINE_bool(
        "overwrite",
        False,
        "data: replace an existing --output (and held-out file); it is replaced only once the new one is complete.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "validate_rows",
        1000,
        "Before TensorFlow starts, check the first this many rows of every data file and report every problem "
        "found in them at once (file:line); 0: only open the files.",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "verbose",
        False,
        "Show TensorFlow's INFO and C++ warning logs (default: Python warnings, C++ errors).",
        flag_values=flag_values,
    )
    flags.DEFINE_bool("traceback", False, "On an error, print the full traceback too.", flag_values=flag_values)
    flags.DEFINE_bool("version", False, "Print the version and exit.", flag_values=flag_values)


# The flags `--helpfull` lists (absl's own and those of modules TensorFlow imports are left out).
OUR_FLAGS = (
    "config",
    "set",
    "model_dir",
    "export_dir",
    "input",
    "input_format",
    "output",
    "max_rows",
    "print_rows",
    "benchmark_steps",
    "progress_secs",
    "progress_steps",
    "rows",
    "held_out_rows",
    "seed",
    "max_vocab",
    "skip_malformed",
    "overwrite",
    "validate_rows",
    "verbose",
    "traceback",
    "version",
    "verbosity",
)


def flags_help(flag_values: flags.FlagValues = FLAGS) -> str:
    """Help text of the command's own flags."""
    lines = [f"{PROG} flags:"]
    for name in OUR_FLAGS:
        if name not in flag_values:
            continue
        flag = flag_values[name]
        default = "" if flag.default in (None, [], "") else f" (default: {flag.default_as_str})"
        lines.append(f"  --{name}: {flag.help}{default}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# The config (validated before TensorFlow is imported).


def require_model_dir(config: config_file.Config) -> str:
    """`config.model_dir`; CliError when it is not set."""
    if not config.model_dir:
        raise CliError("model_dir: not set; give --model_dir or set model_dir in the config")
    return config.model_dir


def check_model_dir(config: config_file.Config) -> None:
    """Refuses a model directory whose checkpoint is of another model (as its `config.yaml` says).

    Raises:
      CliError: naming the directory and both models.
    """
    model_dir = config.model_dir
    saved_path = os.path.join(model_dir, "config.yaml") if model_dir else None
    if not saved_path or not os.path.isfile(saved_path) or not os.path.exists(os.path.join(model_dir, "checkpoint")):
        return
    try:
        saved = config_file.load_config(saved_path)
    except (ValueError, OSError):
        return  # not ours to judge: the checkpoint restore says whether it fits
    difference = config_file.model_difference(saved, config)
    if difference:
        raise CliError(
            f"model_dir {model_dir} holds a checkpoint of another model: {difference} "
            f"(first: its config.yaml, second: this run); use a new --model_dir, or this directory's config "
            f"(--config={saved_path})"
        )


def check_data(
    config: config_file.Config,
    subcommand: str,
    predict_input: Optional[List[str]] = None,
    sample_rows: int = 0,
) -> None:
    """The data files of the run exist, are not empty and are in the configured format, and the first
    `sample_rows` rows of each are well formed (`data.sample_check`: every problem of the sample at once). Predict
    reads `predict_input` instead of the evaluation data when given; the predict command checks those.

    Raises:
      CliError: naming the config key and the file (and each malformed row of the sample, `file:line: reason`).
    """
    from tpu_estimator.app.data import files, sample_check

    data = config.data
    if data.source == "synthetic" or subcommand in ("export", "data"):
        return
    checked = []
    if subcommand in ("train", "train_and_evaluate", "benchmark"):
        paths = files.expand(data.train_paths, "data.train_paths")
        files.check_files(paths, data.source, "data.train_paths", data.compression)
        checked.append(("data.train_paths", paths))
    if subcommand in ("evaluate", "train_and_evaluate") or (subcommand == "predict" and not predict_input):
        key = "data.eval_paths" if data.eval_paths else "data.train_paths"
        paths = files.expand(data.eval_paths or data.train_paths, key)
        files.check_files(paths, data.source, key, data.compression, allow_empty=subcommand == "predict")
        if key not in dict(checked):
            checked.append((key, paths))
    fix = (
        "data.skip_malformed=true skips malformed lines"
        if data.source == "tsv"
        else "a damaged file: rewrite it, e.g. with tpu-estimator data; or data.source/data.compression do not match "
        "the files"
    )
    for key, paths in checked:
        sample_check.check_sample(
            paths, data.source, key, data.compression, sample_rows, skip_malformed=data.skip_malformed, fix=fix
        )


# ---------------------------------------------------------------------------------------------------------------
# Running.


# What happens first, said before it starts (the training progress hook names the session and first loop).
_FIRST_STEPS = {
    "train": "importing TensorFlow, then building the graph",
    "evaluate": "importing TensorFlow, then building the graph",
    "train_and_evaluate": "importing TensorFlow, then building the graph",
    "predict": "importing TensorFlow, then loading the model",
    "export": "importing TensorFlow, then building the serving graph",
    "benchmark": "importing TensorFlow",
    "data": "importing TensorFlow",
}


def _error(subcommand: str, message: str) -> None:
    print(f"{PROG} {subcommand}: error: {message}", file=sys.stderr)
    sys.stderr.flush()


def run(argv: List[str], flag_values: flags.FlagValues = FLAGS) -> int:
    """Runs the subcommand of `argv` (after flag parsing); returns the exit status.

    The config and the data files are checked before TensorFlow is imported, so their errors are fast.
    """
    args = argv[1:]
    if len(args) != 1 or args[0] not in SUBCOMMANDS:
        print(
            f"{PROG}: error: expected one subcommand of {', '.join(SUBCOMMANDS)}; got {' '.join(args) or 'none'}"
            f"\nTry: {PROG} --help",
            file=sys.stderr,
        )
        return 2
    subcommand = args[0]
    _RUNNING.update(subcommand=subcommand, flag_values=flag_values)
    try:
        config: Optional[config_file.Config] = None
        if subcommand == "data":
            from tpu_estimator.app import data_command

            data_command.check(flag_values)
        elif subcommand == "predict" and not flag_values.config and not _model_dir_config(flag_values):
            config = None  # the config saved in --export_dir (checked by the predict command)
        else:
            config = load(flag_values)
            if subcommand != "benchmark":
                require_model_dir(config)
                check_model_dir(config)
            check_data(config, subcommand, flag_values.input, flag_values.validate_rows)
    except CliError as e:
        _error(subcommand, str(e))
        return 2
    _RUNNING["config"] = config

    from tpu_estimator.app import quiet

    # Importing TensorFlow and building the graph take seconds before the first line of the command's own.
    print(f"{PROG} {subcommand}: {_FIRST_STEPS.get(subcommand, 'importing TensorFlow')} ...", flush=True)
    verbosity = flag_values.verbosity if "verbosity" in flag_values and flag_values["verbosity"].present else None
    try:
        quiet.import_tensorflow(flag_values.verbose)
        quiet.configure_logging(flag_values.verbose, verbosity)
        from tpu_estimator.app import commands
    except KeyboardInterrupt:
        return _interrupted(subcommand, config, flag_values)

    try:
        return commands.run(subcommand, config, flag_values)
    except CliError as e:
        _error(subcommand, str(e))
        return 2
    except KeyboardInterrupt:
        return _interrupted(subcommand, config, flag_values)
    except Exception as e:  # noqa: BLE001 (one line for any failure; --traceback shows it whole)
        message = commands.explain(e, config)
        if message is None and data_error(e) is not None:  # A failed check (an id out of range, a negative weight).
            message = f"the data failed a check: {data_error(e)}"
        if message is not None:
            if flag_values.traceback:
                import traceback

                traceback.print_exc()
            _error(subcommand, message)
            return 2
        if flag_values.traceback:
            raise
        _error(subcommand, f"{commands.one_line(e)} (--traceback shows the full traceback)")
        return 1


# What a Ctrl-C says: the run's subcommand, config and flags, once known (`run` sets them).
_RUNNING: dict = {}


def _interrupted_line(subcommand: str, config: Optional[config_file.Config], flag_values: flags.FlagValues) -> str:
    """`tpu-estimator SUBCOMMAND: error: interrupted; the last checkpoint ... resume from it with: COMMAND`."""
    from tpu_estimator.app import interrupt

    model_dir = config.model_dir if config is not None else None
    step = None
    if model_dir and subcommand in interrupt.RESUMABLE:
        try:
            from tpu_estimator.estimator_core import checkpoint_step

            step = checkpoint_step.checkpoint_global_step(model_dir)
        except Exception:  # noqa: BLE001 (the line is said without the step rather than not at all)
            step = None
    if _RUNNING.get("argv"):  # the command line as typed (the console script's)
        resume = " ".join(shlex.quote(a) for a in [PROG] + list(_RUNNING["argv"][1:]))
    else:
        resume = interrupt.command_line(subcommand, flag_values, list(OUR_FLAGS))
    return f"{PROG} {subcommand}: error: {interrupt.interrupted_message(subcommand, model_dir, step, resume)}"


def _interrupted(subcommand: str, config: Optional[config_file.Config], flag_values: flags.FlagValues) -> int:
    """Ctrl-C seen as `KeyboardInterrupt` (`run` called in-process): the line, exit status 130."""
    from tpu_estimator.app import interrupt

    print(_interrupted_line(subcommand, config, flag_values), file=sys.stderr, flush=True)
    return interrupt.EXIT_STATUS


def _line_at_interrupt() -> str:
    if "subcommand" not in _RUNNING:
        return f"{PROG}: interrupted"
    return _interrupted_line(_RUNNING["subcommand"], _RUNNING.get("config"), _RUNNING["flag_values"])


def _model_dir_config(flag_values: flags.FlagValues) -> bool:
    return bool(flag_values.model_dir) and os.path.isfile(os.path.join(flag_values.model_dir, "config.yaml"))


def _main(argv: List[str]) -> None:
    from tpu_estimator.app import interrupt

    interrupt.watch(_line_at_interrupt)  # Ctrl-C: one line, status 130, even while a training loop runs
    sys.exit(run(argv))


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point (`tpu-estimator`)."""
    define_flags()
    args = list(sys.argv if argv is None else argv)
    if any(a in ("--help", "-h", "-?", "--helpshort", "--helpfull") for a in args[1:]):
        subcommands = [a for a in args[1:] if a in SUBCOMMANDS]
        if subcommands:
            from tpu_estimator.app import cli_help

            print(cli_help.subcommand_help(subcommands[0], __doc__, FLAGS), end="")
        else:
            print(__doc__)
        if "--helpfull" in args[1:]:
            print(flags_help())
        sys.exit(0)
    _RUNNING["argv"] = args
    if "--version" in args[1:]:
        print(f"{PROG} {tpu_estimator.__version__}")
        sys.exit(0)
    app.run(_main, argv=args)


if __name__ == "__main__":
    main()
