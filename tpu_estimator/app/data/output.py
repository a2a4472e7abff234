"""Output files written whole or not at all: `replacing(paths)`.

A data command that fails part way (a malformed line, a full disk, an interrupt) must not leave a truncated file
where its output goes, nor destroy the file that was there. `replacing` hands out temporary paths beside the
outputs (same directory, so the rename stays on one filesystem) and renames them over the outputs only when the
body succeeded; otherwise it removes them and the outputs are as they were. TensorFlow is imported when used.
"""

import contextlib
import os
import uuid
from typing import Iterator, List, Sequence


def temporary_path(path: str) -> str:
    """A hidden temporary file name beside `path`: `dir/.name.tmp-<hex>`."""
    directory, name = os.path.split(path)
    return os.path.join(directory, ".{}.tmp-{}".format(name, uuid.uuid4().hex[:12]))


@contextlib.contextmanager
def replacing(paths: Sequence[str]) -> Iterator[List[str]]:
    """Yields one temporary path per path of `paths`; when the body returns, renames each over its path (replacing
    a file that is there); when it raises, removes them and leaves `paths` untouched.

    Args:
      paths: the output files (their directories are created).
    """
    import tensorflow as tf

    temporaries = [temporary_path(p) for p in paths]
    for path in paths:
        directory = os.path.dirname(path)
        if directory:
            tf.io.gfile.makedirs(directory)
    try:
        yield temporaries
    except BaseException:
        for temporary in temporaries:
            if tf.io.gfile.exists(temporary):
                tf.io.gfile.remove(temporary)
        raise
    for temporary, path in zip(temporaries, paths):
        tf.io.gfile.rename(temporary, path, overwrite=True)
