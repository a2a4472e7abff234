"""Checks of data files before TensorFlow reads them (no TensorFlow import): present, not empty, and in the
format the config says (a TSV file is text, a TFRecord file starts with a valid record header).

Remote paths (`gs://...`, anything with `://`) are left to TensorFlow.
"""

import glob
import os
import struct
from typing import List, Sequence

from tpu_estimator.app.errors import CliError


def _crc32c_table() -> List[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of `data`, as TFRecord files use."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The masked CRC TFRecord files store (`((crc >> 15) | (crc << 17)) + 0xa282ead8`)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def is_remote(path: str) -> bool:
    return "://" in path


def expand(patterns: Sequence[str], what: str) -> List[str]:
    """The files matching local `patterns` (sorted; remote patterns are kept as they are).

    Args:
      patterns: paths or glob patterns.
      what: what they are, for the message (`data.train_paths`, `--input`).

    Raises:
      CliError: a pattern matches no file, or names a directory.
    """
    files = []
    for pattern in patterns:
        if is_remote(pattern):
            files.append(pattern)
            continue
        matched = sorted(glob.glob(os.path.expanduser(pattern)))
        if not matched:
            raise CliError(f"{what}: no such file: {pattern}")
        for path in matched:
            if os.path.isdir(path):
                raise CliError(f"{what}: {path} is a directory; give the data files (a glob like {path}/*.tsv)")
        files.extend(matched)
    return sorted(set(files))


def looks_like_tfrecord(path: str) -> bool:
    """True when the file starts with a valid TFRecord header (length and its masked CRC)."""
    with open(path, "rb") as f:
        header = f.read(12)
    if len(header) < 12:
        return False
    (crc,) = struct.unpack("<I", header[8:12])
    return masked_crc32c(header[:8]) == crc


def check_files(files: Sequence[str], source: str, what: str, compression: str = "", allow_empty: bool = False):
    """Checks local `files` are readable, not all empty, and in format `source` ('tsv' or 'tfrecord').

    Raises:
      CliError: naming the file and what to do.
    """
    local = [f for f in files if not is_remote(f)]
    for path in local:
        if not os.access(path, os.R_OK):
            raise CliError(f"{what}: {path}: permission denied")
    if not allow_empty and local and len(local) == len(files) and all(os.path.getsize(f) == 0 for f in local):
        names = ", ".join(local[:3]) + (", ..." if len(local) > 3 else "")
        raise CliError(f"{what}: no examples: the file{'s are' if len(local) > 1 else ' is'} empty ({names})")
    if compression:
        return
    for path in local:
        if os.path.getsize(path) == 0:
            continue
        tfrecord = looks_like_tfrecord(path)
        if source == "tfrecord" and not tfrecord:
            raise CliError(
                f"{what}: {path} is not a TFRecord file (no valid record header); for Criteo text files use "
                "data.source=tsv (predict: --input_format=tsv)"
            )
        if source == "tsv" and tfrecord:
            raise CliError(
                f"{what}: {path} is a TFRecord file, not Criteo TSV text; use data.source=tfrecord "
                "(predict: --input_format=tfrecord)"
            )
