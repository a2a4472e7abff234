"""Every command's `--help` shows its own flags first, then an example (issue 47 item 2): `tpu-estimator` and each
subcommand, `tpu-estimator-run`, `tpu-estimator-hosts`, `tpu-estimator-server`. Run as the console scripts run them
(the entry function called from a `__main__` without a docstring), in subprocesses."""

import os
import re
import subprocess
import sys

import pytest

from tpu_estimator.app import cli, cli_help

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Console script name -> (entry point, its own flags).
COMMANDS = {
    "tpu-estimator": (
        "tpu_estimator.app.cli:main",
        ("config", "set", "model_dir", "export_dir", "input", "output", "verbose"),
    ),
    "tpu-estimator-run": ("tpu_estimator.compat.launcher:main", ("num_shards", "traceback", "verbose")),
    "tpu-estimator-hosts": ("tpu_estimator.app.hosts:run", ("num_hosts", "first_port", "grace_secs", "tpu_job_name")),
    "tpu-estimator-server": ("tpu_estimator.app.cluster_server:run", ("cluster", "task", "job", "cpu_shards")),
}
ABSL_FLAGS = ("--flagfile", "--logtostderr", "--only_check_args", "--pdb_post_mortem")


def run_help(entry: str, *args: str) -> subprocess.CompletedProcess:
    module, function = entry.split(":")
    code = f"import sys; from {module} import {function}; sys.exit({function}())"
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, "-c", code] + list(args), capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )


def flag_positions(text: str, names) -> list:
    positions = []
    for name in names:
        match = re.search(rf"^\s+--(?:\[no\])?{name}\b", text, flags=re.M)
        assert match, f"--{name} is not listed:\n{text}"
        positions.append(match.start())
    return positions


@pytest.mark.quick
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_shows_the_commands_own_flags_first_then_an_example(command):
    entry, own = COMMANDS[command]
    result = run_help(entry, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "Try --helpfull" not in text and not any(f in text for f in ABSL_FLAGS), text
    assert re.match(r"^(\S.*\n\n)?Usage:", text), text[:300]
    # The example: under `Example:`, or (tpu-estimator) under each subcommand of `Subcommands:`.
    assert re.search(r"^(Examples?:|Subcommands:)$", text, flags=re.M), text
    example = re.search(rf"^ +{command}( [a-z_]+)? --\S+", text, flags=re.M)
    assert example, f"no example of {command}:\n{text}"
    positions = flag_positions(text, own)
    assert max(positions) < example.start(), "the command's flags come first, then its example"
    assert result.stdout == run_help(entry, "--helpshort").stdout  # absl's --helpshort: the same


def test_hosts_helpfull_adds_abseils_flags():
    result = run_help(COMMANDS["tpu-estimator-hosts"][0], "--helpfull")
    assert result.returncode == 0
    assert result.stdout.index("--num_hosts") < result.stdout.index("--flagfile")


def test_a_programs_help_after_the_separator_is_the_programs():
    """`tpu-estimator-hosts -- python program.py --help` runs the program with its --help, not the command's help."""
    result = run_help(
        COMMANDS["tpu-estimator-hosts"][0], "--num_hosts=1", "--", sys.executable, "-c", "print('ran')", "--help"
    )
    assert result.returncode == 0, result.stderr
    assert "[host 0] ran" in result.stdout and "Usage:" not in result.stdout


@pytest.mark.parametrize("subcommand", cli.SUBCOMMANDS)
def test_each_subcommand_shows_the_flags_it_reads_and_its_example(subcommand):
    result = run_help(COMMANDS["tpu-estimator"][0], subcommand, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith(f"Usage: tpu-estimator {subcommand} [flags]\n"), text
    example = re.search(rf"^Example:\n  tpu-estimator {subcommand} --\S+", text, flags=re.M)
    assert example, text
    defined = [n for n in cli_help.SUBCOMMAND_FLAGS[subcommand] if n in cli.FLAGS or n != "validate_rows"]
    positions = flag_positions(text, defined)
    assert positions == sorted(positions) and max(positions) < example.start()
    listed = re.findall(r"^  --(?:\[no\])?(\w+)", text, flags=re.M)
    assert set(listed) <= set(cli_help.SUBCOMMAND_FLAGS[subcommand]), listed  # only the flags it reads


def test_subcommand_summaries_are_those_of_the_top_level_help():
    summaries = cli_help.subcommand_summaries(cli.__doc__)
    assert set(summaries) == set(cli.SUBCOMMANDS)
    assert summaries["export"] == (
        "write a SavedModel (default base: export.dir or MODEL_DIR/export)",
        "tpu-estimator export --model_dir=/tmp/dlrm",
    )
    assert summaries["predict"][0].endswith("writes --output (.csv or .jsonl)")
