"""Run an unmodified TPUEstimator program on CPUs/GPUs.

Usage:
  tpu-estimator-run [--num_shards=N] [--traceback] [--verbose] script.py [program args...]
  tpu-estimator-run [--num_shards=N] [--traceback] [--verbose] -m package.module [program args...]
  python -m tpu_estimator.compat.launcher ...            (same)

Launcher options (before the script):
  --num_shards=N   run on N shards; sets TPU_ESTIMATOR_NUM_SHARDS.
  --traceback      print the full traceback of an error (by default: configuration, data and TensorFlow errors
                   are a few lines: where the program called, then the error).
  --verbose        keep TensorFlow's start-up, INFO and C++ warning logs (default: Python warnings, C++ errors).
  -h, --help       this help (also --helpshort, --helpfull: the launcher has no other flags).

Example:
  tpu-estimator-run --num_shards=2 tests/programs/mnist_tpu.py --tpu=my-tpu --model_dir=/tmp/mnist --use_tpu=true

The program runs as `python script.py args...` would (`__name__ == '__main__'`, `sys.argv` = the script and its
arguments, so absl flags and `tf.compat.v1.app.run()` parse them; the script's directory first on `sys.path`),
after `tpu_estimator.compat.install()` has put our TPUEstimator, TPU ops, TPUClusterResolver and
`tensorflow.contrib.{tpu,cluster_resolver,summary}` behind TensorFlow's names. With `use_tpu=True` the program
runs on shards: GPUs when present, otherwise logical CPU devices.

Before the program starts, one line (on stdout) says how many shards it runs on and that a TPU address given to the program
(`--tpu=...`, `--tpu_name=...`, `--master=grpc://...`) is ignored: everything runs on this machine.
To run the program on a cluster of `tpu-estimator-server` workers instead, pass their addresses as the program's
`--tpu=grpc://host:port,...` and set `TPU_ESTIMATOR_TPU_ADDRESSES=cluster` (docs/DISTRIBUTED.md).

Environment:
  TPU_ESTIMATOR_NUM_SHARDS   the shard count, overriding `TPUConfig(num_shards=...)` and the GPU count.
  TPU_ESTIMATOR_TRACEBACK=1  same as --traceback.
  TPU_ESTIMATOR_TPU_ADDRESSES  `ignore` (set by the launcher when unset): a `TPUClusterResolver(tpu='grpc://...')`
                             runs in this process; `cluster`: the addresses are the cluster's workers.
  TF_USE_LEGACY_KERAS        set to 1 (by `import tpu_estimator`) on TensorFlow 2.16+ when the tf-keras package
                             is installed and the variable is unset, so `tf.keras` and `tf.compat.v1.layers` are
                             Keras 2, as TPUEstimator programs expect. TensorFlow reads it when `tf.keras` is
                             first used: if that happened already, the launcher restarts itself once with the
                             variable set.

A `ValueError`/`TypeError`/`NotImplementedError` raised by tpu_estimator's own checks (for instance
`num_cores_per_replica` model parallelism, which needs a TPU) is a configuration error: instead of a deep
traceback, two lines: where the program called into us, then the error, which says what to change. The exit
status is 1. A failed check on the program's data inside TensorFlow (an embedding id out of range, a negative
weight: `tf.debugging.Assert` of the embedding engine) is also two lines: what failed, then the error naming the
feature, table, values and valid range. An error TensorFlow raises (an op error such as `InvalidArgumentError`,
or a shape or type error while building the graph) is a few lines: the program's line that called into TensorFlow,
then the error's cause; exit status 1. Other errors (the program's own) propagate with their full traceback.

Each TPUEstimator the program builds with `use_tpu=True` prints one line (on stdout) saying how many shards and hosts
it runs on and where the number comes from (`TPUConfig(num_shards=...)`, `--num_shards`, the GPU count).
"""

import importlib.util
import os
import runpy
import sys
import traceback
from typing import Any, List, Optional, Sequence, Tuple

from tpu_estimator.inputs import data_errors

NUM_SHARDS_ENV = "TPU_ESTIMATOR_NUM_SHARDS"
TRACEBACK_ENV = "TPU_ESTIMATOR_TRACEBACK"
TPU_ADDRESSES_ENV = "TPU_ESTIMATOR_TPU_ADDRESSES"  # read by compat.cluster_resolver
_PROG = "tpu-estimator-run"
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tpu_estimator/
_CONFIG_ERRORS = (ValueError, TypeError, NotImplementedError)


class _UsageError(Exception):
    pass


