"""TPUEstimator programs on CPUs, GPUs and clusters of them.

The public API mirrors `tf.compat.v1.estimator.tpu` and `tf.compat.v1.tpu`.

The names are imported on first use (PEP 562), so that `import tpu_estimator.app.cli` and
`tpu_estimator.__version__` do not import TensorFlow. Importing the package selects Keras 2 for `tf.keras` on
TensorFlow 2.16+ when tf-keras is installed and `TF_USE_LEGACY_KERAS` is unset (`tpu_estimator._keras2`).
"""


def _version() -> str:
    """The installed distribution's version, else the one in the source tree's `setup.cfg`."""
    try:
        from importlib import metadata

        return metadata.version("tpu-estimator")
    except Exception:  # not installed (a clone on PYTHONPATH)
        import configparser
        import os

        parser = configparser.ConfigParser()
        parser.read(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.cfg"))
        return parser.get("metadata", "version", fallback="0+unknown")


__version__ = _version()

# Keras 2 for TPUEstimator programs on TensorFlow 2.16+ (TF_USE_LEGACY_KERAS=1 when tf-keras is installed and the
# user set nothing), before the program first uses tf.keras. Imports no TensorFlow.
from tpu_estimator import _keras2  # noqa: E402

_keras2.select_keras2()

# Module paths of releases before the stage subpackages (`tpu_estimator.cluster`, ...) keep importing.
from tpu_estimator import _moved_modules  # noqa: E402

_moved_modules.install()

from tpu_estimator import _lazy_names  # noqa: E402

_EXPORTS = {
    "TPUContext": "specs.context",
    "UnsupportedOffTPUError": "specs.context",
    "ExportSavedModelApiVersion": "tpu_estimator",
    "TPUEstimator": "tpu_estimator",
    "CrossShardOptimizer": "replicas.replication",
    "cross_replica_sum": "replicas.replication",
    "outside_compilation": "replicas.replication",
    "rewrite": "replicas.device_rewrite",
    "TPUEstimatorSpec": "specs.spec",
    "InputPipelineConfig": "tpu_config",
    "RunConfig": "tpu_config",
    "TPUConfig": "tpu_config",
}

__all__ = sorted(_EXPORTS)


# Any submodule is an attribute too (`tpu_estimator.experimental`).
__getattr__, __dir__ = _lazy_names.lazy_names(__name__, _EXPORTS, submodules=None)
