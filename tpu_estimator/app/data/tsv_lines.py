"""Whether a Criteo TSV line is well formed, without TensorFlow: the checks `criteo.parse_tsv_lines` makes in the
graph, for the command line's sample check of the data files before TensorFlow is imported (`sample_check`).
"""

import re

from tpu_estimator.app.data.schema import NUM_DENSE_FEATURES, TSV_NUM_FIELDS

# Dense values are integers of at most this many digits (so they always fit in int64).
_MAX_DENSE_DIGITS = 18
_DENSE_REGEX = rf"-?[0-9]{{1,{_MAX_DENSE_DIGITS}}}"
_DENSE_PATTERN = re.compile(_DENSE_REGEX)


def malformed_reason(line: str, allow_unlabeled: bool = False) -> str:
    """Why a Criteo TSV line is malformed ('' when it is well formed); mirrors the checks `parse_tsv_lines` does.

    With `allow_unlabeled`, a line of 39 fields (no label, as Criteo's `test.txt`) or with an empty label is
    well formed.
    """
    fields = line.split("\t")
    if allow_unlabeled and len(fields) == TSV_NUM_FIELDS - 1:
        fields = [""] + fields
    if len(fields) != TSV_NUM_FIELDS:
        expected = f"{TSV_NUM_FIELDS} (or {TSV_NUM_FIELDS - 1} without a label)" if allow_unlabeled else TSV_NUM_FIELDS
        return f"expected {expected} tab-separated fields, got {len(fields)}"
    if fields[0] not in ("0", "1") and not (allow_unlabeled and fields[0] == ""):
        return f"label must be 0 or 1, got `{_shorten(fields[0])}`"
    for j, value in enumerate(fields[1 : 1 + NUM_DENSE_FEATURES]):
        if value and not _DENSE_PATTERN.fullmatch(value):
            return (
                f"dense feature I{j + 1} must be an integer of at most {_MAX_DENSE_DIGITS} digits, "
                f"got `{_shorten(value)}`"
            )
    return ""


def _shorten(value: str, limit: int = 40) -> str:
    value = value.encode("unicode_escape").decode("ascii")
    return value if len(value) <= limit else value[: limit - 3] + "..."
