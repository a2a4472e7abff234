"""TPUEstimator programs on CPUs, GPUs and clusters of them.

The public API mirrors `tf.compat.v1.estimator.tpu` and `tf.compat.v1.tpu`. Every public subpackage is an
attribute of this package: `experimental` is imported with it; `app` (the product built on the library) and
`compat` (the launcher and `install()`) are imported on first attribute access, so `import tpu_estimator` stays
free of them.
"""

import importlib
import pkgutil
from typing import Any, List

# `tpu_estimator` (the core module) must load before the `rewrite` function below shadows the `tpu_estimator.rewrite`
# module as a package attribute: the core reads that module by `from tpu_estimator import rewrite`.
from tpu_estimator import experimental, tpu_estimator
from tpu_estimator.context import TPUContext, UnsupportedOffTPUError
from tpu_estimator.replication import CrossShardOptimizer, cross_replica_sum, outside_compilation
from tpu_estimator.rewrite import rewrite
from tpu_estimator.spec import TPUEstimatorSpec
from tpu_estimator.tpu_config import InputPipelineConfig, RunConfig, TPUConfig
from tpu_estimator.tpu_estimator import ExportSavedModelApiVersion, TPUEstimator

_LAZY_SUBPACKAGES = ("app", "compat")


def __getattr__(name: str) -> Any:
    """Imports a lazily loaded public subpackage (`app`, `compat`) and its own public subpackages on first access.

    Raises:
      AttributeError: `name` is not a public name of `tpu_estimator`.
    """
    if name in _LAZY_SUBPACKAGES:
        package = importlib.import_module("tpu_estimator." + name)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.ispkg and not info.name.rsplit(".", 1)[1].startswith("_"):
                importlib.import_module(info.name)  # binds e.g. `app.data` as an attribute of `app`
        return package
    raise AttributeError("module 'tpu_estimator' has no attribute {!r}".format(name))


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY_SUBPACKAGES))


__all__ = [
    "CrossShardOptimizer",
    "ExportSavedModelApiVersion",
    "InputPipelineConfig",
    "RunConfig",
    "TPUConfig",
    "TPUContext",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "UnsupportedOffTPUError",
    "cross_replica_sum",
    "experimental",
    "outside_compilation",
    "rewrite",
]
