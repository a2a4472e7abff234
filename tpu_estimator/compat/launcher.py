"""Run an unmodified TPUEstimator program on CPUs/GPUs.

Usage:
  tpu-estimator-run [--num_shards=N] [--traceback] script.py [program args...]
  tpu-estimator-run [--num_shards=N] [--traceback] -m package.module [program args...]
  python -m tpu_estimator.compat.launcher ...            (same)

The program runs as `python script.py args...` would (`__name__ == '__main__'`, `sys.argv` = the script and its
arguments, so absl flags and `tf.compat.v1.app.run()` parse them; the script's directory first on `sys.path`),
after `tpu_estimator.compat.install()` has put our TPUEstimator, TPU ops, TPUClusterResolver and
`tensorflow.contrib.{tpu,cluster_resolver,summary}` behind TensorFlow's names. With `use_tpu=True` the program
runs on shards: GPUs when present, otherwise logical CPU devices.

Launcher options (before the script):
  --num_shards=N   run on N shards; sets TPU_ESTIMATOR_NUM_SHARDS.
  --traceback      on a configuration error, print the full traceback too.
  -h, --help       this help.

Environment:
  TPU_ESTIMATOR_NUM_SHARDS   the shard count, overriding `TPUConfig(num_shards=...)` and the GPU count.
  TPU_ESTIMATOR_TRACEBACK=1  same as --traceback.
  TF_USE_LEGACY_KERAS        set to 1 by the launcher when the tf-keras package is installed and the variable is
                             unset, so `tf.keras` and `tf.compat.v1.layers` are Keras 2 (as TPUEstimator programs
                             expect) on TensorFlow 2.16+. TensorFlow reads it when it is imported: if it was
                             imported already (the `tpu-estimator-run` entry point imports it), the launcher
                             restarts itself once with the variable set.

A `ValueError`/`TypeError`/`NotImplementedError` raised by tpu_estimator's own checks (for instance
`num_cores_per_replica` model parallelism, which needs a TPU) is a configuration error: instead of a deep
traceback, two lines: where the program called into us, then the error, which says what to change. The exit
status is 1. Other errors propagate with their full traceback.
"""

import importlib.util
import os
import runpy
import sys
import traceback
from typing import List, Optional, Sequence, Tuple

NUM_SHARDS_ENV = "TPU_ESTIMATOR_NUM_SHARDS"
TRACEBACK_ENV = "TPU_ESTIMATOR_TRACEBACK"
_PROG = "tpu-estimator-run"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_CONFIG_ERRORS = (ValueError, TypeError, NotImplementedError)
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"


class _UsageError(Exception):
    pass


def _parse(argv: Sequence[str]) -> Tuple[dict, List[str]]:
    """Splits launcher options from `[script|-m module] args...`."""
    options = {"num_shards": None, "traceback": False, "module": None}
    args = list(argv)
    while args:
        arg = args[0]
        if arg in ("-h", "--help"):
            options["help"] = True
            return options, []
        if arg == "--traceback":
            options["traceback"] = True
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


def _config_error_origin(exc: BaseException) -> Optional[str]:
    """`file:line in function` of the program's call into tpu_estimator, if `exc` was raised by our checks."""
    if not isinstance(exc, _CONFIG_ERRORS):
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or not _is_ours(frames[-1].filename):
        return None
    site_packages = ("site-packages" + os.sep, "dist-packages" + os.sep)
    user = [
        f
        for f in frames
        if not _is_ours(f.filename)
        and not any(p in f.filename for p in site_packages)
        and f.filename != __file__
        and not f.filename.startswith("<frozen")
    ]
    if not user:
        return "tpu_estimator"
    return "{}:{} in {}".format(user[-1].filename, user[-1].lineno, user[-1].name)


def _run_program(options: dict, args: List[str]) -> None:
    from tpu_estimator import compat

    compat.install()
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
    """Sets TF_USE_LEGACY_KERAS=1 when tf-keras is installed and the variable is unset, before TensorFlow loads.

    If TensorFlow is imported already, the variable would come too late: with `restart` (the command line entry
    point) the process is replaced by `python -m tpu_estimator.compat.launcher <same arguments>` with the variable
    set; otherwise (an in-process call) nothing changes.
    """
    if LEGACY_KERAS_ENV in os.environ or importlib.util.find_spec("tf_keras") is None:
        return
    if "tensorflow" not in sys.modules:
        os.environ[LEGACY_KERAS_ENV] = "1"
    elif restart:
        os.environ[LEGACY_KERAS_ENV] = "1"
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
    show_traceback = options["traceback"] or os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
    try:
        _run_program(options, args)
    except _UsageError as e:
        sys.stderr.write("{}: error: {}\n".format(_PROG, e))
        return 2
    except _CONFIG_ERRORS as e:
        origin = _config_error_origin(e)
        if origin is None:
            raise
        if show_traceback:
            traceback.print_exc()
        # Like a Python traceback, the last line is the error itself.
        sys.stderr.write(
            "{}: configuration error raised by tpu_estimator, called from {}{}:\n{}: {}\n".format(
                _PROG, origin, "" if show_traceback else " (--traceback shows the full traceback)", type(e).__name__, e
            )
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
