"""The command line's sample check of the data files, before TensorFlow is imported: every file is opened and its
first rows are checked, and every problem found in that sample is reported at once (up to `MAX_REPORTED`), each
as `file:line: reason`, so that one run names them all within seconds instead of one per run after the graph is built.

TSV files: the first `rows` lines of each (`tsv_lines.malformed_reason`, the checks the reader makes in the graph).
TFRecord files: the framing of the first `rows` records of each (lengths and their masked CRC-32C, the data's CRC);
the records' `tf.train.Example` content is left to TensorFlow's parser. `ZLIB` files are opened only.
"""

import gzip
import struct
from typing import IO, Iterator, List, Sequence

from tpu_estimator.app.data import files as files_lib
from tpu_estimator.app.data.tsv_lines import malformed_reason
from tpu_estimator.app.errors import CliError

DEFAULT_ROWS = 1000
MAX_REPORTED = 20


def _open(path: str, compression: str) -> IO[bytes]:
    return gzip.open(path, "rb") if compression == "GZIP" else open(path, "rb")


def tsv_problems(path: str, rows: int, compression: str = "", allow_unlabeled: bool = False) -> Iterator[str]:
    """`path:line: reason` for each malformed line among the first `rows` lines of a Criteo TSV file."""
    with _open(path, compression) as f:
        for number in range(1, rows + 1):
            raw = f.readline()
            if not raw:
                return
            raw = (raw[:-1] if raw.endswith(b"\n") else raw).replace(b"\r", b"")  # as TextLineDataset: no \r
            reason = malformed_reason(raw.decode("utf-8", "replace"), allow_unlabeled)  # bytes, as the reader reads
            if reason:
                yield f"{path}:{number}: {reason}"


def tfrecord_problems(path: str, rows: int, compression: str = "") -> Iterator[str]:
    """`path:record N (byte B): reason` for the first damaged record among the first `rows` records of a file."""
    with _open(path, compression) as f:
        offset = 0
        for number in range(1, rows + 1):
            header = f.read(12)
            if not header:
                return
            where = f"{path}:record {number} (byte {offset})"
            if len(header) < 12:
                yield f"{where}: truncated record header"
                return
            length, length_crc = struct.unpack("<QI", header)
            if files_lib.masked_crc32c(header[:8]) != length_crc:
                yield f"{where}: corrupted record length (not a TFRecord file, or damaged)"
                return
            data = f.read(length)
            footer = f.read(4)
            if len(data) < length or len(footer) < 4:
                yield f"{where}: truncated record ({length} bytes announced)"
                return
            if files_lib.masked_crc32c(data) != struct.unpack("<I", footer)[0]:
                yield f"{where}: corrupted record data (its CRC does not match)"
                return
            offset += 12 + length + 4


def check_sample(
    paths: Sequence[str],
    source: str,
    what: str,
    compression: str = "",
    rows: int = DEFAULT_ROWS,
    allow_unlabeled: bool = False,
    skip_malformed: bool = False,
    fix: str = "data.skip_malformed=true skips malformed lines",
) -> None:
    """Opens every local file of `paths` and checks its first `rows` rows; reports every problem found at once.

    Args:
      paths: the data files (remote ones are left to TensorFlow).
      source: 'tsv' or 'tfrecord'.
      what: what they are, for the message (`data.train_paths`, `--input`).
      compression: '', 'GZIP' or 'ZLIB' (ZLIB files are only opened).
      rows: rows checked at the start of each file (0: the files are only opened).
      allow_unlabeled: TSV lines of 39 fields (no label) are well formed (predict's input).
      skip_malformed: malformed TSV lines are skipped by the reader: only the files are opened.
      fix: what the message says to do about malformed lines, besides fixing them.

    Raises:
      CliError: a file cannot be opened or read, or the sample holds problems: the first line says how many, then
        one line per problem (`file:line: reason`), at most `MAX_REPORTED`.
    """
    problems: List[str] = []
    more = 0
    for path in paths:
        if files_lib.is_remote(path):
            continue
        try:
            if compression == "ZLIB" or rows <= 0 or (source == "tsv" and skip_malformed):
                with _open(path, compression) as f:
                    f.read(1)
                continue
            found = (
                tsv_problems(path, rows, compression, allow_unlabeled)
                if source == "tsv"
                else tfrecord_problems(path, rows, compression)
            )
            for problem in found:
                if len(problems) < MAX_REPORTED:
                    problems.append(problem)
                else:
                    more += 1
        except (OSError, EOFError) as e:  # unreadable, or not the compression configured
            problems.append(f"{path}: cannot be read{' as ' + compression if compression else ''}: {e}")
    if problems:
        raise CliError(sample_message(problems, more, what, rows, fix))


def sample_message(problems: List[str], more: int, what: str, rows: int, fix: str) -> str:
    """The message: a summary line, then one indented line per problem."""
    count = len(problems) + more
    head = (
        f"{what}: {count} problem{'s' if count != 1 else ''} in the first {rows} rows of each file "
        f"(--validate_rows=N sets how many are checked before training; {fix}):"
    )
    lines = [head] + [f"  {p}" for p in problems]
    if more:
        lines.append(f"  ... and {more} more in the sample")
    return "\n".join(lines)
