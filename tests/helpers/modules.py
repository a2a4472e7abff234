"""The repository's product modules (every `.py` under `tpu_estimator/` and `embedding/`) and the imports among them,
read from the source (nothing is imported): for the layering, internals and documentation tests."""

import ast
import pathlib
from typing import Dict, Iterator, List, Set, Tuple

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("tpu_estimator", "embedding")


def product_modules() -> List[pathlib.Path]:
    """Every product module, sorted by path."""
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def module_name(path: pathlib.Path) -> str:
    """`tpu_estimator.app.cli` for `tpu_estimator/app/cli.py`, `tpu_estimator.app` for its `__init__.py`."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def relative(path: pathlib.Path) -> str:
    return path.relative_to(REPO).as_posix()


def imported_names(path: pathlib.Path) -> Iterator[str]:
    """Every module name an import statement of the file names, anywhere in it (function-level imports too), with
    `from a import b` giving both `a` and `a.b` (b may be a module or a name in a); relative imports resolved."""
    for base, names in _imports(path):
        if base:
            yield base
        yield from ("{}.{}".format(base, name) if base else name for name in names)


def _imports(path: pathlib.Path) -> Iterator[Tuple[str, List[str]]]:
    """`(module, [names imported from it])` per import; `(module, [])` for `import module`."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            yield base, [alias.name for alias in node.names]


def import_graph() -> Dict[str, Set[str]]:
    """`{module: the product modules it imports}`. `from a import b` is an import of the module `a.b` when there is
    one, else of `a` (the package `__init__` that runs first is not counted as a dependency)."""
    modules = {module_name(p): p for p in product_modules()}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for base, names in _imports(path):
            submodules = ["{}.{}".format(base, n) for n in names if "{}.{}".format(base, n) in modules]
            edges.update(submodules)
            if base in modules and (not names or len(submodules) < len(names)):
                edges.add(base)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (each an import cycle), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)
