"""One benchmark line measured in two or more environments, run in turn, reported as per-pair ratios.

An environment is a Python interpreter plus the source tree it imports `tpu_estimator` from: two checkouts (the
code before and after a change) or two virtual environments (TensorFlow 2.15 and 2.21). Run `k` runs environment
A, then B, then C, ..., so that each round of runs shares the machine's state. Ratios are taken per round
(`env / reference` within the round) and summarised by median and range: on a noisy machine medians of separate
batches mislead, ratios within a round do not.

Each run is a fresh process (`python -m tpu_estimator.app.benchmark <request>`), so the environment's own
`tpu_estimator` and TensorFlow are the ones measured.
"""

import dataclasses
import json
import os
import statistics
import subprocess
import tempfile
from typing import Any, Dict, List, Optional, Sequence

from tpu_estimator.app import benchmark


@dataclasses.dataclass(frozen=True)
class Environment:
    """Where a run happens.

    Attributes:
      name: a label for reports (e.g. 'before', 'tf2.21').
      python: the interpreter to run.
      source_dir: a source tree put first on `PYTHONPATH` (None: the interpreter's installed package).
      env: extra environment variables.
    """

    name: str
    python: str
    source_dir: Optional[str] = None
    env: Dict[str, str] = dataclasses.field(default_factory=dict)


def parse_environment(spec: str) -> Environment:
    """`name=python[:source_dir]` -> `Environment`.

    Raises:
      ValueError: a malformed spec or an interpreter that does not exist.
    """
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--env {spec!r}: expected name=python[:source_dir]")
    python, _, source_dir = rest.partition(":")
    if not os.path.isfile(python):
        raise ValueError(f"--env {spec!r}: no interpreter at {python}")
    if source_dir and not os.path.isdir(os.path.join(source_dir, "tpu_estimator")):
        raise ValueError(f"--env {spec!r}: {source_dir} has no tpu_estimator package")
    return Environment(name=name, python=python, source_dir=source_dir or None)


def run_once(environment: Environment, w: benchmark.Workload, line: str, ipl: int, timeout: float = 3600) -> dict:
    """One run of `line` in `environment`: the child's result dict, or `{'error': ...}`."""
    with tempfile.TemporaryDirectory(prefix="bench_pair_") as tmp:
        request = {
            "workload": dataclasses.asdict(w),
            "line": line,
            "rows": w.row_values[0],
            "ipl": ipl,
            "model_dir": os.path.join(tmp, "model"),
            "output": os.path.join(tmp, "result.json"),
        }
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.setdefault("TF_USE_LEGACY_KERAS", "1")
        env.update(environment.env)
        if environment.source_dir:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (environment.source_dir, env.get("PYTHONPATH")) if p)
        cmd = [environment.python, "-m", "tpu_estimator.app.benchmark", json.dumps(request)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False, cwd=tmp)
        if proc.returncode != 0 or not os.path.exists(request["output"]):
            tail = (proc.stderr or "").strip().splitlines()[-5:]
            return {"error": "exit code {}: {}".format(proc.returncode, " | ".join(tail))}
        with open(request["output"]) as f:
            return json.load(f)


def compare(
    environments: Sequence[Environment],
    w: benchmark.Workload,
    line: str,
    runs: int,
    ipl: Optional[int] = None,
    log=print,
) -> Dict[str, Any]:
    """Runs `line` `runs` times in each environment, in turn; ratios to the first environment per round.

    Returns:
      `{'runs': {env: [examples/sec or None]}, 'ratios': {env: {'median', 'min', 'max', 'pairs'}}}`.
    """
    if len(environments) < 2:
        raise ValueError("compare needs at least two environments")
    ipl = ipl if ipl is not None else w.ipl_values[-1]
    rates: Dict[str, List[Optional[float]]] = {e.name: [] for e in environments}
    for r in range(runs):
        for environment in environments:
            result = run_once(environment, w, line, ipl)
            rate = result.get("examples_per_sec")
            rates[environment.name].append(rate)
            log(
                f"run {r + 1}/{runs} {environment.name}: "
                + (f"{rate:,.0f} examples/s" if rate is not None else result.get("error", "no result"))
            )
    reference = environments[0].name
    ratios = {}
    for environment in environments[1:]:
        pairs = [
            b / a
            for a, b in zip(rates[reference], rates[environment.name])
            if a is not None and b is not None and a > 0
        ]
        ratios[environment.name] = (
            {"median": statistics.median(pairs), "min": min(pairs), "max": max(pairs), "pairs": pairs}
            if pairs
            else {"error": "no complete pair"}
        )
    return {"workload": w.name, "line": line, "iterations_per_loop": ipl, "runs": rates, "ratios": ratios}


def markdown(result: Dict[str, Any], reference: str) -> str:
    """A table: per environment, its runs and its per-pair ratio to `reference`."""
    rows = [
        f"Workload {result['workload']}, line `{result['line']}`, iterations_per_loop {result['iterations_per_loop']}",
        "",
        f"| environment | examples/s per run | ratio to {reference} per pair: median (range) |",
        "|---|---|---|",
    ]
    for name, rates in result["runs"].items():
        runs = ", ".join(f"{r:,.0f}" if r is not None else "failed" for r in rates)
        ratio = result["ratios"].get(name)
        if ratio is None:
            cell = "(reference)"
        elif "error" in ratio:
            cell = ratio["error"]
        else:
            cell = f"{ratio['median']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f})"
        rows.append(f"| {name} | {runs} | {cell} |")
    return "\n".join(rows)
