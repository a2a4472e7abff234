"""docs/API.md lists exactly the public names of `tpu_estimator`, `tpu_estimator.experimental` and `embedding`.

Public names: a package's `__all__`, or, without one, the names its `__init__.py` imports. The page lists them
under `## \\`package\\`` headings as `- \\`Name\\`: description` items (several names may share one item).
"""

import ast
import importlib
import re
from pathlib import Path
from typing import Dict, List

import pytest

REPO = Path(__file__).resolve().parents[2]
API_PAGE = REPO / "docs" / "API.md"
PACKAGES = ("tpu_estimator", "tpu_estimator.experimental", "embedding")
ITEM = re.compile(r"^- ((?:`[^`]+`(?:, )?)+): (\S.*)$")


def exported_names(package: str) -> List[str]:
    module = importlib.import_module(package)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    return [
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if not (alias.asname or alias.name).startswith("_")
    ]


def page_sections(text: str) -> Dict[str, Dict[str, str]]:
    """`{package: {name: description}}` from the page's `## \\`package\\`` sections."""
    sections: Dict[str, Dict[str, str]] = {}
    current = None
    lines: List[str] = []
    for line in text.splitlines():  # an item's indented continuation lines join the item
        if line.startswith("  ") and lines and lines[-1].startswith("- "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    for line in lines:
        heading = re.fullmatch(r"## `([\w.]+)`", line)
        if heading:
            current = sections.setdefault(heading.group(1), {})
        elif line.startswith("## "):
            current = None
        elif current is not None:
            item = ITEM.match(line)
            if item:
                for name in re.findall(r"`([^`]+)`", item.group(1)):
                    assert name not in current, f"docs/API.md lists {name} twice under {line}"
                    current[name] = item.group(2)
    return sections


SECTIONS = page_sections(API_PAGE.read_text(encoding="utf-8"))


def test_the_page_has_one_section_per_package():
    assert sorted(SECTIONS) == sorted(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_on_the_page_and_nothing_else(package):
    exported = set(exported_names(package))
    listed = set(SECTIONS.get(package, {}))
    assert not exported - listed, f"public names of {package} missing from docs/API.md: {sorted(exported - listed)}"
    assert not listed - exported, f"docs/API.md names what {package} does not export: {sorted(listed - exported)}"
    module = importlib.import_module(package)
    for name in listed:
        assert hasattr(module, name), f"{package}.{name}"
        assert len(SECTIONS[package][name].split()) >= 3, f"{package}.{name}: give a one-line description"


def test_the_parser_sees_missing_and_extra_names():
    page = "## `pkg`\n\n- `A`, `B`: two names.\n- `C`: one name.\n  continued.\n\n## Other\n- `D`: not a package.\n"
    expected = {"A": "two names.", "B": "two names.", "C": "one name. continued."}
    assert page_sections(page) == {"pkg": expected}
