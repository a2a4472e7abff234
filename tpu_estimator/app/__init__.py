"""The product built on the library: the `tpu-estimator` command line, its YAML configs, built-in data and models
(DLRM, Wide & Deep), progress printing and the benchmark harness.

Nothing in `tpu_estimator`'s core imports this package.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # A subpackage used as an attribute (`tpu_estimator.app.models`): imported on first use, so that the CLI's
    # TensorFlow-free front stays free of TensorFlow.
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
