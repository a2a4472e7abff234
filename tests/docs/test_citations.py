"""Docs and docstrings cite only files in the repository: semantics are `docs/SEMANTICS.md`, nothing outside."""

import re
import subprocess

import pytest

from tests.docs.test_readme import REPO

# In make check's quick sample (static checks of the whole tree, seconds).
pytestmark = pytest.mark.quick

# A citation of a file users do not have: SEMANTICS.md other than docs/SEMANTICS.md, the workspace's design notes,
# or paths outside the repository.
OUTSIDE = re.compile(r"(?<!docs/)\bSEMANTICS\.md|\bDESIGN\.md|/work/shared|\.\./shared/")
SECTION = re.compile(r"docs/SEMANTICS\.md(?: section)? (\d+)")


def tracked_text_files():
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [REPO / n for n in names if n.endswith((".py", ".md", ".yaml", ".cfg", ".toml")) and (REPO / n).is_file()]


def test_no_citation_of_files_outside_the_repository():
    found = []
    for path in tracked_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line) and path.name != "test_citations.py":
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert not found, "cite docs/SEMANTICS.md (or nothing) instead:\n" + "\n".join(found)


def test_cited_sections_exist():
    sections = set(re.findall(r"^## (\d+)\. ", (REPO / "docs" / "SEMANTICS.md").read_text(), flags=re.M))
    for path in tracked_text_files():
        for cited in SECTION.findall(path.read_text(encoding="utf-8")):
            assert cited in sections, (
                f"{path.relative_to(REPO)} cites docs/SEMANTICS.md {cited}, which has no such section"
            )
