"""The layering of `tpu_estimator/` core modules (docs/ARCHITECTURE.md): nothing below the estimator imports it, and
`tensorflow.python` internals and private graph attributes are reached only through `_tf_internal.py`."""

import ast
import pathlib
import re

import tpu_estimator

CORE = pathlib.Path(tpu_estimator.__file__).parent
# Core modules: the package root without the public re-exports (`__init__`), the wrappers themselves and the
# subpackages built on the core (`app/`, `compat/`, `experimental/`).
CORE_MODULES = sorted(
    p for p in CORE.glob("*.py") if p.name not in ("__init__.py", "_tf_internal.py", "_estimator_lib.py")
)
PRIVATE_GRAPH_ACCESS = re.compile(
    r"\.(_collections|_get_control_flow_context|_set_control_flow_context|_variable_creator_stack)\b"
)


def _imported_modules(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from ("{}.{}".format(node.module, alias.name) for alias in node.names)


def test_core_modules_found():
    names = {p.name for p in CORE_MODULES}
    assert {"train_loop.py", "eval_loop.py", "predict_step.py", "sharded_step.py", "tpu_estimator.py"} <= names


def test_no_module_below_the_estimator_imports_it():
    importers = [
        p.name
        for p in CORE_MODULES
        if p.name != "tpu_estimator.py" and "tpu_estimator.tpu_estimator" in set(_imported_modules(p))
    ]
    assert importers == []


def test_tensorflow_internals_only_through_tf_internal():
    offenders = {}
    for path in CORE_MODULES:
        internal = [m for m in _imported_modules(path) if m.startswith(("tensorflow.python", "tensorflow_estimator"))]
        private = PRIVATE_GRAPH_ACCESS.findall(path.read_text())
        if internal or private:
            offenders[path.name] = internal + private
    assert offenders == {}
