"""Failed checks on the user's data, which TensorFlow reports from inside a session: their message first.

The embedding engine checks ids and weights with `tf.debugging.Assert` (`Feature 'a' (table 't'): ids must be in
[0, 500) (vocabulary_size); smallest and largest id:` and the two ids). TensorFlow raises a failed check as an
`OpError` whose text starts with its own words ("Graph execution error", the node, its stack) and holds ours as
`assertion failed: [message] [value] [value]`. The input pipeline checks that the training input is finite
(`Non-finite training input features['x'] (from input_fn) : Tensor had NaN values`, `input_pipeline.checked_finite`).
`data_error()` reads either out; `named_in_first_line()` re-raises such an
error with that message as its first line. No TensorFlow import.
"""

import contextlib
import re
from typing import Iterator, Optional

# Assert's string data comes with its quotes escaped.
_ASSERTION = re.compile(r"assertion failed: \[(.*?)\]((?: \[[^\]\n]*\])*)[ \t]*(?:\n|$)", re.S)
_NON_FINITE_INPUT = re.compile(r"(Non-finite training input [^\n]*? : Tensor had (?:Inf and NaN|NaN|Inf) values)")


def data_error(error: BaseException) -> Optional[str]:
    """The one-line message of a failed check on the data inside a TensorFlow error, else None.

    Args:
      error: any exception (only TensorFlow op errors, recognised by their `node_def` attribute, are read).

    Returns:
      `Feature 'a' (table 't'): ids must be in [0, 500) (vocabulary_size); smallest and largest id: 1, 777`, or None
      when `error` is not a failed check.
    """
    if not hasattr(error, "node_def"):
        return None
    non_finite = _NON_FINITE_INPUT.search(str(getattr(error, "message", error)))
    if non_finite:
        return non_finite.group(1)
    match = _ASSERTION.search(str(getattr(error, "message", error)))
    if match is None:
        return None
    text = match.group(1).replace("\\'", "'").replace('\\"', '"').strip()
    values = re.findall(r"\[([^\]\n]*)\]", match.group(2))
    if values:
        text = f"{text} {', '.join(v.strip() for v in values)}"
    return text


@contextlib.contextmanager
def named_in_first_line() -> Iterator[None]:
    """Re-raises a failed data check as the same error type whose message starts with what failed.

    TensorFlow's text follows on the next lines. Other errors pass unchanged.
    """
    try:
        yield
    except Exception as error:
        message = data_error(error)
        if message is None or str(getattr(error, "message", "")).startswith(message):
            raise
        try:
            named = type(error)(error.node_def, error.op, f"{message}\n\n{error.message}")
        except TypeError:  # an error type whose constructor differs: keep the original
            raise error from None
        raise named from None
