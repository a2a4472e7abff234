"""The module paths of releases before the stage subpackages, kept importable.

`tpu_estimator.cluster` became `tpu_estimator.hosts.cluster`, and so on for every module in `MOVED`. A program (or a
pickled reference, or a `mock.patch` target) that names an old path gets the new module itself, not a copy: one module
object under two names, so patches and `isinstance` agree. Imports no TensorFlow.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Dict, Optional, Sequence

# Stage subpackage of each moved module (docs/ARCHITECTURE.md names them).
_PACKAGES: Dict[str, Sequence[str]] = {
    "specs": ("context", "spec", "host_call_spec", "embedding_spec", "batch_size"),
    "inputs": (
        "deferred_input",
        "input_pipeline",
        "input_position",
        "dataset_autotune",
        "queued_structure",
        "data_errors",
    ),
    "embedding_stage": (
        "embedding_bridge",
        "embedding_infeed",
        "embedding_exchange",
        "embedding_serving",
        "engine_inputs",
    ),
    "replicas": ("replica_context", "replication", "stamping", "device_rewrite"),
    "modes": (
        "shared_stages",
        "step_feed",
        "train_loop",
        "eval_loop",
        "predict_step",
        "cpu_path",
        "hooks",
        "host_calls",
    ),
    "hosts": ("cluster", "collectives", "mirrored_variables", "host_train_and_evaluate"),
    "checkpoints": ("checkpoint_state", "finite_checkpoints", "model_dir_lock", "train_guard"),
}
# Moved elsewhere or renamed: the name says what it is (`embedding/devices.py` is another module); the server's
# command is the CLI's.
_RENAMED: Dict[str, str] = {"devices": "hosts.shard_devices", "cluster_server": "app.cluster_server"}

# Old module name -> its module's name now.
MOVED: Dict[str, str] = {
    f"tpu_estimator.{module}": f"tpu_estimator.{package}.{module}"
    for package, modules in _PACKAGES.items()
    for module in modules
}
MOVED.update({f"tpu_estimator.{old}": f"tpu_estimator.{new}" for old, new in _RENAMED.items()})


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as the module that now has it."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[types.ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import machinery gave the module the old name's spec: it gets its own back.
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Adds the finder to `sys.meta_path` once per process."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
