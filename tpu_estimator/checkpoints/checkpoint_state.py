"""The `checkpoint` state file of a `model_dir`, checked before it is trusted: `verify_checkpoint_state`.

TensorFlow reads `MODEL_DIR/checkpoint` to find the checkpoint to restore. When that file is unreadable, damaged
or names checkpoint files that are not there, TensorFlow logs a warning and restores nothing: training starts again
from step 0 and its saves overwrite, then delete (`keep_checkpoint_max`), the checkpoints in the directory. The
Saver writes the file atomically (a complete temporary file renamed over it), so a damaged file comes from outside
the trainer (a copy or sync tool, a filesystem fault, a hand edit). Which checkpoint to resume from is then the
user's decision, not ours: `verify_checkpoint_state` raises `DamagedCheckpointStateError` naming the file, the
newest intact checkpoint and the line that makes the file point at it. The same error is raised when the file names
an older checkpoint than an intact one in the directory (training would overwrite the newer one).

`remove_interrupted_saves` removes what a save interrupted by a crash leaves behind (the Saver's
`model.ckpt-N_temp` directories and the temporary files of atomic writes); the trainer calls it while it holds the
`model_dir` lock, so no other writer's save is in progress.
"""

import os
import re
from typing import Dict, Optional, Tuple

import tensorflow as tf
from google.protobuf import text_format

from tpu_estimator import _tf_internal

STATE_FILE_NAME = "checkpoint"
# The Estimator's checkpoints: `model.ckpt-<global step>`.
_CHECKPOINT_INDEX = re.compile(r"^model\.ckpt-(\d+)\.index$")
# Left by interrupted saves: the Saver's sharded-save directory (`<prefix>_temp`, older TensorFlow
# `<prefix>_temp_<uuid hex>`) and `file_io.atomic_write_string_to_file`'s `<name>.tmp<uuid hex>`.
_INTERRUPTED_SAVE = re.compile(
    r"^(model\.ckpt-\d+_temp(_[0-9a-f]{32})?|(checkpoint|graph\.pbtxt|model\.ckpt-\d+\.meta)\.tmp[0-9a-f]{32})$"
)

_log = tf.get_logger()


class DamagedCheckpointStateError(ValueError):
    """`MODEL_DIR/checkpoint` cannot be trusted: it is unreadable, damaged, names missing checkpoint files, or is
    missing or older while checkpoints (newer ones) are in the directory. The message says what to do."""


def intact_checkpoints(model_dir: str) -> Dict[int, str]:
    """`{global step: checkpoint prefix}` of the `model.ckpt-N` checkpoints in `model_dir` whose index is readable
    and whose `global_step` is N (the data files are read for it)."""
    found = {}
    try:
        names = tf.io.gfile.listdir(model_dir)
    except tf.errors.NotFoundError:
        return found
    for name in names:
        match = _CHECKPOINT_INDEX.match(name)
        if not match:
            continue
        step = int(match.group(1))
        prefix = os.path.join(model_dir, name[: -len(".index")])
        try:
            value = tf.train.load_checkpoint(prefix).get_tensor(tf.compat.v1.GraphKeys.GLOBAL_STEP)
        except (tf.errors.OpError, ValueError):
            continue  # Left by an interrupted save: not a checkpoint.
        if int(value) == step:
            found[step] = prefix
    return found


def _step_of(path: str) -> Optional[int]:
    match = re.match(r"^model\.ckpt-(\d+)$", os.path.basename(path))
    return int(match.group(1)) if match else None


