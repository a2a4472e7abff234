"""The module paths legacy programs import, as modules that hold our implementations.

Public TPUEstimator programs import the API through module paths as well as through `tf.` attributes:

* TF 1.x contrib paths: `from tensorflow.contrib.tpu.python.tpu import tpu_estimator, tpu_config, tpu_optimizer`
  (tensorflow/tpu models, Tensor2Tensor), `from tensorflow.contrib.cluster_resolver.python.training import
  TPUClusterResolver`, `tensorflow.contrib.summary.summary`.
* `tensorflow_estimator`: `import tensorflow_estimator as tf_estimator` then `tf_estimator.estimator.*`, and its
  modules (`from tensorflow_estimator.python.estimator.tpu import tpu_estimator`, `...tpu_config`,
  `...estimator`, `...model_fn`, `...mode_keys`, `...run_config`, `...export.export`, ...).
* `tensorflow.python.estimator.*` (`from tensorflow.python.estimator import estimator as estimator_lib`,
  `model_fn as model_fn_lib`, `run_config`, `export.export_output`), TensorFlow's shims of the same modules, and
  `from tensorflow.python.tpu import tpu_estimator, tpu_config` (Mesh TensorFlow, T5).

`contrib_deep_modules()` builds the first; `estimator_path_modules()` and `tf_python_tpu_modules()` the others, for
when our Estimator core is active (TensorFlow 2.16+, where those packages are gone, or `TPU_ESTIMATOR_CORE=ours`). With upstream's core
(TensorFlow 2.15), upstream's modules stay and `upstream_tpu_module_names()` lists the names that `install()` sets
in them, so that upstream's names reach our classes: one class per name, whichever path a program took.
"""

from typing import Any, Dict, Mapping

import tpu_estimator
from tpu_estimator.compat import namespaces, tpu_ops

_TPU_ESTIMATOR_NAMES = ("TPUEstimator", "TPUEstimatorSpec", "ExportSavedModelApiVersion")
_TPU_CONFIG_NAMES = ("RunConfig", "TPUConfig", "InputPipelineConfig")

# Private helpers of upstream's Estimator modules that public TPU programs call, by module suffix below
# `python.estimator`: {private name: the active core's public name in `_estimator_lib`}. Each behaves as upstream's
# (tests/compat/test_private_helpers.py lists the programs that call each one).
PRIVATE_HELPERS: Dict[str, Dict[str, str]] = {
    "estimator": {"_load_global_step_from_checkpoint_dir": "load_global_step_from_checkpoint_dir"},
}


def _names(source: Any, names) -> Dict[str, Any]:
    return {name: getattr(source, name) for name in names}


def _tpu_module_members() -> Dict[str, Dict[str, Any]]:
    """{module suffix below a `tpu` package: names} shared by the contrib and tensorflow_estimator paths."""
    return {
        "tpu_estimator": _names(tpu_estimator, _TPU_ESTIMATOR_NAMES),
        "tpu_config": _names(tpu_estimator, _TPU_CONFIG_NAMES),
        "tpu_context": _names(tpu_estimator, ("TPUContext",)),
    }


def link_tree(
    existing: Mapping[str, namespaces.Namespace], members: Mapping[str, Dict[str, Any]]
) -> Dict[str, namespaces.Namespace]:
    """Modules named by `members` (dotted names) with their names, plus every missing parent package.

    Each module is also set as an attribute of its parent, so `import a.b.c` then `a.b.c.X` works as well as
    `from a.b import c`. Parents found in `existing` are reused (and get the attribute); the others are created.

    Args:
      existing: modules already built, by name (they are changed: children are set on them).
      members: `{module name: {name: object}}` of the modules to build.

    Returns:
      `{module name: module}` of every module built or extended, `existing` ones included.
    """
    modules: Dict[str, namespaces.Namespace] = dict(existing)

    def module(name: str) -> namespaces.Namespace:
        if name not in modules:
            modules[name] = namespaces.make_namespace(name, {}, "Legacy module path, from tpu_estimator.compat.")
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(module(parent), child, modules[name])
        return modules[name]

    for name, names in members.items():
        target = module(name)
        for key, value in names.items():
            setattr(target, key, value)
    return modules


