"""docs/ARCHITECTURE.md names every product module in its module tables, and names only modules that exist.

Each table belongs to the package of the heading above it (`tpu_estimator/`, `estimator_core/`, `embedding/`); a row's
first cell names modules (`train_loop.py`) or folders (`app/`), relative to that package. A module is named by the
table of the deepest package that has one: `tpu_estimator/estimator_core/estimator.py` by the Estimator core's
table (the `estimator_core/` row of `tpu_estimator/`'s does not cover its modules), `tpu_estimator/app/cli.py` by the
`app/` row.
"""

import re
from typing import Dict, Optional, Set

import pytest

from tests.helpers.modules import REPO, import_graph, product_modules, relative

# In make check's quick sample (static checks of the whole tree, seconds).
pytestmark = pytest.mark.quick

ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
HEADING_PACKAGE = re.compile(r"^#+ .*`((?:[a-z_]+/)+)`")
PACKAGE_OF_FOLDER = {"tpu_estimator/": "tpu_estimator/", "estimator_core/": "tpu_estimator/estimator_core/"}


def module_tables(text: str) -> Dict[str, Set[str]]:
    """`{package path: the names in the first cells of its tables' rows}`."""
    tables: Dict[str, Set[str]] = {}
    package = None
    for line in text.splitlines():
        heading = HEADING_PACKAGE.match(line)
        if heading:
            folder = heading.group(1)
            package = PACKAGE_OF_FOLDER.get(folder, folder)
        elif line.startswith("|") and package and not line.startswith(("|---", "| module |")):
            first_cell = line.split("|")[1]
            tables.setdefault(package, set()).update(re.findall(r"`([\w./]+)`", first_cell))
    return tables


def unnamed_modules(tables: Dict[str, Set[str]], modules) -> list:
    missing = []
    for module in modules:
        packages = [p for p in tables if module.startswith(p)]
        if not packages:
            missing.append(module)
            continue
        package = max(packages, key=len)
        path = module[len(package) :]
        parts = path.split("/")
        folders = {"/".join(parts[: i + 1]) + "/" for i in range(len(parts) - 1)}
        if path not in tables[package] and not folders & tables[package]:
            missing.append(module)
    return missing


def test_every_product_module_is_in_the_tables():
    tables = module_tables(ARCHITECTURE.read_text(encoding="utf-8"))
    subpackages = {f"tpu_estimator/{p.parent.name}/" for p in (REPO / "tpu_estimator").glob("*/__init__.py")}
    covered_by_a_row = {"tpu_estimator/app/", "tpu_estimator/compat/", "tpu_estimator/estimator/"}
    covered_by_a_row |= {"tpu_estimator/experimental/"}
    assert set(tables) == {"tpu_estimator/", "embedding/"} | subpackages - covered_by_a_row
    modules = [relative(p) for p in product_modules() if not _docstring_only(p)]
    assert unnamed_modules(tables, modules) == []


def _docstring_only(path) -> bool:
    """A package's `__init__.py` that only says what the package is (its section's heading names it)."""
    import ast

    body = ast.parse(path.read_text(encoding="utf-8")).body
    return path.name == "__init__.py" and len(body) == 1 and isinstance(body[0], ast.Expr)


def test_tables_name_only_what_exists():
    tables = module_tables(ARCHITECTURE.read_text(encoding="utf-8"))
    stale = [
        package + name
        for package, names in tables.items()
        for name in names
        if name.endswith((".py", "/")) and not (REPO / package / name).exists()
    ]
    assert stale == []


def test_a_missing_module_is_found():
    text = "## `tpu_estimator/`\n\n| module | concern |\n|---|---|\n| `a.py`, `app/` | x |\n\n## `embedding/`\n| `b.py` | y |\n"
    tables = module_tables(text)
    modules = [
        "tpu_estimator/a.py",
        "tpu_estimator/app/cli.py",
        "tpu_estimator/c.py",
        "embedding/b.py",
        "embedding/d.py",
    ]
    assert unnamed_modules(tables, modules) == ["tpu_estimator/c.py", "embedding/d.py"]


# ------------------------------------------------------------------------------------------- the packages' claims
BOTTOM = {
    "_tf_internal.py",
    "_estimator_lib.py",
    "_keras2.py",
    "graph_walk.py",
    "_lazy_names.py",
    "_environment.py",
    "_moved_modules.py",
    "__init__.py",
}
TREE_LINE = re.compile(r"^[├└]── (\S+)")


def package_of(module: str) -> Optional[str]:
    """The node of the packages' table a dotted module belongs to (`tpu_estimator.hosts.cluster` -> `hosts/`), None
    for the bottom modules and what is not ours."""
    parts = module.split(".")
    if parts[0] == "embedding":
        return "embedding/"
    if parts[0] != "tpu_estimator" or len(parts) == 1:
        return None
    if (REPO / "tpu_estimator" / parts[1]).is_dir():
        return parts[1] + "/"
    name = parts[1] + ".py"
    return None if name in BOTTOM else name


def package_imports(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    imports: Dict[str, Set[str]] = {}
    for module, imported in graph.items():
        node = package_of(module)
        if node is None or node == "embedding/":
            continue
        imports.setdefault(node, set()).update(p for p in map(package_of, imported) if p and p != node)
    return imports


def claimed_tree_and_imports(text: str):
    section = text[text.index("## The packages") : text.index("## One TRAIN step on shards")]
    tree = {m.group(1) for m in map(TREE_LINE.match, section.splitlines()) if m}
    claims = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            first, imports = line.split("|")[1:3]
            claims[re.findall(r"`([\w./]+)`", first)[0]] = set(re.findall(r"`([\w./]+)`", imports))
    return tree, claims


def test_the_diagram_is_the_package_tree():
    tree, claims = claimed_tree_and_imports(ARCHITECTURE.read_text(encoding="utf-8"))
    root = REPO / "tpu_estimator"
    folders = {p.name + "/" for p in root.iterdir() if (p / "__init__.py").exists()}
    modules = {p.name for p in root.glob("*.py")} - BOTTOM
    assert tree == folders | modules
    assert set(claims) == tree


def test_the_packages_import_what_the_table_says():
    _, claims = claimed_tree_and_imports(ARCHITECTURE.read_text(encoding="utf-8"))
    actual = package_imports(import_graph())
    assert {k: sorted(v) for k, v in actual.items()} == {k: sorted(claims[k]) for k in actual}


def test_no_two_packages_import_each_other():
    actual = package_imports(import_graph())
    both_ways = sorted((a, b) for a, targets in actual.items() for b in targets if a < b and a in actual.get(b, ()))
    assert both_ways == []


def test_a_false_import_claim_is_found():
    text = (
        "## The packages\n```\ntpu_estimator/\n├── specs/   x\n└── hosts/   y\n```\n| package | imports |\n|---|---|\n"
        "| `specs/` | `hosts/` |\n| `hosts/` | nothing |\n## One TRAIN step on shards\n"
    )
    tree, claims = claimed_tree_and_imports(text)
    assert tree == {"specs/", "hosts/"}
    graph = {"tpu_estimator.hosts.cluster": {"tpu_estimator.specs.context", "tpu_estimator._tf_internal"}}
    assert package_imports(graph) == {"hosts/": {"specs/"}} != {"hosts/": claims["hosts/"]}
