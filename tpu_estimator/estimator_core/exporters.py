"""Exporters run by `train_and_evaluate` after each evaluation: `FinalExporter`, `LatestExporter`, `BestExporter`."""

import abc
import os
from typing import Any, Callable, Dict, Optional

import tensorflow as tf

from tpu_estimator.estimator_core.inputs import fn_args

_LOSS_KEY = "loss"


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


def _loss_smaller(best_eval_result: Dict[str, Any], current_eval_result: Dict[str, Any]) -> bool:
    """`BestExporter`'s default `compare_fn`: whether `current_eval_result` has the smaller `loss`.

    Raises:
      ValueError: either result is empty or has no `loss`.
    """
    if not best_eval_result or _LOSS_KEY not in best_eval_result:
        raise ValueError("best_eval_result cannot be empty or no loss is found in it.")
    if not current_eval_result or _LOSS_KEY not in current_eval_result:
        raise ValueError("current_eval_result cannot be empty or no loss is found in it.")
    return best_eval_result[_LOSS_KEY] > current_eval_result[_LOSS_KEY]


def _verify_compare_fn_args(compare_fn: Callable) -> None:
    args = set(fn_args(compare_fn))
    if "best_eval_result" not in args:
        raise ValueError("compare_fn (%s) must include best_eval_result argument." % compare_fn)
    if "current_eval_result" not in args:
        raise ValueError("compare_fn (%s) must include current_eval_result argument." % compare_fn)
    non_valid_args = list(args - {"best_eval_result", "current_eval_result"})
    if non_valid_args:
        raise ValueError("compare_fn (%s) has following not expected args: %s" % (compare_fn, non_valid_args))


class BestExporter(Exporter):
    """Exports when an evaluation is better than the best so far, keeping the `exports_to_keep` newest exports.

    As upstream's: the first `export` call of an exporter object always exports; later ones export when
    `compare_fn(best_eval_result=best, current_eval_result=current)` is true. The best result starts as the best
    of the evaluation summaries matching `event_file_pattern` (so a restarted job does not export a worse model),
    read once per `model_dir`.

    Args:
      name: the export directory name under `<model_dir>/export`.
      serving_input_receiver_fn: returns a `ServingInputReceiver`.
      event_file_pattern: event files of past evaluations, relative to `model_dir` (None: start from nothing).
      compare_fn: `compare_fn(best_eval_result, current_eval_result) -> bool`, True when current is better;
        default: the smaller `loss`.
      assets_extra: dict of destination (under `assets.extra`) to source file.
      as_text: write `saved_model.pbtxt`.
      exports_to_keep: number of exports kept (None: all).

    Raises:
      ValueError: no `compare_fn`, one with other arguments, or `exports_to_keep` not positive.
    """

    def __init__(
        self,
        name: str = "best_exporter",
        serving_input_receiver_fn=None,
        event_file_pattern: Optional[str] = "eval/*.tfevents.*",
        compare_fn: Optional[Callable[..., bool]] = _loss_smaller,
        assets_extra=None,
        as_text: bool = False,
        exports_to_keep: Optional[int] = 5,
    ):
        if compare_fn is None:
            raise ValueError("`compare_fn` must not be None.")
        _verify_compare_fn_args(compare_fn)
        self._compare_fn = compare_fn
        self._exporter = _SavedModelExporter(name, serving_input_receiver_fn, assets_extra, as_text)
        self._event_file_pattern = event_file_pattern
        self._model_dir = None
        self._best_eval_result = None
        self._has_exported = False
        if exports_to_keep is not None and exports_to_keep <= 0:
            raise ValueError("`exports_to_keep`, if provided, must be a positive number. Got %s" % exports_to_keep)
        self._exports_to_keep = exports_to_keep

    @property
    def name(self) -> str:
        return self._exporter.name

    def export(self, estimator, export_path, checkpoint_path, eval_result: Dict[str, Any], is_the_final_export):
        """Exports if `eval_result` is the best so far (or this is the first call); returns the export or None."""
        del is_the_final_export
        if self._model_dir != estimator.model_dir and self._event_file_pattern:
            tf.compat.v1.logging.info("Loading best metric from event files.")
            self._model_dir = estimator.model_dir
            self._best_eval_result = self._best_eval_result_in_events(
                os.path.join(self._model_dir, self._event_file_pattern)
            )
        if (
            self._best_eval_result is None
            or not self._has_exported
            or self._compare_fn(best_eval_result=self._best_eval_result, current_eval_result=eval_result)
        ):
            tf.compat.v1.logging.info("Performing best model export.")
            self._best_eval_result = eval_result
            result = self._exporter.export(estimator, export_path, checkpoint_path)
            delete_old_exports(export_path, self._exports_to_keep)
            self._has_exported = True
            return result
        return None

    def _best_eval_result_in_events(self, pattern: str) -> Optional[Dict[str, float]]:
        """The best (by `compare_fn`) of the scalar summaries of each event in the files matching `pattern`."""
        best = None
        for event_file in tf.compat.v1.gfile.Glob(pattern):
            for event in tf.compat.v1.train.summary_iterator(event_file):
                if not event.HasField("summary"):
                    continue
                result = {v.tag: v.simple_value for v in event.summary.value if v.HasField("simple_value")}
                if result and (best is None or self._compare_fn(best, result)):
                    best = result
        return best


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
