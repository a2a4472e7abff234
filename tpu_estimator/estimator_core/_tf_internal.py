"""The `tensorflow.python` pieces the Estimator core is built from, each named once here.

TensorFlow core keeps the Estimator's SavedModel helpers (`model_utils`: export outputs, signatures, tags, mode keys),
its evaluation loop (`training.evaluation`) and a few session-hook utilities outside its public API. Every other
module of `estimator_core/` uses public TensorFlow APIs and the names below (tests/estimator/test_layering.py checks).
"""

from typing import Iterable

import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint as _checkpoint
from tensorflow.python.checkpoint import graph_view as _graph_view
from tensorflow.python.eager import context as _context
from tensorflow.python.framework import meta_graph as _meta_graph
from tensorflow.python.saved_model import model_utils as _model_utils
from tensorflow.python.saved_model import path_helpers as _path_helpers
from tensorflow.python.saved_model.model_utils import export_output as _export_output
from tensorflow.python.saved_model.model_utils import export_utils as _export_utils
from tensorflow.python.saved_model.model_utils import mode_keys as _mode_keys
from tensorflow.python.training import basic_session_run_hooks as _basic_session_run_hooks
from tensorflow.python.training import device_setter as _device_setter
from tensorflow.python.training import evaluation as _evaluation
from tensorflow.python.training import training_util as _training_util
from tensorflow.python.util import function_utils as _function_utils

# ---- SavedModel export (`model_utils`) ------------------------------------------------------------------------------

EstimatorModeKeys = _mode_keys.EstimatorModeKeys
ClassificationOutput = _export_output.ClassificationOutput
EvalOutput = _export_output.EvalOutput
ExportOutput = _export_output.ExportOutput
PredictOutput = _export_output.PredictOutput
RegressionOutput = _export_output.RegressionOutput
TrainOutput = _export_output.TrainOutput
SINGLE_FEATURE_DEFAULT_NAME = _export_utils.SINGLE_FEATURE_DEFAULT_NAME
SINGLE_LABEL_DEFAULT_NAME = _export_utils.SINGLE_LABEL_DEFAULT_NAME
SINGLE_RECEIVER_DEFAULT_NAME = _export_utils.SINGLE_RECEIVER_DEFAULT_NAME
EXPORT_TAG_MAP = _model_utils.EXPORT_TAG_MAP
SIGNATURE_KEY_MAP = _model_utils.SIGNATURE_KEY_MAP
build_all_signature_defs = _model_utils.build_all_signature_defs
export_outputs_for_mode = _model_utils.export_outputs_for_mode
get_export_outputs = _model_utils.get_export_outputs
get_temp_export_dir = _model_utils.get_temp_export_dir
get_timestamped_export_dir = _model_utils.get_timestamped_export_dir
get_variables_dir = _path_helpers.get_variables_dir
get_variables_path = _path_helpers.get_variables_path


def add_train_op_to_saved_model(builder: tf.compat.v1.saved_model.Builder, train_op) -> None:
    """Puts `train_op` in the SavedModel's train-op collection, so that a TRAIN graph can be resumed."""
    builder._add_train_op(train_op)


def is_object_checkpoint(saver) -> bool:
    """Whether a scaffold's `saver` is a `tf.train.Checkpoint` (object-based) rather than a name-based `Saver`."""
    return isinstance(saver, _checkpoint.Checkpoint)


def checkpoint_saveables(checkpoint) -> list:
    """The saveable objects of a `tf.train.Checkpoint`'s object graph (to make a name-based `Saver` of them)."""
    return _graph_view.ObjectGraphView(checkpoint).frozen_saveable_objects()


# ---- graphs and sessions ---------------------------------------------------------------------------------------------

graph_mode = _context.graph_mode
create_meta_graph_def = _meta_graph.create_meta_graph_def
fn_args = _function_utils.fn_args
STANDARD_PS_OPS = _device_setter.STANDARD_PS_OPS
SecondOrStepTimer = _basic_session_run_hooks.SecondOrStepTimer


def get_or_create_global_step_read(graph: tf.Graph):
    """The cached read of the global step that session hooks share (created once per graph)."""
    return _training_util._get_or_create_global_step_read(graph)


def add_checkpoint_listeners(hook: tf.compat.v1.train.CheckpointSaverHook, listeners: Iterable) -> None:
    """Attaches `listeners` (not yet attached) to a constructed `CheckpointSaverHook`, which has no public way."""
    for listener in listeners:
        if listener not in hook._listeners:
            hook._listeners.append(listener)


# ---- evaluation (`training.evaluation`, which upstream's Estimator runs too) ----------------------------------------


def get_or_create_eval_step() -> tf.Variable:
    """The evaluation step counter that `evaluate_once` and `StopAfterNEvalsHook` read."""
    return _evaluation._get_or_create_eval_step()


def stop_after_n_evals_hook(num_evals) -> tf.compat.v1.train.SessionRunHook:
    """The hook that stops an evaluation after `num_evals` steps (counted by the eval step counter)."""
    return _evaluation._StopAfterNEvalsHook(num_evals=num_evals)


def evaluate_once(**kwargs) -> dict:
    """One evaluation of a checkpoint (`tensorflow.python.training.evaluation._evaluate_once`, same arguments)."""
    return _evaluation._evaluate_once(**kwargs)