def contrib_deep_modules(contrib: Mapping[str, namespaces.Namespace]) -> Dict[str, namespaces.Namespace]:
    """TF 1.x `tensorflow.contrib.{tpu,cluster_resolver,summary}.python...` modules below `contrib`'s modules.

    Args:
      contrib: `namespaces.contrib_modules()`: `tensorflow.contrib` and its `tpu`, `cluster_resolver`, `summary`.

    Returns:
      `{module name: module}`: `contrib`'s modules and the deep ones.
    """
    tpu = "tensorflow.contrib.tpu.python"
    training = "tensorflow.contrib.cluster_resolver.python.training"
    members = {f"{tpu}.tpu.{name}": names for name, names in _tpu_module_members().items()}
    members.update(
        {
            f"{tpu}.tpu.tpu_optimizer": _names(tpu_estimator, ("CrossShardOptimizer",)),
            f"{tpu}.tpu.tpu": dict(
                _names(tpu_estimator, ("rewrite", "outside_compilation")),
                **_names(tpu_ops, ("shard", "replicate", "batch_parallel", "initialize_system", "shutdown_system")),
            ),
            f"{tpu}.tpu.bfloat16": _names(tpu_ops, ("bfloat16_scope",)),
            f"{tpu}.ops.tpu_ops": _names(tpu_estimator, ("cross_replica_sum",)),
            training: {
                name: value
                for name, value in vars(contrib["tensorflow.contrib.cluster_resolver"]).items()
                if not name.startswith("_")
            },
            f"{training}.tpu_cluster_resolver": namespaces.cluster_resolver_names(),
            "tensorflow.contrib.summary.summary": {
                name: value
                for name, value in vars(contrib["tensorflow.contrib.summary"]).items()
                if not name.startswith("_")
            },
        }
    )
    return link_tree(contrib, members)


def _estimator_module_members() -> Dict[str, Dict[str, Any]]:
    """{module suffix below `python.estimator`: names} of the Estimator core's modules, from ours."""
    from tpu_estimator import _estimator_lib
    from tpu_estimator import estimator as estimator_lib

    export_names = _names(estimator_lib.export, estimator_lib.export.__all__)
    output_names = {name: value for name, value in export_names.items() if name.endswith("Output")}
    members = {
        "estimator": _names(estimator_lib, ("Estimator", "WarmStartSettings", "VocabInfo")),
        "run_config": dict(RunConfig=estimator_lib.RunConfig, TaskType=_estimator_lib.TaskType),
        "model_fn": _names(estimator_lib, ("EstimatorSpec", "ModeKeys")),
        "mode_keys": _names(estimator_lib, ("ModeKeys",)),
        "training": _names(estimator_lib, ("TrainSpec", "EvalSpec", "train_and_evaluate")),
        "exporter": _names(estimator_lib, ("Exporter", "FinalExporter", "LatestExporter", "BestExporter")),
        "estimator_lib": _names(estimator_lib, estimator_lib.__all__),
        "export": export_names,
        "export.export": export_names,
        "export.export_lib": export_names,
        "export.export_output": output_names,
    }
    for suffix, helpers in PRIVATE_HELPERS.items():
        members[suffix].update({name: getattr(_estimator_lib, ours) for name, ours in helpers.items()})
    return members


def estimator_path_modules(estimator: namespaces.Namespace) -> Dict[str, namespaces.Namespace]:
    """`tensorflow_estimator` (top level and `python.estimator.*`) and `tensorflow.python.estimator.*` modules.

    Args:
      estimator: the `tensorflow.estimator` module `install()` provides (`namespaces.estimator_modules()`), which
        is also `tensorflow_estimator.estimator`.

    Returns:
      `{module name: module}`, `tensorflow.python.estimator` included (`install()` also sets it on
      `tensorflow.python`).
    """
    members: Dict[str, Dict[str, Any]] = {"tensorflow_estimator": {"estimator": estimator}}
    for suffix, names in _estimator_module_members().items():
        members[f"tensorflow_estimator.python.estimator.{suffix}"] = names
        members[f"tensorflow.python.estimator.{suffix}"] = names
    for suffix, names in _tpu_module_members().items():
        members[f"tensorflow_estimator.python.estimator.tpu.{suffix}"] = names
    # `tensorflow.python` is TensorFlow's own package: built here only as the parent's placeholder, not returned.
    modules = link_tree({}, members)
    modules.pop("tensorflow", None)
    modules.pop("tensorflow.python", None)
    modules["tensorflow_estimator.estimator"] = estimator
    return modules


def tf_python_tpu_modules() -> Dict[str, namespaces.Namespace]:
    """`tensorflow.python.tpu.{tpu_estimator,tpu_config,tpu_context}` (TensorFlow's stubs of tensorflow_estimator's
    modules until 2.15, imported by Mesh TensorFlow and T5 programs) as modules of our classes.

    Returns:
      `{module name: module}`; `install()` also sets each on TensorFlow's `tensorflow.python.tpu` package.
    """
    return {
        f"tensorflow.python.tpu.{name}": namespaces.make_namespace(
            f"tensorflow.python.tpu.{name}", names, "Legacy module path, from tpu_estimator.compat."
        )
        for name, names in _tpu_module_members().items()
    }


def upstream_tpu_module_names() -> Dict[str, Dict[str, Any]]:
    """{upstream module name: {name: our object}} set by `install()` when upstream's Estimator core is active:
    tensorflow_estimator's TPU modules, its `estimator.tpu` API and TensorFlow's stubs of those modules."""
    members = {f"tensorflow_estimator.python.estimator.tpu.{n}": names for n, names in _tpu_module_members().items()}
    members.update({f"tensorflow.python.tpu.{n}": names for n, names in _tpu_module_members().items()})
    members["tensorflow_estimator._api.v1.estimator.tpu"] = namespaces.estimator_names()
    members["tensorflow_estimator._api.v1.estimator.tpu.experimental"] = namespaces.estimator_experimental_names()
    return members
