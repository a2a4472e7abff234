"""Quiet TensorFlow for the command-line tools: no start-up noise, Python logs at warnings, C++ logs at errors.

Importing TensorFlow prints ~10 lines from its C++ runtime (oneDNN notice, "Unable to register cuDNN factory",
"Could not find cuda drivers", CPU instruction notice, TensorRT warning) that say nothing about the user's run.
`import_tensorflow()` captures the process's stderr (file descriptor 2) while TensorFlow is imported and its GPU
platform initialized (the "failed call to cuInit" line on machines without GPU drivers), writes back every line
except those, and sets `TF_CPP_MIN_LOG_LEVEL=2` (C++ errors only) unless the environment already sets it. C++
warnings are about TensorFlow's internals, not the user's run: the runtime logs "Local rendezvous is aborting with
status: ..." for every error an input pipeline or infeed thread passes on (the error itself reaches the program), and
at the end of `predict()` (its input's end stops the step). A normal end of `train()` or `evaluate()` on one process
logs none: the embedding infeed's last run completes (`input_pipeline.TensorInfeedHook`). With `verbose=True`
nothing is filtered and the C++ INFO lines are kept.
"""

import logging
import os
import re
import sys
import tempfile
from types import ModuleType
from typing import Optional

# Start-up lines of TensorFlow's C++ runtime (TF 2.15 and 2.21 formats) that are not about the user's run.
NOISE_PATTERNS = (
    r"oneDNN custom operations are on",
    r"Could not find cuda drivers on your machine",
    r"Unable to register cu(DNN|FFT|BLAS) factory",
    r"This TensorFlow binary is optimized to use available CPU instructions",
    r"^To enable the following instructions: .* rebuild TensorFlow",
    r"TF-TRT Warning: Could not find TensorRT",
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"failed call to cuInit",
    r"computation placer already registered",
)
_NOISE = re.compile("|".join(f"(?:{p})" for p in NOISE_PATTERNS))


def is_noise(line: str) -> bool:
    """True for a TensorFlow start-up log line that `import_tensorflow` drops."""
    return bool(_NOISE.search(line))


def import_tensorflow(verbose: bool = False) -> ModuleType:
    """Imports TensorFlow without its start-up noise (everything else it prints is kept); returns the module.

    Args:
      verbose: keep every line and TensorFlow's C++ INFO logs.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    if not verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    else:
        import tensorflow as tf

        return tf
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf

            # The GPU platform's initialization logs "failed call to cuInit ... (303)" (an error-level line) on a
            # machine without GPU drivers: do it now, while the start-up noise is filtered, not at the first session.
            tf.config.list_physical_devices("GPU")
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode("utf-8", "replace").splitlines() if not is_noise(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()
    return tf


def configure_logging(verbose: bool = False, verbosity: Optional[int] = None) -> None:
    """TensorFlow's and absl's Python logs: warnings and above (without API deprecation notices); INFO with
    `verbose`; or absl's `verbosity` (1 = debug, 0 = info, -1 = warning, -2 = error, lower = fatal)."""
    from absl import logging as absl_logging

    tf = import_tensorflow(verbose)
    logger = tf.get_logger()
    # With its own handler, propagating would print every line twice (absl's handler too); without one (absl's
    # app.run was first), its records must propagate to absl's handler to be printed at all.
    logger.propagate = not logger.handlers
    if verbose or verbosity is not None:
        v = 0 if verbosity is None else verbosity
        logger.setLevel(
            "DEBUG" if v >= 1 else "INFO" if v == 0 else "WARNING" if v == -1 else "ERROR" if v == -2 else "FATAL"
        )
        absl_logging.set_verbosity(v)
        return
    logger.setLevel("WARNING")
    if _not_a_deprecation_notice not in logger.filters:
        logger.addFilter(_not_a_deprecation_notice)
    absl_logging.set_verbosity(absl_logging.WARNING)  # TensorFlow also logs through absl (SavedModel loading)


def _not_a_deprecation_notice(record: logging.LogRecord) -> bool:
    return not record.pathname.endswith("deprecation.py")
