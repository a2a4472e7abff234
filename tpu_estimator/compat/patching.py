"""`install()` / `uninstall()`: the patching of TensorFlow's names (see `tpu_estimator.compat`)."""

import importlib
import sys
import threading
from typing import Any, Dict, List, Optional

import tensorflow as tf

from tpu_estimator import _estimator_lib, _tf_internal
from tpu_estimator.compat import legacy_modules, namespaces, tf2_names
from tpu_estimator.compat.tpu_ops import (
    batch_parallel,
    bfloat16_scope,
    initialize_system,
    replicate,
    shard,
    shutdown_system,
)

_MISSING = object()
_lock = threading.Lock()
_patches: Optional[List["_Patch"]] = None
_added_modules: Dict[str, Any] = {}


def _resolve(path: str) -> Any:
    """The object at attribute `path` from the `tensorflow` module, loading lazily loaded modules.

    A path starting with `module:` names a module to import instead (`module:tensorflow.python`); one starting with
    `as_bound:` is the object its parent holds, not loaded (a `LazyLoader` copies the module's names when it loads,
    so a name patched in the module alone is not seen through it).
    """
    if path.startswith("module:"):
        return importlib.import_module(path[len("module:") :])
    if path.startswith("as_bound:"):
        parent, _, name = path[len("as_bound:") :].rpartition(".")
        return getattr(_resolve(parent), name)
    obj = tf
    for part in path.split(".") if path else []:
        obj = _tf_internal.loaded_module(getattr(obj, part))
    return obj


# `tf`, `tf.compat.v1`, ... and the `compat` modules inside them (`import tensorflow.compat.v1 as tf` then
# `tf.compat.v1.estimator`): each is a module of its own.
_API_ROOTS = (
    "",
    "compat.v1",
    "compat.v2",
    "compat.v1.compat.v1",
    "compat.v1.compat.v2",
    "compat.v2.compat.v1",
    "compat.v2.compat.v2",
)


# tensorflow_estimator's modules that hold `train_and_evaluate` besides TensorFlow's API modules.
_UPSTREAM_TRAIN_AND_EVALUATE_MODULES = (
    "tensorflow_estimator.python.estimator.training",
    "tensorflow_estimator.python.estimator.estimator_lib",
    "tensorflow_estimator._api.v1.estimator",
    "tensorflow_estimator._api.v2.estimator",
    "tensorflow_estimator.python.estimator.api._v1.estimator",
    "tensorflow_estimator.python.estimator.api._v2.estimator",
)


def _existing(paths) -> List[str]:
    found = []
    for path in paths:
        try:
            _resolve(path)
        except (AttributeError, ImportError):
            continue
        found.append(path)
    return found


class _Patch(object):
    """One attribute of one namespace set to our object, restorable exactly."""

    def __init__(self, owner: Any, name: str, value: Any):
        self.owner = owner
        self.name = name
        self.value = value
        self.old = _MISSING
        self.old_all = None

    def _current(self) -> Any:
        if not _tf_internal.is_module_wrapper(self.owner):
            return getattr(self.owner, self.name, _MISSING)
        return _tf_internal.module_wrapper_attribute(self.owner, self.name, _MISSING)

    def apply(self) -> None:
        self.old = self._current()
        all_names = self.owner.__dict__.get("__all__")
        self.old_all = list(all_names) if isinstance(all_names, list) else None
        setattr(self.owner, self.name, self.value)

    def restore(self) -> None:
        if _tf_internal.is_lazy_loader(self.owner):
            # A lazily loaded module: without a name of its own it reads the (restored) module's again.
            self.owner.__dict__.pop(self.name, None)
        elif self.old is not _MISSING:
            setattr(self.owner, self.name, self.old)
        elif _tf_internal.is_module_wrapper(self.owner):
            _tf_internal.module_wrapper_remove(self.owner, self.name)
        else:
            self.owner.__dict__.pop(self.name, None)
        all_names = self.owner.__dict__.get("__all__")
        if self.old_all is not None and isinstance(all_names, list):
            all_names[:] = self.old_all


def _our_estimator_namespaces() -> bool:
    """Whether `tf.estimator` and the Estimator module paths are to be ours: our Estimator core is active."""
    return _estimator_lib.CORE == "ours"


