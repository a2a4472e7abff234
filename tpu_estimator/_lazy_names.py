"""A package's names imported on first use (PEP 562): importing the package imports none of its modules.

    __getattr__, __dir__ = _lazy_names.lazy_names(__name__, {"TPUEstimator": "tpu_estimator"})

Used by `tpu_estimator`, `tpu_estimator.compat` and `tpu_estimator.app.data`, so that the CLI, `__version__` and the
launcher import no TensorFlow before they need it. Imports nothing but the standard library.
"""

import importlib
import sys
from typing import Any, Callable, Collection, Dict, List, Optional, Tuple


def lazy_names(
    package: str, exports: Dict[str, str], submodules: Optional[Collection[str]] = ()
) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """The module-level `__getattr__` and `__dir__` of `package`.

    Args:
      package: the package's `__name__`.
      exports: name -> the submodule (relative to `package`) that defines it; imported on first use, then kept in the
        package's namespace.
      submodules: the submodules that are attributes before anything imported them; None: every submodule.

    Returns:
      `(__getattr__, __dir__)`: `__getattr__` raises AttributeError for any other name.
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
            setattr(sys.modules[package], name, value)
            return value
        if submodules is None or name in submodules:
            try:  # a submodule used as an attribute, as when the package imported them all
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports) | set(submodules or ()))

    return __getattr__, __dir__
