"""`WarmStartSettings`: which variables to initialise from another checkpoint or SavedModel before training."""

import collections
import os
from typing import Optional, Union

import tensorflow as tf

from tpu_estimator.estimator_core import _tf_internal

VocabInfo = tf.compat.v1.train.VocabInfo


class WarmStartSettings(
    collections.namedtuple(
        "WarmStartSettings",
        ["ckpt_to_initialize_from", "vars_to_warm_start", "var_name_to_vocab_info", "var_name_to_prev_var_name"],
    )
):
    """Arguments of `tf.compat.v1.train.warm_start`, applied when training starts without a checkpoint.

    Args:
      ckpt_to_initialize_from: a checkpoint file or a directory holding checkpoints.
      vars_to_warm_start: a regular expression, a list of names/regexes or `Variable`s; default all trainable.
      var_name_to_vocab_info: dict of variable name to `VocabInfo` (remapped vocabularies).
      var_name_to_prev_var_name: dict of variable name to its name in the checkpoint.

    Raises:
      ValueError: `ckpt_to_initialize_from` is empty.
    """

    def __new__(
        cls,
        ckpt_to_initialize_from,
        vars_to_warm_start=".*",
        var_name_to_vocab_info=None,
        var_name_to_prev_var_name=None,
    ):
        if not ckpt_to_initialize_from:
            raise ValueError("`ckpt_to_initialize_from` MUST be set in WarmStartSettings")
        return super(WarmStartSettings, cls).__new__(
            cls,
            ckpt_to_initialize_from,
            vars_to_warm_start,
            var_name_to_vocab_info or {},
            var_name_to_prev_var_name or {},
        )


def default_warm_start_settings(
    warm_start_from: Union[None, str, bytes, os.PathLike, WarmStartSettings],
) -> Optional[WarmStartSettings]:
    """`WarmStartSettings` for `Estimator(warm_start_from=...)`.

    A path warm-starts every variable (`vars_to_warm_start='.*'`); a SavedModel directory (one with
    `variables/variables.index`) is read through its variables checkpoint.

    Raises:
      ValueError: `warm_start_from` is neither a path nor a `WarmStartSettings`.
    """
    if warm_start_from is None:
        return None
    if hasattr(warm_start_from, "__fspath__"):
        warm_start_from = os.fspath(warm_start_from)
    if isinstance(warm_start_from, (str, bytes)):
        index = os.path.join(
            tf.compat.as_text(_tf_internal.get_variables_dir(warm_start_from)), tf.compat.as_text("variables.index")
        )
        if tf.compat.v1.gfile.Exists(index):
            tf.compat.v1.logging.info("Warm-starting from a SavedModel")
            return WarmStartSettings(ckpt_to_initialize_from=_tf_internal.get_variables_path(warm_start_from))
        return WarmStartSettings(ckpt_to_initialize_from=warm_start_from)
    if isinstance(warm_start_from, WarmStartSettings):
        return warm_start_from
    raise ValueError(
        "warm_start_from must be a string or a WarmStartSettings, instead got {}".format(type(warm_start_from))
    )


def warm_start(settings: WarmStartSettings) -> None:
    """Runs `tf.compat.v1.train.warm_start` with `settings` in the current graph."""
    tf.compat.v1.logging.info("Warm-starting with WarmStartSettings: %s" % (settings,))
    tf.compat.v1.train.warm_start(*settings)
