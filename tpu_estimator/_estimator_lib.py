"""The one module that selects the Estimator core the product builds on.

* Upstream's `tensorflow_estimator` when it imports (TensorFlow 2.15 with tensorflow-estimator installed), unless
  the environment variable `TPU_ESTIMATOR_CORE=ours` asks for ours.
* Ours (`tpu_estimator.estimator_core`) whenever `tensorflow_estimator` is not importable (TensorFlow 2.16+, where
  tensorflow-estimator 2.15 fails to import) or is forced.

`TPU_ESTIMATOR_CORE=upstream` requires upstream's and fails with an ImportError when it is missing. Every other
module takes the `Estimator` base class, `EstimatorSpec`, `ModeKeys`, `RunConfig`, export helpers and
`train_and_evaluate` from here, so `TPUEstimator` subclasses whichever `Estimator` is active. `CORE` says which
one: `"upstream"` or `"ours"`.
"""

import os

_CORE_ENV = "TPU_ESTIMATOR_CORE"
_requested = os.environ.get(_CORE_ENV, "").strip().lower()
if _requested not in ("", "ours", "upstream"):
    raise ValueError(
        "{}={!r} is not a valid Estimator core: use 'ours', 'upstream', or leave it unset (upstream's "
        "tensorflow_estimator when it imports, else ours).".format(_CORE_ENV, os.environ[_CORE_ENV])
    )


def _import_upstream():
    from tensorflow_estimator.python.estimator import estimator, exporter, model_fn, run_config, training, util
    from tensorflow_estimator.python.estimator.export import export_lib, export_output

    return estimator, exporter, model_fn, run_config, training, util, export_lib, export_output


_upstream = None
if _requested != "ours":
    try:
        _upstream = _import_upstream()
    except ImportError as e:
        if _requested == "upstream":
            raise ImportError(
                "{}=upstream, but upstream's tensorflow_estimator does not import ({}: {}). Install "
                "tensorflow-estimator (it works with TensorFlow 2.15 and older), or unset {} to use our "
                "Estimator core.".format(_CORE_ENV, type(e).__name__, e, _CORE_ENV)
            ) from e

if _upstream is not None:
    CORE = "upstream"
    _estimator, _exporter, _model_fn, _run_config, _training, _util, export_lib, export_output = _upstream
    Estimator = _estimator.Estimator
    EstimatorSpec = _model_fn.EstimatorSpec
    ModeKeys = _model_fn.ModeKeys
    BaseRunConfig = _run_config.RunConfig
    TaskType = _run_config.TaskType
    get_default_session_config = _run_config.get_default_session_config
    fn_args = _util.fn_args
    parse_input_fn_result = _util.parse_input_fn_result
    verify_model_fn_args = _estimator._verify_model_fn_args
    load_global_step_from_checkpoint_dir = _estimator._load_global_step_from_checkpoint_dir
    WarmStartSettings = _estimator.WarmStartSettings
    VocabInfo = _estimator.VocabInfo
    TrainSpec = _training.TrainSpec
    EvalSpec = _training.EvalSpec
    _core_train_and_evaluate = _training.train_and_evaluate
    Exporter = _exporter.Exporter
    FinalExporter = _exporter.FinalExporter
    LatestExporter = _exporter.LatestExporter
    BestExporter = _exporter.BestExporter
else:
    CORE = "ours"
    from tpu_estimator import estimator_core as _core

    Estimator = _core.Estimator
    EstimatorSpec = _core.EstimatorSpec
    ModeKeys = _core.ModeKeys
    BaseRunConfig = _core.RunConfig
    TaskType = _core.TaskType
    get_default_session_config = _core.get_default_session_config
    fn_args = _core.fn_args
    parse_input_fn_result = _core.parse_input_fn_result
    verify_model_fn_args = _core.verify_model_fn_args
    load_global_step_from_checkpoint_dir = _core.load_global_step_from_checkpoint_dir
    WarmStartSettings = _core.WarmStartSettings
    VocabInfo = _core.VocabInfo
    export_lib = _core.export_lib
    export_output = _core.export_output
    TrainSpec = _core.TrainSpec
    EvalSpec = _core.EvalSpec
    _core_train_and_evaluate = _core.train_and_evaluate
    Exporter = _core.Exporter
    FinalExporter = _core.FinalExporter
    LatestExporter = _core.LatestExporter
    BestExporter = _core.BestExporter


def train_and_evaluate(estimator, train_spec, eval_spec):
    """The core's `train_and_evaluate`; a `TPUEstimator` that runs one process per host runs its own loop on every
    host (`TPUEstimator._train_and_evaluate_on_hosts`).

    Returns:
      `(metrics of the last evaluation, export results)` where the core returns them.
    """
    if getattr(estimator, "_trains_and_evaluates_on_hosts", False):
        return estimator._train_and_evaluate_on_hosts(train_spec, eval_spec)
    return _core_train_and_evaluate(estimator, train_spec, eval_spec)
