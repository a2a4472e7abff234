"""The command line's error type, and the messages of data errors TensorFlow raises (no TensorFlow import)."""

from tpu_estimator.inputs.data_errors import data_error


class CliError(Exception):
    """A problem with the command line, the config, the data or the model directory.

    The command line prints it as one line (`tpu-estimator SUBCOMMAND: error: MESSAGE`) and exits with status 2;
    the message names the flag, key path, file (and line) or directory and says what to do.
    """


__all__ = ["CliError", "data_error"]
