"""The command line's error type, and the messages of data errors TensorFlow raises (no TensorFlow import)."""

import re
from typing import Optional


class CliError(Exception):
    """A problem with the command line, the config, the data or the model directory.

    The command line prints it as one line (`tpu-estimator SUBCOMMAND: error: MESSAGE`) and exits with status 2;
    the message names the flag, key path, file (and line) or directory and says what to do.
    """


# `assertion failed: [message] [value] [value]` in a TensorFlow error: a check on the data failed (an embedding id
# out of range, a negative weight). Assert's string data comes with its quotes escaped.
_ASSERTION = re.compile(r"assertion failed: \[(.*?)\]((?: \[[^\]\n]*\])*)[ \t]*(?:\n|$)", re.S)


def data_error(error: BaseException) -> Optional[str]:
    """The one-line message of a failed check on the data inside a TensorFlow error, else None.

    TensorFlow reports a failed `tf.debugging.Assert` (our checks of ids, weights, ...) as an `OpError` whose text
    holds `assertion failed: [Feature 'a' (table 't'): ids must be in [0, 500) (vocabulary_size); smallest and
    largest id:] [1] [777]` among the graph's node names and stack traces. This returns `Feature 'a' (table 't'):
    ids must be in [0, 500) (vocabulary_size); smallest and largest id: 1, 777`.

    Args:
      error: any exception (only TensorFlow op errors, recognised by their `node_def` attribute, are read).

    Returns:
      The message, or None when `error` is not a failed check.
    """
    if not hasattr(error, "node_def"):
        return None
    match = _ASSERTION.search(str(getattr(error, "message", error)))
    if match is None:
        return None
    text = match.group(1).replace("\\'", "'").replace('\\"', '"').strip()
    values = re.findall(r"\[([^\]\n]*)\]", match.group(2))
    if values:
        text = f"{text} {', '.join(v.strip() for v in values)}"
    return text
