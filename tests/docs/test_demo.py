"""`make demo` keeps what it shows in a named directory, says how to clean it, and talks from the first second."""

import importlib.util
import io
import re
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from tests.docs.test_readme import REPO, subprocess_env

# A line of TensorFlow's C++ log (TF 2.15's and TF 2.21's formats) or of its start-up notices.
TF_LOG_LINE = re.compile(
    r"^[IWEF]\d{4} |^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] |absl::InitializeLog|oneDNN|cuda|cuInit"
)

TINY = [
    "--num_examples=8192",
    "--set=train.steps=40",
    "--set=tpu.iterations_per_loop=10",
    "--set=train.batch_size=128",
    "--set=eval.batch_size=256",
    "--set=data.eval_num_examples=2048",
    "--set=data.max_vocab=1000",
]


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("demo_script", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_demo_passes_the_output_directory():
    def dry_run(*args):
        return subprocess.run(["make", "-n", "-C", str(REPO), "demo", *args], capture_output=True, text=True).stdout

    assert "scripts/demo.py --work_dir=demo_output" in dry_run()
    assert "scripts/demo.py --work_dir=/tmp/elsewhere --num_examples=5" in dry_run(
        "DEMO_DIR=/tmp/elsewhere", "DEMO_ARGS=--num_examples=5"
    )


def test_work_dir_is_created_emptied_on_rerun_and_foreign_directories_refused(demo, tmp_path):
    work_dir = tmp_path / "out"
    assert demo.prepare_work_dir(str(work_dir)) == str(work_dir)
    (work_dir / "old_checkpoint").write_text("x")
    demo.prepare_work_dir(str(work_dir))  # made by the demo: emptied
    assert sorted(p.name for p in work_dir.iterdir()) == [demo.MARKER]

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    with pytest.raises(SystemExit, match=r"mine is not empty and was not created by the demo.*DEMO_DIR"):
        demo.prepare_work_dir(str(foreign))
    assert (foreign / "thesis.tex").read_text() == "precious"


def test_console_repeats_the_current_phase_while_nothing_else_is_printed(demo):
    out = io.StringIO()
    with redirect_stdout(out):
        console = demo.Console(heartbeat_secs=0.2)
        console.phase("building the graph")
        time.sleep(1.5)
        console.phase(None)
        time.sleep(0.6)
        console.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "      building the graph ..."
    beats = [line for line in lines[1:] if re.fullmatch(r"      \.\.\. building the graph \(\d+s\)", line)]
    assert len(beats) >= 2 and len(beats) == len(lines) - 1, lines  # and none after the phase ended


def test_demo_run_keeps_its_outputs_and_reports_progress_before_the_first_step(tmp_path):
    work_dir = tmp_path / "demo_output"
    env = subprocess_env(tmp_path)
    env.pop("TF_CPP_MIN_LOG_LEVEL")  # as `make demo` runs it on a user's machine
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), f"--work_dir={work_dir}", *TINY],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-5000:]
    # No TensorFlow log line: TF 2.21 prints its start-up lines before any log setting applies.
    assert not [line for line in (out + result.stderr).splitlines() if TF_LOG_LINE.search(line)], result.stderr
    assert f"output directory: {work_dir} (kept; remove it with: rm -rf {work_dir})" in out
    assert f"clean up:     rm -rf {work_dir}" in out

    # What it showed is still there: the data, the model directory with its config, the SavedModel.
    export_dir = Path(re.search(r"\[4/5\] export: SavedModel in (\S+)", out).group(1))
    assert export_dir.parent == work_dir / "export" and (export_dir / "saved_model.pb").is_file()
    assert (export_dir / "assets.extra" / "tpu_estimator_config.yaml").is_file()
    assert (work_dir / "heldout.tsv").is_file() and len(list((work_dir / "train").glob("*.tsv"))) == 4
    assert (work_dir / "model" / "config.yaml").is_file()
    assert list((work_dir / "model").glob("model.ckpt-40.index"))

    # Before the first progress line, each phase of the training call was named.
    lines = out.splitlines()
    first_step = next(i for i, line in enumerate(lines) if line.strip().startswith("step "))
    before = "\n".join(lines[:first_step])
    for phase in ("building the graph", "creating the session", "running the first training loop"):
        assert phase in before, before
