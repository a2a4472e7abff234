"""The README cannot rot: its Python blocks run, its shell commands and flags exist, its YAML configs validate.

Every fenced block of README.md must be `python`, `sh` or `yaml`:

- `python`: run as a program in a subprocess (temporary working directory, small sizes through `EXAMPLE_STEPS`,
  `EXAMPLE_MODEL_DIR`); the program asserts its own results. A block preceded by `<!-- include: PATH -->` must
  equal that file.
- `sh`: each command line is checked: make targets and variables, `tpu-estimator` subcommands, flags and built-in
  config names, launcher options and the flags of the program it runs, modules of `python -m`, files, the demo's
  and TensorBoard's flags. A command this test does not know fails it: teach it the command first.
- `yaml`: loaded as a tpu-estimator config (`config_file.load_config`), so every key and value is valid.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, NamedTuple, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
LANGUAGES = ("python", "sh", "yaml")
INCLUDE = re.compile(r"<!-- include: (\S+) -->")
SMALL_STEPS = "100"


class Block(NamedTuple):
    language: str
    code: str
    line: int  # 1-based line of the opening fence
    include: Optional[str]  # the path of a preceding `<!-- include: PATH -->`


def readme_blocks(text: str) -> List[Block]:
    """The fenced code blocks of a Markdown text, in order."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            language, start = lines[i][3:].strip(), i
            previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            include = INCLUDE.fullmatch(previous.strip())
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            code = "\n".join(body) + "\n"
            blocks.append(Block(language, code, start + 1, include.group(1) if include else None))
        i += 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))


def blocks_of(language: str) -> List[Block]:
    return [b for b in BLOCKS if b.language == language]


def block_id(block: Block) -> str:
    return f"README.md:{block.line}"


def subprocess_env(tmp_path: Path) -> dict:
    """The environment of a README block or example: as a user's plain `python`, without TF_USE_LEGACY_KERAS (which
    the test session sets), since `import tpu_estimator` selects Keras 2 itself."""
    env = dict(os.environ)
    env.pop("TF_USE_LEGACY_KERAS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["EXAMPLE_STEPS"] = SMALL_STEPS
    env["EXAMPLE_MODEL_DIR"] = str(tmp_path / "model")
    return env


_WARNING_LINE = re.compile(r"^(?P<file>\S+\.py):\d+: (?P<category>\w*Warning): ", re.MULTILINE)


def our_warnings(stderr: str, *programs: Path) -> list:
    """The Python warning lines in `stderr` raised from this repository's code or from `programs`."""
    ours = [str(REPO)] + [str(p) for p in programs]
    return [
        match.group(0) + stderr[match.end() :].split("\n", 1)[0]
        for match in _WARNING_LINE.finditer(stderr)
        if any(match.group("file").startswith(prefix) for prefix in ours)
    ]


def run_served_program(program: Path, tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    """Runs `python program` in `tmp_path` (an example's environment); it must succeed and print that it served. Returns its result."""
    result = subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        env=subprocess_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert "served" in result.stdout, result.stdout
    return result


# ------------------------------------------------------------------------------------------------- all blocks
@pytest.mark.quick
def test_every_block_has_a_checked_language():
    assert BLOCKS, "README.md has no code blocks"
    unknown = [f"{block_id(b)}: {b.language or '(none)'}" for b in BLOCKS if b.language not in LANGUAGES]
    assert not unknown, f"blocks this test does not check (use one of {LANGUAGES}): {unknown}"


@pytest.mark.quick
def test_readme_starts_with_make_demo_and_make_test():
    first = BLOCKS[0]
    commands = [line.split("#")[0].strip() for line in first.code.splitlines()]
    assert first.language == "sh" and commands == ["make demo", "make test", "make check"], first.code


@pytest.mark.quick
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.include], ids=block_id)
def test_included_blocks_equal_their_files(block):
    assert block.code == (REPO / block.include).read_text(encoding="utf-8"), (
        f"{block_id(block)} differs from {block.include}: copy the file into the README"
    )


# ------------------------------------------------------------------------------------------------- python
@pytest.mark.parametrize("block", blocks_of("python"), ids=block_id)
def test_python_blocks_run(block, tmp_path):
    program = tmp_path / "readme_program.py"
    program.write_text(block.code, encoding="utf-8")
    result = run_served_program(program, tmp_path, block_id(block))
    # No deprecation (or other) warning from our code or the program at default settings.
    assert our_warnings(result.stderr, program) == []