def _named_checkpoint(model_dir: str) -> Tuple[Optional[str], Optional[str]]:
    """(the checkpoint the state file names, None) or (None, why the file cannot be trusted); (None, None) when
    there is no state file."""
    path = os.path.join(model_dir, STATE_FILE_NAME)
    if not tf.io.gfile.exists(path):
        return None, None
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            raw = f.read()
    except tf.errors.OpError as e:
        return None, "it cannot be read ({})".format(e.message)
    try:
        state = _tf_internal.parse_checkpoint_state(raw.decode("utf-8"))
    except (text_format.ParseError, UnicodeDecodeError) as e:
        return None, "it does not parse ({}; {} bytes)".format(str(e).splitlines()[0], len(raw))
    if not state.model_checkpoint_path:
        return None, "it names no checkpoint ({} bytes)".format(len(raw))
    named = state.model_checkpoint_path
    if not os.path.isabs(named) and "://" not in named:
        named = os.path.join(model_dir, named)
    if not tf.io.gfile.exists(named + ".index"):
        return None, "it names {}, whose files are not there".format(named)
    return named, None


def verify_checkpoint_state(model_dir: str, for_training: bool) -> Optional[str]:
    """The checkpoint TensorFlow restores from `model_dir` (None: none), after checking the state file.

    Args:
      model_dir: the model directory.
      for_training: also refuse a state file that names an older checkpoint than an intact one in the directory
        (training from it would overwrite the newer one); readers restore what the file names.

    Returns:
      The path of the checkpoint the state file names, or None when the directory holds no checkpoint.

    Raises:
      DamagedCheckpointStateError: the state file is unreadable, does not parse, names no checkpoint or one whose
        files are missing; it is missing while `model.ckpt-N` checkpoints are there; or (`for_training`) an intact
        checkpoint newer than the one it names is there. The message names the file and says what to do.
    """
    if "://" not in model_dir and not os.path.isdir(model_dir):
        return None
    state_path = os.path.join(model_dir, STATE_FILE_NAME)
    named, damage = _named_checkpoint(model_dir)
    if named is None and damage is None:
        intact = intact_checkpoints(model_dir)
        if not intact:
            return None
        damage = "it is missing"
    elif named is not None and not for_training:
        return named
    else:
        intact = intact_checkpoints(model_dir)
    newest = os.path.basename(intact[max(intact)]) if intact else None
    if damage is None:
        named_step = _step_of(named)
        if newest is None or named_step is None or named_step >= max(intact):
            return named
        raise _damaged(
            state_path,
            "it names {} but {} is newer (a save interrupted before it updated the file, or a hand edit); "
            "training from it would overwrite the newer one".format(os.path.basename(named), newest),
            newest,
            also="; to resume from {}, move the newer model.ckpt-* files out of {}".format(
                os.path.basename(named), model_dir
            ),
        )
    if newest is None:
        raise _damaged(
            state_path,
            damage + " and the directory holds no intact model.ckpt-* checkpoint",
            None,
            also="; delete {} to start from step 0 in this directory, or use another model_dir".format(state_path),
        )
    raise _damaged(
        state_path,
        damage + "; TensorFlow would start again from step 0 and overwrite the checkpoints there",
        newest,
        also="; or use another model_dir to start afresh",
    )


def _damaged(state_path: str, damage: str, newest: Optional[str], also: str) -> DamagedCheckpointStateError:
    fix = ""
    if newest is not None:
        fix = "; to resume from the newest intact checkpoint, {}, write {} with the one line '{}'".format(
            newest, state_path, 'model_checkpoint_path: "{}"'.format(newest)
        )
    return DamagedCheckpointStateError(
        "model_dir {}: the checkpoint state file {} cannot be trusted: {}{}{}.".format(
            os.path.dirname(state_path), state_path, damage, fix, also
        )
    )


def remove_interrupted_saves(model_dir: str) -> None:
    """Removes the leftovers of saves interrupted in `model_dir` (`model.ckpt-N_temp` directories, temporary files
    of atomic writes), logging what it removed. Call only as the directory's one writer (holding its lock)."""
    try:
        names = tf.io.gfile.listdir(model_dir)
    except tf.errors.NotFoundError:
        return
    for name in names:
        name = name.rstrip("/")
        if not _INTERRUPTED_SAVE.match(name):
            continue
        path = os.path.join(model_dir, name)
        try:
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
        except tf.errors.NotFoundError:
            continue
        _log.warning("Removed %s, left by a checkpoint save that was interrupted.", path)
