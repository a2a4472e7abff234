"""Settings read from environment variables (each user names its variable and default)."""

import os


def positive_secs(name: str, default: float) -> float:
    """`$name` as a number of seconds; `default` when it is unset or blank.

    Raises:
      ValueError: the variable is not a positive finite number (the message names it and its value).
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        secs = float(text)
    except ValueError:
        secs = float("nan")
    if not 0 < secs < float("inf"):
        raise ValueError("{}={!r} must be a positive number of seconds.".format(name, text))
    return secs
