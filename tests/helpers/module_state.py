"""State a module keeps beside the values it is handed, read from the source (nothing is imported): module-level
objects that hold state (thread-locals, weak dicts, counters, locks, caches, instances of the module's own classes
but its values: named tuples, frozen dataclasses),
module-level containers or objects that a function changes, `global` statements, and graph collections used.

Each finding is one line, `path: what`, e.g. `tpu_estimator/replicas/replica_context.py: _current = threading.local`
or `embedding/checkpointing.py: add_to_collection(SHARD_VARIABLES_COLLECTION)`; the test of the product's list
(tests/estimator/test_module_state.py) compares them with the reasons it lists.
"""

import ast
from typing import Iterator, List, Set

# Callees (last dotted part) whose module-level result holds state however it is used.
STATEFUL_CALLS = {
    "local": "thread-local",
    "WeakKeyDictionary": "weak dict",
    "WeakValueDictionary": "weak dict",
    "WeakSet": "weak set",
    "count": "counter",
    "Lock": "lock",
    "RLock": "lock",
    "Condition": "lock",
    "Event": "event",
    "Semaphore": "lock",
    "BoundedSemaphore": "lock",
}
CACHES = {"lru_cache", "cache", "cached_property"}
# Methods that change a container (or a counter: `next`).
MUTATORS = {
    "append",
    "appendleft",
    "extend",
    "insert",
    "add",
    "update",
    "setdefault",
    "pop",
    "popitem",
    "popleft",
    "remove",
    "discard",
    "clear",
    "sort",
    "reverse",
}
COLLECTION_CALLS = {
    "add_to_collection",
    "add_to_collections",
    "get_collection",
    "get_collection_ref",
    "clear_collection",
    "register_variable_collection",
    "graph_collections",  # the graph's collections dict itself (`_tf_internal.py`)
    "set_graph_collections",
}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return _dotted(node.value) + "." + node.attr
    return ""


def _module_bindings(tree: ast.Module) -> Iterator[ast.AST]:
    """Module-level assignments, those in top-level `if`/`try` blocks included."""
    pending: List[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            yield node
        elif isinstance(node, ast.If):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]


def _targets(node: ast.AST) -> List[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _changed_in_functions(tree: ast.Module) -> Set[str]:
    """Names that a function of the module changes in place: `name.add(...)`, `name[k] = v`, `del name[k]`,
    `name.attr = v`, `next(name)`."""
    changed: Set[str] = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                callee = node.func
                if isinstance(callee, ast.Attribute) and callee.attr in MUTATORS and isinstance(callee.value, ast.Name):
                    changed.add(callee.value.id)
                if isinstance(callee, ast.Name) and callee.id == "next" and node.args:
                    if isinstance(node.args[0], ast.Name):
                        changed.add(node.args[0].id)
            targets = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if isinstance(target, (ast.Subscript, ast.Attribute)) and isinstance(target.value, ast.Name):
                    changed.add(target.value.id)
    return changed


def _state_of_binding(node: ast.AST, own_classes: Set[str], changed: Set[str]) -> Iterator[str]:
    value = node.value
    for name in _targets(node):
        if isinstance(value, ast.Call):
            callee = _dotted(value.func)
            last = callee.rpartition(".")[2]
            if last in STATEFUL_CALLS:
                yield "{} = {}".format(name, callee)
                continue
            if callee in own_classes:
                yield "{} = {}()".format(name, callee)
                continue
        if name in changed and not isinstance(value, ast.Constant):
            yield "{} changed by a function".format(name)


def _globals(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            for name in node.names:
                yield "global {}".format(name)


def _caches(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if _dotted(target).rpartition(".")[2] in CACHES:
                    yield "{} cached ({})".format(node.name, _dotted(target))


def _collections(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            method = _dotted(node.func).rpartition(".")[2]
            if method in COLLECTION_CALLS:
                key = ast.unparse(node.args[0]) if node.args else ""
                yield "{}({})".format(method, key)


def _is_value_class(node: ast.ClassDef) -> bool:
    """A class whose instances cannot change: a `NamedTuple`/`namedtuple` or a frozen dataclass."""
    for base in node.bases:
        if _dotted(base).rpartition(".")[2] == "NamedTuple":
            return True
        if isinstance(base, ast.Call) and _dotted(base.func).rpartition(".")[2] == "namedtuple":
            return True
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and _dotted(decorator.func).rpartition(".")[2] == "dataclass":
            if any(k.arg == "frozen" and getattr(k.value, "value", False) is True for k in decorator.keywords):
                return True
    return False


def module_state(source: str) -> Set[str]:
    """What one module's source keeps beside the values it is handed (see the module docstring)."""
    tree = ast.parse(source)
    own_classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef) and not _is_value_class(node)}
    changed = _changed_in_functions(tree)
    found: Set[str] = set()
    for node in _module_bindings(tree):
        found.update(_state_of_binding(node, own_classes, changed))
    found.update(_globals(tree))
    found.update(_caches(tree))
    found.update(_collections(tree))
    return found