def _parse(argv: Sequence[str]) -> Tuple[dict, List[str]]:
    """Splits launcher options from `[script|-m module] args...`."""
    options = {"num_shards": None, "traceback": False, "module": None, "verbose": False}
    args = list(argv)
    while args:
        arg = args[0]
        if arg in ("-h", "--help", "-?", "--helpshort", "--helpfull"):
            options["help"] = True
            return options, []
        if arg == "--traceback":
            options["traceback"] = True
            args.pop(0)
        elif arg == "--verbose":
            options["verbose"] = True
            args.pop(0)
        elif arg.startswith("--num_shards"):
            args.pop(0)
            if arg == "--num_shards":
                if not args:
                    raise _UsageError("--num_shards needs a value")
                value = args.pop(0)
            else:
                value = arg.partition("=")[2]
            if not value.isdigit() or int(value) <= 0:
                raise _UsageError("--num_shards must be a positive integer, got {!r}".format(value))
            options["num_shards"] = value
        elif arg == "-m":
            args.pop(0)
            if not args:
                raise _UsageError("-m needs a module name")
            options["module"] = args.pop(0)
            return options, args
        elif arg == "--":
            args.pop(0)
            break
        elif arg.startswith("-"):
            raise _UsageError("unknown launcher option {!r} (program options go after the script)".format(arg))
        else:
            break
    if not args:
        raise _UsageError("no program given")
    return options, args


def _is_ours(frame_file: str) -> bool:
    return os.path.abspath(frame_file).startswith(_PACKAGE_DIR + os.sep)


def _traced_error(exc: BaseException) -> BaseException:
    """The error raised while a `tf.function` was traced, without AutoGraph's re-raise of it.

    AutoGraph re-raises an error of converted code as a new exception (it carries `ag_error_metadata`; the original
    is its `__context__`) whose message lists the converted code's frames, and as a `StagingError` when the type is
    a subclass of the built-in errors: the original is the one-line error our checks raised.
    """
    while getattr(exc, "ag_error_metadata", None) is not None and isinstance(exc.__context__, Exception):
        exc = exc.__context__
    return exc


def _user_frames(frames: List[traceback.FrameSummary]) -> List[traceback.FrameSummary]:
    """The frames of the program's own code (not ours, not installed packages, not the launcher's machinery, not
    AutoGraph's generated code)."""
    site_packages = ("site-packages" + os.sep, "dist-packages" + os.sep)
    return [
        f
        for f in frames
        if not _is_ours(f.filename)
        and not any(p in f.filename for p in site_packages)
        and f.filename != __file__
        and not f.filename.startswith("<frozen")
        and os.path.basename(f.filename) != "runpy.py"
        and "__autograph_generated_file" not in f.filename
    ]


def _config_error_origin(exc: BaseException, outer: Optional[BaseException] = None) -> Optional[str]:
    """`file:line in function` of the program's call into tpu_estimator, if `exc` was raised by our checks.

    Args:
      exc: the error.
      outer: the error that re-raised `exc` (AutoGraph's, see `_traced_error`), whose frames are searched for the
        program's call when `exc`'s own frames have none.
    """
    if not isinstance(exc, _CONFIG_ERRORS):
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or not _is_ours(frames[-1].filename):
        return None
    user = _user_frames(frames)
    if not user and outer is not None:
        user = _user_frames(traceback.extract_tb(outer.__traceback__))
    if not user:
        return "tpu_estimator"
    return "{}:{} in {}".format(user[-1].filename, user[-1].lineno, user[-1].name)


def _raised_by_tensorflow(exc: BaseException) -> bool:
    """A TensorFlow op error, or an error raised inside TensorFlow's own code (shapes, types, graph building)."""
    if any(c.__module__.startswith("tensorflow.") and c.__name__.endswith("Error") for c in type(exc).__mro__[:-2]):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and f"{os.sep}tensorflow{os.sep}" in frames[-1].filename


def _tensorflow_error_lines(exc: BaseException) -> Optional[str]:
    """An error TensorFlow raised, in a few lines: where in the program, then the error's cause; None for others.

    The program's innermost frame is where it called into TensorFlow (or into us); TensorFlow's own frames and ours
    are left to `--traceback`. An op error's message is its cause (the failed op's message, without the graph
    error's header and decorations: `commands.op_error_cause`).
    """
    if not _raised_by_tensorflow(exc):
        return None
    user = _user_frames(traceback.extract_tb(exc.__traceback__))
    message = str(exc).strip()
    import tensorflow as tf

    if isinstance(exc, tf.errors.OpError):
        from tpu_estimator.app import commands

        message = commands.op_error_cause(exc)
    message = message.splitlines()[0] if message else ""
    lines = ["{}: TensorFlow raised an error (--traceback shows the full traceback)".format(_PROG)]
    if user:
        frame = user[-1]
        lines.append('  File "{}", line {}, in {}'.format(frame.filename, frame.lineno, frame.name))
        if frame.line:
            lines.append("    " + frame.line.strip())
    lines.append("{}: {}".format(type(exc).__name__, message[:500]))
    return "\n".join(lines) + "\n"


