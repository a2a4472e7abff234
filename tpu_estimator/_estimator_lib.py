"""The one module through which we use `tensorflow_estimator`.

Everything the product takes from the estimator library (the `Estimator` base class, `EstimatorSpec`, `ModeKeys`,
`RunConfig`, export helpers) is imported here and nowhere else, so that a later step can put our own Estimator
core behind these names on TensorFlow releases that no longer ship `tf.estimator`.
"""

from tensorflow_estimator.python.estimator import estimator as _estimator
from tensorflow_estimator.python.estimator import model_fn as _model_fn
from tensorflow_estimator.python.estimator import run_config as _run_config
from tensorflow_estimator.python.estimator import util as _util
from tensorflow_estimator.python.estimator.export import export_lib as _export_lib
from tensorflow_estimator.python.estimator.export import export_output as _export_output

Estimator = _estimator.Estimator
EstimatorSpec = _model_fn.EstimatorSpec
ModeKeys = _model_fn.ModeKeys
BaseRunConfig = _run_config.RunConfig
TaskType = _run_config.TaskType
get_default_session_config = _run_config.get_default_session_config
fn_args = _util.fn_args
parse_input_fn_result = _util.parse_input_fn_result
export_lib = _export_lib
export_output = _export_output
verify_model_fn_args = _estimator._verify_model_fn_args
