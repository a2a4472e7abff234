"""Issue 14 bug 3: every public subpackage is reachable as an attribute after a plain `import <package>`.

Checked in a fresh interpreter: inside this test process other tests have already imported the subpackages, which
binds them as attributes and would hide the bug.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_PROBE = r"""
import importlib, pkgutil, sys
top = importlib.import_module(sys.argv[1])
missing = []
root = importlib.util.find_spec(sys.argv[1]).submodule_search_locations
for info in pkgutil.walk_packages(root, sys.argv[1] + "."):
    parts = info.name.split(".")
    if any(part.startswith("_") for part in parts) or not (info.ispkg or sys.argv[1] == "embedding"):
        continue
    obj = top
    for part in parts[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            missing.append(info.name)
            break
print("MISSING", sorted(missing))
"""


def _fresh_python(code: str, *args: str) -> str:
    """What `python -c code args` prints in a fresh interpreter on this checkout; asserts it exits 0."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _missing_attributes(package):
    line = [line for line in _fresh_python(_PROBE, package).splitlines() if line.startswith("MISSING")][-1]
    return line[len("MISSING ") :]


@pytest.mark.parametrize("package", ["tpu_estimator", "embedding"])
def test_every_public_subpackage_is_an_attribute_after_import(package):
    # tpu_estimator: experimental, app (and app.data, app.models), compat; embedding: every module.
    assert _missing_attributes(package) == "[]"


def test_experimental_embedding_config_spec_through_the_package_attribute():
    code = (
        "import tensorflow as tf\n"
        "import tpu_estimator as te\n"
        "spec = te.experimental.EmbeddingConfigSpec(\n"
        "    table_to_config_dict={'t': te.experimental.TableConfig(5, 2)},\n"
        "    feature_to_config_dict={'f': te.experimental.FeatureConfig('t')},\n"
        "    optimization_parameters=te.experimental.AdagradParameters(0.1))\n"
        "print(sorted(spec.table_to_config_dict), spec.partition_strategy, 'tpu_estimator.app' in __import__('sys').modules)\n"
    )
    # The product (`app`) is not imported by `import tpu_estimator`: it loads on first access only.
    assert _fresh_python(code).strip().splitlines()[-1] == "['t'] div False"


def test_rewrite_is_the_function_whatever_the_import_order():
    # The function's module has a name of its own (`device_rewrite`): no submodule import can replace the package's
    # `rewrite` attribute by a module (once `from tpu_estimator.rewrite import rewrite` sorted before the core module
    # made export_to_tpu die with "'function' object has no attribute 'rewrite'").
    code = (
        "import tpu_estimator as te\n"
        "te.TPUEstimator  # the package loads its modules on first use\n"
        "import tpu_estimator.replicas.device_rewrite\n"
        "from tpu_estimator.modes import cpu_path\n"
        "print(callable(cpu_path.rewrite), te.rewrite is tpu_estimator.replicas.device_rewrite.rewrite)\n"
    )
    assert _fresh_python(code).strip().splitlines()[-1] == "True True"
