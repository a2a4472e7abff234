"""The layering of the product code (docs/ARCHITECTURE.md): nothing below the estimator imports it; no import cycle;
TensorFlow internals (`tensorflow.python`, private members of TensorFlow's objects) reached only through each
package's `_tf_internal.py`, `tensorflow_estimator` only through `tpu_estimator/_estimator_lib.py`."""

import ast
import pathlib
from typing import Iterator, List, Set

import pytest

from tests.helpers.modules import cycles, import_graph, imported_names, product_modules, relative

# In make check's quick sample (static checks of the whole tree, seconds).
pytestmark = pytest.mark.quick

# Each package's one module of TensorFlow internals.
WRAPPERS = {
    "tpu_estimator/_tf_internal.py",
    "tpu_estimator/estimator_core/_tf_internal.py",
    "embedding/_tf_internal.py",
}
ESTIMATOR_LIB = "tpu_estimator/_estimator_lib.py"  # upstream's or our Estimator core, chosen once
# Files whose internals are not behind a `_tf_internal.py` yet (none: every module's are).
PENDING: Set[str] = set()
# Private members read on an object that is not a TensorFlow object, per file: `(attribute, why it is allowed)`.
# Attributes through `self`, `cls` and `super()` are the class's own, checked apart (TF_SUBCLASS_STATE).
NOT_TENSORFLOW = {
    ESTIMATOR_LIB: {
        "_verify_model_fn_args",  # the Estimator library's own check, named once for both cores
        # upstream's helper that public TPU programs call (compat/legacy_modules.py PRIVATE_HELPERS), for its paths
        "_load_global_step_from_checkpoint_dir",
        # TPUEstimator's own members: with one process per host, train_and_evaluate runs its loop (tpu_estimator.py).
        "_trains_and_evaluates_on_hosts",
        "_train_and_evaluate_on_hosts",
    },
    "tpu_estimator/app/cluster_server.py": {"_exit"},  # os._exit: a server process ends without Python's clean-up
    # os._exit: Ctrl-C ends the CLI at once (as SIGINT's default action), after its one line, even inside a loop.
    "tpu_estimator/app/interrupt.py": {"_exit"},
    # os._exit: a TF2 program's host process (not the client) ends once the client is gone, without Python's clean-up
    "tpu_estimator/compat/tpu_hosts.py": {"_exit"},
    # TPUEstimator's own class attribute saying it replicates in one graph (tpu_estimator.py).
    "tpu_estimator/estimator_core/distributed_training.py": {"_REPLICATES_IN_GRAPH"},
    "tpu_estimator/estimator_core/run_config.py": {"_save_checkpoints_secs", "_save_checkpoints_steps"},  # its own
    "tpu_estimator/tpu_config.py": {"_tpu_config", "_shard_layouts"},  # its own RunConfig's fields on a copy
    "tpu_estimator/app/data/criteo.py": {"_record"},  # the module's own malformed-row counter
    "embedding/config.py": {"_source_ref"},  # its own config classes' field
    # Whether tf.compat.v1.layers already resolved to Keras 3, read off TensorFlow's module wrapper without importing
    # TensorFlow (`_keras2` runs before it is imported, so it cannot go through `_tf_internal`).
    "tpu_estimator/_keras2.py": {"_tfmw_wrapped_module"},
    # A SparseCore table's restore hands each of our trackables its values through the saveable protocol's method,
    # which our own trackables implement (`checkpointing.py`, this module).
    "embedding/sparsecore_checkpoint.py": {"_restore_from_tensors"},
}
NAMEDTUPLE_API = {"_replace", "_fields", "_asdict", "_make"}  # public methods of namedtuples despite the underscore
# Subclasses of TensorFlow classes that read their base class's private state, and why.
TF_SUBCLASS_STATE = {
    # Overrides upstream's `after_create_session` to write graph.pbtxt natively; reads what the base's constructor
    # set, as upstream's own method does.
    ("tpu_estimator/estimator_core/checkpoint_saver.py", "CheckpointSaverHook"): {
        "_checkpoint_dir",
        "_get_saver",
        "_global_step_tensor",
        "_save",
        "_save_graph_def",
        "_summary_writer",
        "_timer",
    },
    # `StepCounterHook` subclass whose `_log_and_record` override writes to the base's summary writer.
    ("tpu_estimator/modes/hooks.py", "ExamplesPerSecondHook"): {"_summary_writer"},
    # The mid-level APIs (tf.Module subclasses) call their own mixin's method (sparsecore_checkpoint.py).
    ("embedding/serving.py", "TPUEmbeddingForServing"): {"_init_sparsecore_restore"},
    ("embedding/tpu_embedding.py", "TPUEmbedding"): {"_init_sparsecore_restore"},
    ("embedding/tpu_embedding_v2.py", "TPUEmbeddingV2"): {"_init_sparsecore_restore"},
}


