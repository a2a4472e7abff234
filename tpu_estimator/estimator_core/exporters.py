"""Exporters run by `train_and_evaluate` after each evaluation: `FinalExporter`, `LatestExporter`."""

import abc
import os
from typing import Any, Dict, Optional

import tensorflow as tf


class Exporter(abc.ABC):
    """Exports a trained model after an evaluation in `train_and_evaluate` (to `<model_dir>/export/<name>`)."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The exporter's name: the directory under `<model_dir>/export` its exports go to."""

    @abc.abstractmethod
    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        """Exports `checkpoint_path`'s model under `export_path`; returns what it exported (or None)."""


class _SavedModelExporter(object):
    def __init__(self, name: str, serving_input_receiver_fn, assets_extra=None, as_text: bool = False):
        self.name = name
        self._serving_input_receiver_fn = serving_input_receiver_fn
        self._assets_extra = assets_extra
        self._as_text = as_text

    def export(self, estimator, export_path: str, checkpoint_path: str):
        return estimator.export_saved_model(
            export_path,
            self._serving_input_receiver_fn,
            assets_extra=self._assets_extra,
            as_text=self._as_text,
            checkpoint_path=checkpoint_path,
        )


class FinalExporter(Exporter):
    """Exports once, after the evaluation of the final checkpoint (global step >= the train spec's `max_steps`).

    Args:
      name: the export directory name under `<model_dir>/export`.
      serving_input_receiver_fn: returns a `ServingInputReceiver`.
      assets_extra: dict of destination (under `assets.extra`) to source file.
      as_text: write `saved_model.pbtxt`.
    """

    def __init__(self, name: str, serving_input_receiver_fn, assets_extra=None, as_text: bool = False):
        self._exporter = _SavedModelExporter(name, serving_input_receiver_fn, assets_extra, as_text)

    @property
    def name(self) -> str:
        return self._exporter.name

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        del eval_result
        if not is_the_final_export:
            return None
        tf.compat.v1.logging.info("Performing the final export in the end of training.")
        return self._exporter.export(estimator, export_path, checkpoint_path)


class LatestExporter(Exporter):
    """Exports after every evaluation, keeping the `exports_to_keep` most recent exports.

    Args:
      name: the export directory name under `<model_dir>/export`.
      serving_input_receiver_fn: returns a `ServingInputReceiver`.
      assets_extra: dict of destination (under `assets.extra`) to source file.
      as_text: write `saved_model.pbtxt`.
      exports_to_keep: number of exports kept (None: all).

    Raises:
      ValueError: `exports_to_keep` is not positive.
    """

    def __init__(
        self,
        name: str,
        serving_input_receiver_fn,
        assets_extra=None,
        as_text: bool = False,
        exports_to_keep: Optional[int] = 5,
    ):
        self._exporter = _SavedModelExporter(name, serving_input_receiver_fn, assets_extra, as_text)
        if exports_to_keep is not None and exports_to_keep <= 0:
            raise ValueError("`exports_to_keep`, if provided, must be positive number")
        self._exports_to_keep = exports_to_keep

    @property
    def name(self) -> str:
        return self._exporter.name

    def export(self, estimator, export_path, checkpoint_path, eval_result: Dict[str, Any], is_the_final_export):
        del eval_result, is_the_final_export
        result = self._exporter.export(estimator, export_path, checkpoint_path)
        delete_old_exports(export_path, self._exports_to_keep)
        return result


def delete_old_exports(export_dir_base: str, exports_to_keep: Optional[int]) -> None:
    """Deletes all but the `exports_to_keep` newest timestamped (10-digit) export directories."""
    if exports_to_keep is None or not tf.compat.v1.gfile.IsDirectory(export_dir_base):
        return
    versions = sorted(
        int(name)
        for name in (tf.compat.as_str_any(n).rstrip("/") for n in tf.compat.v1.gfile.ListDirectory(export_dir_base))
        if len(name) == 10 and name.isdigit()
    )
    for version in versions[:-exports_to_keep]:
        path = os.path.join(tf.compat.as_str_any(export_dir_base), str(version))
        try:
            tf.compat.v1.gfile.DeleteRecursively(path)
        except tf.errors.NotFoundError as e:
            tf.compat.v1.logging.warn("Can not delete %s recursively: %s", path, e)