def _targets() -> tuple:
    """([(namespace path, {name: our object})], added modules by name) for every namespace we touch."""
    # On TensorFlow 2.16+ `import tensorflow.compat.v1` executes the API module again under that name and rebinds
    # `tf.compat.v1` to it: import both first, so that the modules patched are the ones programs get.
    for name in ("tensorflow.compat.v1", "tensorflow.compat.v2"):
        importlib.import_module(name)
    modules = legacy_modules.contrib_deep_modules(namespaces.contrib_modules())
    contrib = modules["tensorflow.contrib"]
    resolvers = namespaces.cluster_resolver_names()
    roots = _existing(_API_ROOTS)
    if not _our_estimator_namespaces():
        # Upstream's tf.estimator stays (it is the core our TPUEstimator builds on); its TPU names become ours, in
        # TensorFlow's API modules and in tensorflow_estimator's own modules.
        estimator_targets = [
            ("compat.v1.estimator.tpu", namespaces.estimator_names()),
            ("compat.v1.estimator.tpu.experimental", namespaces.estimator_experimental_names()),
            ("estimator", {"tpu": namespaces.estimator_tpu_module()}),
        ]
        for name, members in legacy_modules.upstream_tpu_module_names().items():
            estimator_targets.append(("module:" + name, members))
        # train_and_evaluate: upstream's, except for a TPUEstimator running one process per host (our loop then runs
        # on every host; upstream's would give each host a between-graph role).
        ours = {"train_and_evaluate": _estimator_lib.train_and_evaluate}
        estimator_paths = _existing([(root + "." if root else "") + "estimator" for root in roots])
        estimator_targets += [(path, ours) for path in estimator_paths]
        estimator_targets += [("as_bound:" + path, ours) for path in estimator_paths]
        for module in _UPSTREAM_TRAIN_AND_EVALUATE_MODULES:
            estimator_targets.append(("module:" + module, ours))
    else:
        # Our core: every spelling of tf.estimator, tensorflow_estimator and tensorflow.python.estimator is ours
        # (TensorFlow 2.16+ has none of them; on 2.15 with TPU_ESTIMATOR_CORE=ours upstream's are hidden, so that
        # one class answers each name).
        estimator_modules = namespaces.estimator_modules()
        estimator = estimator_modules["tensorflow.estimator"]
        estimator_targets = [(root, {"estimator": estimator}) for root in roots]
        for version in ("v1", "v2"):
            for name, module in estimator_modules.items():
                modules[name.replace("tensorflow.", "tensorflow.compat.{}.".format(version), 1)] = module
        modules.update(estimator_modules)
        path_modules = legacy_modules.estimator_path_modules(estimator)
        modules.update(path_modules)
        estimator_targets.append(
            ("module:tensorflow.python", {"estimator": path_modules["tensorflow.python.estimator"]})
        )
        tpu_modules = legacy_modules.tf_python_tpu_modules()
        modules.update(tpu_modules)
        estimator_targets.append(
            ("module:tensorflow.python.tpu", {name.rpartition(".")[2]: m for name, m in tpu_modules.items()})
        )
    contrib_roots = [root for root in roots if root.endswith("v1") or root == ""]
    return estimator_targets + [
        ("compat.v1.tpu", namespaces.tpu_names()),
        ("compat.v1.tpu.experimental", namespaces.embedding_parameter_names()),
        ("distribute.cluster_resolver", resolvers),
        ("compat.v1.distribute.cluster_resolver", resolvers),
        ("compat.v2.distribute.cluster_resolver", resolvers),
    ] + [(root, {"contrib": contrib}) for root in contrib_roots] + tf2_names.targets(roots, _resolve), modules


def install() -> None:
    """Puts our TPUEstimator, TPU ops, cluster resolver and contrib modules behind TensorFlow's names.

    Idempotent: a second call does nothing.
    """
    global _patches
    with _lock:
        if _patches is not None:
            return
        targets, modules = _targets()
        patches = []
        try:
            for path, members in targets:
                owner = _resolve(path)
                for name, value in members.items():
                    patch = _Patch(owner, name, value)
                    patch.apply()
                    patches.append(patch)
        except BaseException:
            for patch in reversed(patches):
                patch.restore()
            raise
        for name, module in modules.items():
            _added_modules[name] = sys.modules.get(name, _MISSING)
            sys.modules[name] = module
        _patches = patches


def uninstall() -> None:
    """Restores TensorFlow's own objects and removes the added modules. Does nothing if not installed."""
    global _patches
    with _lock:
        if _patches is None:
            return
        for patch in reversed(_patches):
            patch.restore()
        for name, old in _added_modules.items():
            if old is _MISSING:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
        _added_modules.clear()
        _patches = None


def is_installed() -> bool:
    """Whether `install()` is in effect."""
    return _patches is not None


__all__ = [
    "batch_parallel",
    "bfloat16_scope",
    "initialize_system",
    "install",
    "is_installed",
    "replicate",
    "shard",
    "shutdown_system",
    "uninstall",
]
