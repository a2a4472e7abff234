"""BENCHMARKS.md and its history cannot rot: commands, flags, configs, links and cited files exist.

- Every command of a fenced block, and every inline `python scripts/...` command, names a script of `scripts/`
  and only flags that script defines (absl `flags.DEFINE_*`, with `--noNAME` for booleans, or argparse); a
  `--program`, `--config` or `--workload` value names a config that exists. `make` targets and `pip install`
  extras exist. Any other command fails the test: teach it the command first.
- Every Markdown link and image points at a file that exists, and at a heading of it when it has an anchor.
- Every file BENCHMARKS.md cites in backquotes exists (the history records the trees it measured, whose files may
  have moved since, so only its commands and links are checked).
- The pages for users speak of dates, not of the work sessions that measured them, and each of today's results
  says when it was measured.
"""

import configparser
import glob
import re
import shlex
from pathlib import Path
from typing import Dict, List, Set

import pytest

from tests.docs.test_readme import REPO, readme_blocks

BENCHMARKS = REPO / "BENCHMARKS.md"
HISTORY = REPO / "docs" / "benchmarks" / "HISTORY.md"
PAGES = [BENCHMARKS, HISTORY]
PYTHON = re.compile(r"^(python3?|<python>|\S*/bin/python3?)$")
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
INLINE_CODE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CITED_PATH = re.compile(r"^(?:scripts|tpu_estimator|embedding|configs|docs|tests|examples)/[\w./*{},-]+$")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
SESSION_LABEL = re.compile(r"\bsessions? \d+|\bsession-\d+", re.IGNORECASE)


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def script_flags(script: Path) -> Set[str]:
    """The flags a script defines, itself or through a module of its folder it imports (`import ours_and_upstream`,
    `from common import define_flags`): absl's (booleans also as `noNAME`) and argparse's."""
    source = script.read_text(encoding="utf-8")
    for module in re.findall(r"^(?:import|from) (\w+)", source, flags=re.M):
        if (script.parent / (module + ".py")).is_file():
            source += (script.parent / (module + ".py")).read_text(encoding="utf-8")
    names = set(re.findall(r"flags\.DEFINE_\w+\(\s*(?:name=)?\"(\w+)\"", source))
    names |= {"no" + n for n in re.findall(r"flags\.DEFINE_bool(?:ean)?\(\s*\"(\w+)\"", source)}
    names |= set(re.findall(r"add_argument\(\s*\"--([\w-]+)\"", source))
    return names


def make_targets() -> Set[str]:
    return set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(encoding="utf-8"), flags=re.M))


def extras() -> Set[str]:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg", encoding="utf-8")
    return set(parser["options.extras_require"])


def check_value(flag: str, value: str) -> None:
    if flag == "program":
        assert (REPO / "configs" / "bench" / f"{value}.yaml").is_file() or (REPO / value).is_file(), (
            f"--program={value}: no configs/bench/{value}.yaml"
        )
    elif flag == "config":
        assert (REPO / value).is_file(), f"--config={value}: no such file"
    elif flag == "workload" and value != "all":
        assert glob.glob(str(REPO / "configs" / "bench" / f"{value}_*.yaml")), f"--workload={value}: no config"


def check_command(line: str) -> None:
    """One shell command of the pages: `[VAR=value ...] python scripts/NAME.py --flag=value ...`, `make`, `pip`."""
    # A placeholder such as `<checkout of dc52ba9>` is one word.
    words = shlex.split(re.sub(r"<[^<>]* [^<>]*>", "PLACEHOLDER", line), comments=True)
    while words and ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return
    if words[0] == "make":
        assert set(words[1:]) <= make_targets(), f"{line}: no such make target"
        return
    if words[:3] == ["pip", "install", "-e"]:
        extra = re.fullmatch(r"\.\[([\w,]+)\]", words[3])
        assert extra and set(extra.group(1).split(",")) <= extras(), f"{line}: no such extra in setup.cfg"
        return
    if PYTHON.match(words[0]):
        words = words[1:]
    assert words and words[0].startswith("scripts/"), f"{line}: a command this test does not check; teach it"
    script = REPO / words[0]
    assert script.is_file(), f"{line}: {words[0]} does not exist"
    defined = script_flags(script)
    for word in words[1:]:
        assert word.startswith("--"), f"{line}: {word!r} is not a flag of {words[0]}"
        name, _, value = word[2:].partition("=")
        assert name in defined, f"{line}: {words[0]} defines no --{name} (it has {sorted(defined)})"
        check_value(name, value)