_TPU_FLAGS = ("--tpu", "--tpu_name", "--master")


def tpu_addresses(program_args: Sequence[str]) -> List[str]:
    """The TPU addresses given to the program (`--tpu=X`, `--tpu X`, `--tpu_name=X`, `--master=grpc://X`)."""
    found = []
    args = list(program_args)
    for i, arg in enumerate(args):
        name, sep, value = arg.partition("=")
        if name not in _TPU_FLAGS:
            continue
        if not sep:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else ""
        if value and (name != "--master" or value.startswith("grpc://")):
            found.append(f"{name}={value}")
    return found


def describe_run(
    num_shards: Optional[str], num_gpus: int, program_args: Sequence[str], addresses_name_a_cluster: bool = False
) -> str:
    """The line printed before the program runs: its shards and what becomes of the TPU addresses given to it
    (ignored, or with `addresses_name_a_cluster` the cluster's workers)."""
    if num_shards:
        devices = "GPUs" if num_gpus >= int(num_shards) and num_gpus > 0 else "logical CPU devices"
        shards = f"{num_shards} shards on {devices} (--num_shards)"
    else:
        default = max(num_gpus, 1)
        shards = (
            f"the shards of the program's TPUConfig(num_shards=...), else {default} "
            f"({'GPUs' if num_gpus else 'CPU'}); --num_shards=N sets them"
        )
    addresses = tpu_addresses(program_args)
    if addresses and addresses_name_a_cluster:
        return f"{_PROG}: {', '.join(addresses)}: grpc:// addresses name the cluster's workers ({TPU_ADDRESSES_ENV}=cluster)"
    ignored = (
        f"; {', '.join(addresses)} ignored (no TPU: everything runs on this machine)"
        if addresses
        else "; no TPU: everything runs on this machine"
    )
    return f"{_PROG}: running on {shards}{ignored}"


_announced: set = set()
_running = False  # True while the launcher runs a program in this process: TPUEstimators announce their shards.


def shards_line(num_shards: int, source: str, num_hosts: int, devices: str) -> str:
    """The line a TPUEstimator of the program prints under the launcher: its shards, hosts, devices, and why."""
    hosts = "1 host" if num_hosts == 1 else f"{num_hosts} hosts"
    return f"{_PROG}: TPUEstimator runs on {num_shards} shard{'s' if num_shards != 1 else ''} ({source}), {hosts}, {devices}"


def announce_shards(config: Any) -> None:
    """Prints (once per distinct line) how many shards and hosts a TPUEstimator built with `config` runs on.

    Called by `TPUEstimator.__init__`; does nothing unless the launcher is running a program in this process.

    Args:
      config: the TPUEstimator's `tpu_estimator.RunConfig`.
    """
    if not _running:
        return
    from tpu_estimator.hosts import shard_devices as devices_lib

    num_shards = config.num_shards
    configured = config.tpu_config.num_shards
    if config.tpu_cluster is not None:
        layout = config.shard_layout()
        hosts = len({device.split("/device:")[0] for device in layout.devices}) or 1
        line = shards_line(num_shards, "the cluster's devices", hosts, "on the cluster's workers")
    else:
        if os.environ.get(NUM_SHARDS_ENV):
            source = f"--num_shards / {NUM_SHARDS_ENV}"
        elif configured:
            source = f"the program's TPUConfig(num_shards={configured})"
        elif devices_lib.num_gpus():
            source = "one per GPU; TPUConfig(num_shards=None)"
        else:
            source = "no GPU and TPUConfig(num_shards=None); --num_shards=N sets more"
        where = devices_lib.shard_devices(num_shards)[0]
        line = shards_line(num_shards, source, 1, "GPUs" if "GPU" in where else "logical CPU devices")
    if line not in _announced:
        _announced.add(line)
        print(line, flush=True)


