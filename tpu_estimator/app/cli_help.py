"""`tpu-estimator SUBCOMMAND --help`: the subcommand's summary, the flags it reads, and its example.

The summary and example are those of `tpu-estimator --help` (the `Subcommands` section of `cli`'s docstring), so
the two helps say the same.
"""

import re
from typing import Dict, Tuple

from absl import flags

from tpu_estimator.app import command_help

PROG = "tpu-estimator"
_COMMON = ("config", "set", "model_dir")
_LOGS = ("verbose", "traceback")
_PROGRESS = ("progress_secs", "progress_steps")

# The flags each subcommand reads, most important first.
SUBCOMMAND_FLAGS: Dict[str, Tuple[str, ...]] = {
    "train": _COMMON + ("validate_rows",) + _PROGRESS + _LOGS,
    "evaluate": _COMMON + ("validate_rows",) + _LOGS,
    "train_and_evaluate": _COMMON + ("validate_rows",) + _PROGRESS + _LOGS,
    "export": _COMMON + ("export_dir",) + _LOGS,
    "predict": ("export_dir", "input", "input_format", "output", "max_rows", "print_rows")
    + _COMMON
    + ("validate_rows",)
    + _LOGS,
    "benchmark": ("config", "set", "benchmark_steps", "model_dir") + _PROGRESS + _LOGS,
    "data": ("rows", "held_out_rows", "seed", "max_vocab", "output", "input", "skip_malformed", "overwrite") + _LOGS,
}


def subcommand_summaries(doc: str) -> Dict[str, Tuple[str, str]]:
    """`{subcommand: (summary, example)}` from the `Subcommands` section of `tpu-estimator --help`."""
    section = doc.split("\nSubcommands", 1)[1].split("\n\n", 1)[0]
    found: Dict[str, Tuple[str, str]] = {}
    name, summary, example = None, [], ""
    for line in section.splitlines()[1:]:
        match = re.match(r"^  (\w+)\s{2,}(.*)$", line)
        if match:
            if name:
                found[name] = (" ".join(summary), example)
            name, summary, example = match.group(1), [match.group(2).strip()], ""
        elif line.strip().startswith(PROG + " "):
            example = re.split(r"\s{2,}", line.strip())[0]
        elif line.strip():
            summary.append(line.strip())
    if name:
        found[name] = (" ".join(summary), example)
    return found


def subcommand_help(subcommand: str, doc: str, flag_values: flags.FlagValues) -> str:
    """The help of `tpu-estimator SUBCOMMAND`: usage and summary, the flags it reads, its example."""
    summary, example = subcommand_summaries(doc)[subcommand]
    usage = f"Usage: {PROG} {subcommand} [flags]\n\n{summary[0].upper() + summary[1:]}."
    return command_help.help_text(
        usage,
        flag_values,
        SUBCOMMAND_FLAGS[subcommand],
        [example],
        f"Every subcommand and the notes on metrics and errors: {PROG} --help",
        flags_title=f"Flags of {subcommand}",
    )