def commands(page: Path) -> List[str]:
    """The command lines of a page's fenced blocks (continuations joined) and its inline `python scripts/...`."""
    text = page.read_text(encoding="utf-8")
    found = []
    for block in readme_blocks(text):
        assert block.language in ("", "sh"), f"{relative(page)}:{block.line}: a {block.language} block"
        for line in block.code.replace("\\\n", " ").splitlines():
            if line.strip():
                found.append(line)
    for code in INLINE_CODE.findall(re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)):
        code = " ".join(code.split())
        if re.match(r"^(?:[A-Z_]+=\S* )*(?:\S*python3? |<python> )?scripts/\S+\.py\b", code):
            found.append(code)
    return found


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_commands_name_existing_scripts_flags_and_configs(page):
    lines = commands(page)
    assert lines, f"{relative(page)} has no commands"
    for line in lines:
        check_command(line)


def test_the_command_check_refuses_what_does_not_exist():
    for bad in (
        "python scripts/benchmark_program.py --program=P_dlrm_zipf --no_such_flag=1",
        "python scripts/no_such_script.py",
        "python scripts/benchmark_program.py --program=P_no_such_program",
        "python scripts/benchmark.py --workload=Z",
        "tpu-estimator-unknown --x",
        "make no-such-target",
    ):
        with pytest.raises(AssertionError):
            check_command(bad)
    check_command("PYTHONPATH=. python scripts/benchmark_program.py --program=P_dlrm_zipf --nobounds  # comment")


def github_anchor(heading: str, seen: Dict[str, int]) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


def anchors(page: Path) -> Set[str]:
    seen: Dict[str, int] = {}
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
    return {github_anchor(h, seen) for h in headings}


def test_github_anchor_matches_githubs_rule():
    seen: Dict[str, int] = {}
    assert github_anchor("2026-11-26 `e1a61c9`: the session's close, measured apart", seen) == (
        "2026-11-26-e1a61c9-the-sessions-close-measured-apart"
    )
    assert github_anchor("Finite-checkpoint check, `tpu_estimator/checkpoints/finite_checkpoints.py`", seen) == (
        "finite-checkpoint-check-tpu_estimatorcheckpointsfinite_checkpointspy"
    )
    assert github_anchor("Today's results", seen) == "todays-results"
    assert github_anchor("Today's results", seen) == "todays-results-1"


@pytest.mark.parametrize("page", PAGES + [REPO / "README.md"], ids=relative)
def test_links_point_at_existing_files_and_headings(page):
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{relative(page)} links {target}: no such file"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{relative(page)} links {target}: no such heading"


def test_files_cited_by_benchmarks_exist():
    for code in INLINE_CODE.findall(BENCHMARKS.read_text(encoding="utf-8")):
        if not CITED_PATH.match(code):
            continue
        brace = re.search(r"\{([^}]*)\}", code)
        variants = (
            [code[: brace.start()] + v + code[brace.end() :] for v in brace.group(1).split(",")] if brace else [code]
        )
        for variant in variants:
            assert glob.glob(str(REPO / variant)), f"BENCHMARKS.md cites {variant}, which does not exist"


@pytest.mark.parametrize(
    "page", PAGES + [REPO / "README.md", REPO / "CHANGELOG.md"] + sorted((REPO / "docs").glob("*.md")), ids=relative
)
def test_pages_speak_of_dates_not_sessions(page):
    found = [
        f"{relative(page)}:{n}: {line.strip()[:100]}"
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if SESSION_LABEL.search(line)
    ]
    assert not found, "name a measurement by its date (and commit), not by a session:\n" + "\n".join(found)


def test_each_of_todays_results_says_when_it_was_measured():
    text = BENCHMARKS.read_text(encoding="utf-8")
    today = re.search(r"^## Today's results\n(.*?)^## ", text, flags=re.M | re.S)
    assert today, "BENCHMARKS.md has no `## Today's results` section"
    headings = re.findall(r"^### (.+)$", today.group(1), flags=re.M)
    assert headings
    for heading in headings:
        if heading != "Smaller probes":
            assert DATE.search(heading), f"today's result {heading!r} gives no date"
    for row in re.findall(r"^\| (?!probe|---).*$", today.group(1).split("### Smaller probes")[1], flags=re.M):
        assert DATE.search(row), f"a probe without its date: {row}"