# ------------------------------------------------------------------------------------------------- yaml
@pytest.mark.parametrize("block", blocks_of("yaml"), ids=block_id)
def test_yaml_blocks_are_valid_configs(block, tmp_path):
    from tpu_estimator.app import config_file

    path = tmp_path / "readme.yaml"
    path.write_text(block.code, encoding="utf-8")
    config = config_file.load_config(str(path), [])
    assert config.model_dir, "a README config names its model_dir, so the commands after it can omit --model_dir"


def files_written_by_readme() -> set:
    """Files the README creates: the YAML blocks are named by their first comment (`# my_dlrm.yaml: ...`)."""
    names = set()
    for block in blocks_of("yaml"):
        match = re.match(r"#\s*(\S+\.yaml)", block.code)
        if match:
            names.add(match.group(1))
    return names


# ------------------------------------------------------------------------------------------------- sh
def shell_commands(code: str) -> List[List[str]]:
    """The commands of a shell block as argument lists: continuations joined, comments and env assignments cut."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            words = words[1:]
        if words:
            commands.append(words)
    return commands


SHELL_COMMANDS = [(b, c) for b in blocks_of("sh") for c in shell_commands(b.code)]


def command_id(item) -> str:
    block, words = item
    return f"{block_id(block)}: {' '.join(words)}"[:100]


def flag_names(words: List[str]) -> List[str]:
    return [w[2:].split("=", 1)[0] for w in words if w.startswith("--")]


def makefile_targets() -> set:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), flags=re.M))


def check_make(words: List[str]) -> None:
    targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
    assignments = [w for w in words[1:] if "=" in w]
    assert targets, f"{words}: name the target"
    assert set(targets) <= makefile_targets(), f"{targets}: not all are targets of the Makefile"
    if not assignments:
        return
    dry_run = subprocess.run(
        ["make", "-n", "-C", str(REPO)] + targets + assignments, capture_output=True, text=True, timeout=60
    )
    assert dry_run.returncode == 0, dry_run.stderr
    for assignment in assignments:
        value = assignment.split("=", 1)[1]
        assert value in dry_run.stdout, f"{assignment}: the value does not reach the commands of make {targets}"
        if assignment.startswith("DEMO_ARGS="):
            check_demo_flags(shlex.split(value))


def check_demo_flags(args: List[str]) -> None:
    help_text = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        env=subprocess_env(Path("/nonexistent")),
    ).stdout
    for name in flag_names(args):
        assert f"--{name}" in help_text, f"--{name}: not a flag of scripts/demo.py:\n{help_text}"


def cli_flags_and_subcommands():
    from absl import flags

    from tpu_estimator.app import cli

    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    names = set(flag_values) | set(flags.FLAGS) | {"help", "helpfull", "helpshort"}
    return names, set(cli.SUBCOMMANDS)


def check_tpu_estimator(words: List[str]) -> None:
    names, subcommands = cli_flags_and_subcommands()
    positional = [w for w in words[1:] if not w.startswith("-")]
    if positional:
        subcommand = positional[0]
        assert subcommand in subcommands, f"{subcommand}: not a subcommand of tpu-estimator ({sorted(subcommands)})"
        assert len(positional) == 1, f"{words}: one subcommand, then flags"
    else:
        assert flag_names(words) == ["help"], f"{words}: give a subcommand"
        run_cli_help(subcommands)
    for name in flag_names(words):
        assert name in names, f"--{name}: not a flag of tpu-estimator"
    for word in words:
        if word.startswith("--config="):
            check_config_value(word.split("=", 1)[1])


def run_cli_help(subcommands: set) -> None:
    """`tpu-estimator --help`, run: it prints the usage, naming every subcommand (absl's --help exits 1)."""
    result = subprocess.run(
        [sys.executable, "-c", "from tpu_estimator.app.cli import main; main()", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        env=subprocess_env(Path("/nonexistent")),
    )
    assert result.returncode in (0, 1) and "Usage" in result.stdout, result.stderr[-3000:]
    missing = [s for s in subcommands if s not in result.stdout]
    assert not missing, f"tpu-estimator --help does not name {missing}:\n{result.stdout}"


def check_config_value(value: str) -> None:
    """A built-in config name (`dlrm_tiny`) or a path: in the repository, or a file the README writes."""
    if "/" not in value and not value.endswith((".yaml", ".yml")):
        assert (REPO / "tpu_estimator" / "app" / "configs" / f"{value}.yaml").is_file(), f"--config={value}"
    else:
        assert (REPO / value).is_file() or value in files_written_by_readme(), f"--config={value}: no such file"


def check_launcher(words: List[str], launcher_index: int) -> None:
    """`tpu-estimator-run [options] script.py [program flags]`: options of the launcher, flags of the program."""
    from tpu_estimator.compat import launcher

    rest = words[launcher_index + 1 :]
    options = []
    while rest and rest[0].startswith("-"):
        options.append(rest.pop(0))
    for name in flag_names(options):
        assert f"--{name}" in launcher.__doc__, f"--{name}: not an option of tpu-estimator-run"
    assert rest, f"{words}: name the program to run"
    script = REPO / rest[0]
    assert script.is_file(), f"{rest[0]}: no such program in the repository"
    from tests.docs.test_benchmarks import script_flags  # it imports this module's helpers

    defined = script_flags(script)
    for name in flag_names(rest[1:]):
        assert name in defined, f"--{name}: not a flag of {rest[0]} (it defines {sorted(defined)})"


def check_python(words: List[str]) -> None:
    import importlib.util

    if words[1] == "-m":
        module = words[2]
        assert importlib.util.find_spec(module) is not None, f"python -m {module}: no such module"
        if module == "tpu_estimator.compat.launcher":
            check_launcher(words, 2)
        return
    path = REPO / words[1]
    assert path.is_file(), f"{words[1]}: no such file"
    if words[1] == "scripts/demo.py":
        check_demo_flags(words[2:])


def check_tensorboard(words: List[str]) -> None:
    assert (Path(sys.executable).parent / "tensorboard").exists() or shutil.which("tensorboard")
    from tensorboard import program

    program.TensorBoard().configure(argv=[None] + words[1:])  # exits on an unknown flag


def check_source(words: List[str]) -> None:
    venv = re.search(r"^VENV := (\S+)", (REPO / "Makefile").read_text(), flags=re.M).group(1)
    assert words[1] == f"{venv}/bin/activate", f"{words}: make creates the environment in {venv}"


def check_rm(words: List[str]) -> None:
    demo_dir = re.search(r'^DEFAULT_WORK_DIR = "(.+)"', (REPO / "scripts" / "demo.py").read_text(), flags=re.M)
    assert words[1:] == ["-rf", demo_dir.group(1)], f"{words}: the README only removes the demo's output"


def check_server(words: List[str]) -> None:
    """`tpu-estimator-server` flags exist and its --cluster value parses."""
    from tpu_estimator.app import cluster_server

    source = Path(cluster_server.__file__).read_text()
    defined = set(re.findall(r"flags\.DEFINE_\w+\(\s*\"(\w+)\"", source))
    for name in flag_names(words[1:]):
        assert name in defined, f"--{name}: not a flag of tpu-estimator-server (it defines {sorted(defined)})"
    for word in words[1:]:
        if word.startswith("--cluster="):
            cluster_server.parse_cluster(word.split("=", 1)[1])


def check_hosts(words: List[str]) -> None:
    """`tpu-estimator-hosts [flags] -- command`: its flags exist and the command is checked as the README's own."""
    from tpu_estimator.app import hosts

    separator = words.index("--")
    source = Path(hosts.__file__).read_text()
    defined = set(re.findall(r"flags\.DEFINE_\w+\(\s*\"(\w+)\"", source))
    for name in flag_names(words[1:separator]):
        assert name in defined, f"--{name}: not a flag of tpu-estimator-hosts (it defines {sorted(defined)})"
    command = words[separator + 1 :]
    assert command and os.path.basename(command[0]) in ("python", "python3"), command
    check_python(command)


def check_pip(words: List[str]) -> None:
    assert words[1:] == ["install", "-e", "."] and (REPO / "setup.cfg").is_file(), words


# The check of each program a documented command runs, by the program's name.
COMMAND_CHECKS = {
    "make": check_make,
    "tpu-estimator": check_tpu_estimator,
    "tpu-estimator-run": lambda words: check_launcher(words, 0),
    "python": check_python,
    "python3": check_python,
    "tensorboard": check_tensorboard,
    "source": check_source,
    "rm": check_rm,
    "pip": check_pip,
    "tpu-estimator-server": check_server,
    "tpu-estimator-hosts": check_hosts,
}


@pytest.mark.parametrize("item", SHELL_COMMANDS, ids=command_id)
def test_shell_commands_and_flags_exist(item):
    _, words = item
    program = os.path.basename(words[0])
    check = COMMAND_CHECKS.get(program)
    if check is None:
        pytest.fail(f"{words[0]}: a command tests/docs/test_readme.py does not check; add a check for it")
    check(words)
    if words[0].startswith(".venv/bin/"):
        check_source(["source", ".venv/bin/activate"])  # the same environment
