"""docs/ARCHITECTURE.md names every product module in its module tables, and names only modules that exist.

Each table belongs to the package of the heading above it (`tpu_estimator/`, `estimator_core/`, `embedding/`); a row's
first cell names modules (`train_loop.py`) or folders (`app/`), relative to that package. A module is named by the
table of the deepest package that has one: `tpu_estimator/estimator_core/estimator.py` by the Estimator core's
table (the `estimator_core/` row of `tpu_estimator/`'s does not cover its modules), `tpu_estimator/app/cli.py` by the
`app/` row.
"""

import re
from typing import Dict, Set

import pytest

from tests.helpers.modules import REPO, product_modules, relative

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
    assert set(tables) == {"tpu_estimator/", "tpu_estimator/estimator_core/", "embedding/"}
    assert unnamed_modules(tables, [relative(p) for p in product_modules()]) == []


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
