"""`--help` of the commands (`tpu-estimator` and its subcommands, `tpu-estimator-run`, `tpu-estimator-hosts`,
`tpu-estimator-server`): the command's own flags first, then one example, then the rest of its description.

absl's `--help` of a console script lists only the key flags of the script's `__main__` module (the entry point
wrapper, which has none) and says `Try --helpfull`; these commands print their own text instead (`--helpshort`
is the same; `--helpfull` adds absl's flags).
"""

import sys
from typing import Callable, List, Optional, Sequence

from absl import app, flags

SHORT_HELP = ("--help", "-h", "-?", "--helpshort")
FULL_HELP = ("--helpfull",)


def requested(args: Sequence[str]) -> Optional[str]:
    """'full' for `--helpfull`, 'short' for `--help`/`-h`/`-?`/`--helpshort`, else None (arguments after a `--`, a
    program's own, are not looked at)."""
    own = list(args)
    if "--" in own:
        own = own[: own.index("--")]
    if any(a in FULL_HELP for a in own):
        return "full"
    if any(a in SHORT_HELP for a in own):
        return "short"
    return None


def flag_lines(flag_values: flags.FlagValues, names: Sequence[str]) -> List[str]:
    """`  --name=DEFAULT  help` for each defined flag of `names`, in that order (`--[no]name` for booleans)."""
    lines = []
    for name in names:
        if name not in flag_values:
            continue
        flag = flag_values[name]
        if flag.boolean:
            spelling = f"--[no]{name}"
        else:
            spelling = f"--{name}=" + ("VALUE" if flag.default in (None, [], "") else flag.default_as_str.strip("'"))
        lines.append(f"  {spelling:<26} {' '.join(flag.help.split())}")
    return lines


def help_text(
    usage: str,
    flag_values: flags.FlagValues,
    names: Sequence[str],
    examples: Sequence[str],
    description: str = "",
    flags_title: str = "Flags",
) -> str:
    """The help of a command: usage, its own flags (`names`), its examples, then `description`."""
    parts = [usage.rstrip(), "", f"{flags_title}:"] + flag_lines(flag_values, names)
    parts += ["", "Example:" if len(examples) == 1 else "Examples:"] + [f"  {e}" for e in examples]
    if description.strip():
        parts += ["", description.strip()]
    return "\n".join(parts) + "\n"


def print_and_exit(text: str, full_text: str = "", mode: str = "short") -> None:
    """Prints `text` (and for `--helpfull` `full_text`) on stdout and exits with status 0."""
    sys.stdout.write(text)
    if mode == "full" and full_text:
        sys.stdout.write("\nAll flags (absl's included):\n" + full_text)
    sys.stdout.flush()
    sys.exit(0)


def run_command(text: Callable[[], str], flag_values: flags.FlagValues, main: Callable[[List[str]], None]) -> None:
    """A console script's entry point: prints `text()` for a help flag (see `requested`), else runs `main` with absl.

    Args:
      text: builds the command's help (called only when asked for).
      flag_values: the command's flags; `--helpfull` adds their absl help.
      main: the command's `main(argv)`, run by `absl.app.run`.
    """
    mode = requested(sys.argv[1:])
    if mode:
        print_and_exit(text(), flag_values.get_help(), mode)
    app.run(main)