def _checked_modules() -> List[pathlib.Path]:
    return [p for p in product_modules() if relative(p) not in WRAPPERS | PENDING]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _on_own_class(node: ast.Attribute) -> bool:
    """`self._x`, `cls._x`, `self.__class__._x`, `super()._x`, `super(C, self)._x`."""
    root = _root(node.value)
    return isinstance(root, ast.Name) and root.id in ("self", "cls", "super")


def _private_reads(tree: ast.AST) -> Iterator[str]:
    """Private attributes read on other objects, and `getattr`/`hasattr`/`setattr` of a private name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and not _on_own_class(node):
            yield node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
            and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))
        ):
            yield node.args[1].value


def _tf_base_state(tree: ast.AST) -> Iterator[tuple]:
    """`(class name, attribute)`: a private attribute a subclass of a `tf.` class reads through `self` that the class
    neither defines nor assigns (so its base class's)."""
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if not any(isinstance(_root(base), ast.Name) and _root(base).id == "tf" for base in cls.bases):
            continue
        own: Set[str] = {
            n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "object.__setattr__" and len(node.args) > 1:
                own.add(getattr(node.args[1], "value", None))
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and _is_private(node.attr)
                and node.attr not in own
            ):
                yield cls.name, node.attr


def test_product_modules_found():
    names = {relative(p) for p in product_modules()}
    assert {
        "tpu_estimator/modes/train_loop.py",
        "tpu_estimator/estimator_core/estimator.py",
        "embedding/engine.py",
    } <= names
    assert WRAPPERS | PENDING | set(NOT_TENSORFLOW) | {f for f, _ in TF_SUBCLASS_STATE} <= names


def test_no_module_below_the_estimator_imports_it():
    importers = [
        relative(p)
        for p in product_modules()
        if relative(p).startswith("tpu_estimator/")
        and relative(p).split("/")[1] not in ("compat", "app", "estimator", "experimental")
        and relative(p) not in ("tpu_estimator/tpu_estimator.py", "tpu_estimator/__init__.py")
        and "tpu_estimator.tpu_estimator" in set(imported_names(p))
    ]
    assert importers == []


def test_embedding_never_imports_tpu_estimator():
    importers = [
        relative(p)
        for p in product_modules()
        if relative(p).startswith("embedding/") and any(m.split(".")[0] == "tpu_estimator" for m in imported_names(p))
    ]
    assert importers == []


def test_no_import_cycle_among_product_modules():
    """Function-level imports count: a cycle postponed to call time is still a cycle."""
    assert cycles(import_graph()) == []


def test_import_cycle_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_tensorflow_internals_only_through_tf_internal():
    offenders = {}
    for path in _checked_modules():
        name = relative(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = [
            m
            for m in imported_names(path)
            if m.startswith("tensorflow.python") or (m.startswith("tensorflow_estimator") and name != ESTIMATOR_LIB)
        ]
        allowed = NOT_TENSORFLOW.get(name, set()) | NAMEDTUPLE_API
        private = sorted({attr for attr in _private_reads(tree) if attr not in allowed})
        base_state = sorted(
            {
                f"{cls}.{attr}"
                for cls, attr in _tf_base_state(tree)
                if attr not in TF_SUBCLASS_STATE.get((name, cls), ())
            }
        )
        if imports or private or base_state:
            offenders[name] = sorted(set(imports)) + private + base_state
    assert offenders == {}


def test_private_member_checks_find_offenders():
    source = (
        "import tensorflow as tf\n"
        "from tensorflow.python.ops import control_flow_util\n"
        "class Hook(tf.compat.v1.train.StepCounterHook):\n"
        "    def after_run(self, ctx, values):\n"
        "        self._mine = 1\n"
        "        return self._summary_writer, self._mine, ctx.session.graph._collections\n"
        "def f(graph, coo):\n"
        "    return graph._get_control_flow_context(), getattr(graph, '_collections'), coo._replace(a=1)\n"
    )
    tree = ast.parse(source)
    assert sorted(set(_private_reads(tree))) == ["_collections", "_get_control_flow_context", "_replace"]
    assert list(_tf_base_state(tree)) == [("Hook", "_summary_writer")]


# Values (settings, specs, configs, protocols) and the bottom modules they may build on; stages are everything else.
VALUE_MODULES = {
    "specs.spec",
    "specs.host_call_spec",
    "tpu_config",
    "specs.context",
    "specs.embedding_spec",
    "replicas.replica_context",
}
BOTTOM_MODULES = {
    "_estimator_lib",
    "_tf_internal",
    "_keras2",
    "specs.batch_size",
    "hosts.shard_devices",
    "hosts.cluster",
}


def test_value_modules_import_no_stage():
    graph = import_graph()
    stages = {}
    for value in sorted(VALUE_MODULES):
        imported = {m for m in graph["tpu_estimator." + value] if m.startswith("tpu_estimator.")}
        beyond = sorted(m for m in imported if m[len("tpu_estimator.") :] not in VALUE_MODULES | BOTTOM_MODULES)
        if beyond:
            stages[value] = beyond
    assert stages == {}


def _tensorflow_names(tree: ast.AST) -> Set[str]:
    """The names a module binds to TensorFlow's modules and objects by its imports (`tf`, `from tensorflow... import
    x`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "tensorflow")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tensorflow":
            names.update(a.asname or a.name for a in node.names)
    return names


def _tensorflow_state_writes(tree: ast.AST) -> Iterator[str]:
    """Assignments to attributes of TensorFlow's modules and objects (`tf.x.y = ...`, `setattr(tf_module, ...)`)."""
    names = _tensorflow_names(tree)
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(_root(target), ast.Name) and _root(target).id in names:
                yield ast.unparse(target)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and isinstance(_root(node.args[0]), ast.Name)
            and _root(node.args[0]).id in names
        ):
            yield ast.unparse(node)


def test_tensorflow_state_is_changed_only_in_tf_internal():
    """Process-wide patches of TensorFlow's modules live in a `_tf_internal.py`, as context managers (compat's
    install/uninstall patch the namespaces they resolve, by design: docs/ARCHITECTURE.md)."""
    writes = {}
    for path in _checked_modules():
        found = sorted(set(_tensorflow_state_writes(ast.parse(path.read_text(encoding="utf-8")))))
        if found:
            writes[relative(path)] = found
    assert writes == {}


def test_tensorflow_state_writes_are_found():
    source = (
        "import tensorflow as tf\n"
        "from tensorflow.python.ops import control_flow_util as cfu\n"
        "tf.compat.v1.flags.x = 1\n"
        "cfu.ENABLE_CONTROL_FLOW_V2 = False\n"
        "setattr(cfu, 'ENABLE_CONTROL_FLOW_V2', True)\n"
        "config = tf.compat.v1.ConfigProto()\n"
        "config.allow_soft_placement = True\n"
    )
    assert sorted(_tensorflow_state_writes(ast.parse(source))) == [
        "cfu.ENABLE_CONTROL_FLOW_V2",
        "setattr(cfu, 'ENABLE_CONTROL_FLOW_V2', True)",
        "tf.compat.v1.flags.x",
    ]