def _run_program(options: dict, args: List[str]) -> None:
    from tpu_estimator.app import quiet

    quiet.import_tensorflow(options["verbose"])
    quiet.configure_logging(options["verbose"])
    from tpu_estimator import compat
    from tpu_estimator.hosts import shard_devices as devices

    program_args = args if options["module"] else args[1:]
    # On stdout: an informational line, not an error (stderr stays the program's and its errors').
    on_cluster = os.environ.get(TPU_ADDRESSES_ENV) == "cluster"
    print(describe_run(options["num_shards"], devices.num_gpus(), program_args, on_cluster), flush=True)

    compat.install()
    global _running
    _running = True
    try:
        _run_main(options, args)
    finally:
        _running = False


def _run_main(options: dict, args: List[str]) -> None:
    if options["module"]:
        sys.argv = [options["module"]] + args[:]
        sys.path[0:1] = [os.getcwd()]  # As `python -m`: the working directory first.
        runpy.run_module(options["module"], run_name="__main__", alter_sys=True)
        return
    script = args[0]
    if not os.path.exists(script):
        raise _UsageError("can't open file {!r}: no such file".format(script))
    sys.argv = list(args)
    sys.path[0:1] = [os.path.dirname(os.path.abspath(script))]
    runpy.run_path(script, run_name="__main__")


def _use_legacy_keras(restart: bool) -> None:
    """Makes `tf.keras` Keras 2 for the program (`_keras2.select_keras2()`, which `import tpu_estimator` also did).

    If TensorFlow has already resolved `tf.keras` to Keras 3 in this process, with `restart` (the command line
    entry point) the process is replaced by `python -m tpu_estimator.compat.launcher <same arguments>` with
    `TF_USE_LEGACY_KERAS=1`; otherwise (an in-process call) nothing changes.
    """
    from tpu_estimator import _keras2

    if _keras2.select_keras2() or not restart or not _keras2.keras3_locked_in():
        return
    if _keras2.LEGACY_KERAS_ENV in os.environ or importlib.util.find_spec("tf_keras") is None:
        return
    os.environ[_keras2.LEGACY_KERAS_ENV] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "tpu_estimator.compat.launcher"] + sys.argv[1:])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the program given on the command line; returns the exit status.

    Args:
      argv: the launcher's arguments without the launcher itself (default `sys.argv[1:]`).

    Returns:
      0 on success, 1 on a configuration error raised by tpu_estimator, 2 on a usage error. A program's
      `sys.exit(n)` propagates as `SystemExit`.
    """
    restart = argv is None  # Only the command line entry point may replace the process.
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        options, args = _parse(argv)
    except _UsageError as e:
        sys.stderr.write("{}: error: {}\n\n{}".format(_PROG, e, __doc__))
        return 2
    if options.get("help"):
        sys.stdout.write(__doc__)
        return 0
    _use_legacy_keras(restart)
    if options["num_shards"]:
        os.environ[NUM_SHARDS_ENV] = options["num_shards"]
    os.environ.setdefault(TPU_ADDRESSES_ENV, "ignore")
    show_traceback = options["traceback"] or os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
    try:
        _run_program(options, args)
    except _UsageError as e:
        sys.stderr.write("{}: error: {}\n".format(_PROG, e))
        return 2
    except Exception as e:  # noqa: BLE001 (data and configuration errors in two lines, others re-raised)
        data_message = data_errors.data_error(e)
        if data_message is not None:
            if show_traceback:
                traceback.print_exc()
            sys.stderr.write(
                "{}: the program's data failed a check{}:\n{}: {}\n".format(
                    _PROG,
                    "" if show_traceback else " (--traceback shows the full traceback)",
                    type(e).__name__,
                    data_message,
                )
            )
            return 1
        error = _traced_error(e)
        origin = _config_error_origin(error, outer=e if error is not e else None)
        if origin is None:
            tensorflow_error = _tensorflow_error_lines(e)
            if tensorflow_error is None or show_traceback:
                raise
            sys.stderr.write(tensorflow_error)
            return 1
        if show_traceback:
            traceback.print_exc()
        # Like a Python traceback, the last line is the error itself.
        sys.stderr.write(
            "{}: configuration error raised by tpu_estimator, called from {}{}:\n{}: {}\n".format(
                _PROG,
                origin,
                "" if show_traceback else " (--traceback shows the full traceback)",
                type(error).__name__,
                error,
            )
        )
        return 1
    return 0


if __name__ == "__main__":
    # Through the importable module, not `__main__`, so that TPUEstimators find the launcher (announce_shards).
    from tpu_estimator.compat import launcher

    sys.exit(launcher.main())
