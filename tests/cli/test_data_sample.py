"""The command line checks a sample of every data file before TensorFlow starts and reports every problem of the
sample at once, each as file:line (issue 47 item 4): a short row at line 317 and a bad label at line 150 are both
named by one run, within 15 s."""

import gzip
import os
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.data.test_fuzz import FUZZ, _encode, reference_parse, tsv_line
from tpu_estimator.app import cli, config_file
from tpu_estimator.app.data import convert, criteo, sample_check, synthetic
from tpu_estimator.app.errors import CliError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(REPO, "configs", "dlrm_tiny.yaml")


@pytest.fixture(scope="module")
def good_tsv(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sample") / "good.tsv")
    synthetic.SyntheticCriteo(
        synthetic.SyntheticCriteoSpec(seed=0, cardinalities=tuple(criteo.criteo_cardinalities(100)))
    ).write_tsv(path, 400)
    return path


def damaged_copy(good_tsv, path, damage):
    """`good_tsv` with `damage[line] = f(fields) -> fields` applied to those 1-based lines."""
    with open(good_tsv) as f:
        lines = f.read().splitlines()
    for number, change in damage.items():
        lines[number - 1] = "\t".join(change(lines[number - 1].split("\t")))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def bad_label(fields):
    return ["2"] + fields[1:]


def short_row(fields):
    return fields[:12]


@pytest.mark.quick
def test_a_short_row_and_a_bad_label_are_both_reported_by_one_run_within_15_s(good_tsv, tmp_path):
    data = damaged_copy(good_tsv, tmp_path / "day_0.tsv", {150: bad_label, 317: short_row})
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    start = time.time()
    result = subprocess.run(
        [sys.executable, "-c", "from tpu_estimator.app.cli import main; main()", "train", f"--config={TINY}"]
        + [f"--model_dir={tmp_path}/model", "--set=data.source=tsv", f"--set=data.train_paths=[{data}]"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    elapsed = time.time() - start
    assert result.returncode == 2, result.stdout + result.stderr
    assert elapsed < 15, elapsed
    assert result.stderr.splitlines() == [
        "tpu-estimator train: error: data.train_paths: 2 problems in the first 1000 rows of each file "
        "(--validate_rows=N sets how many are checked before training; data.skip_malformed=true skips malformed "
        "lines):",
        f"  {data}:150: label must be 0 or 1, got `2`",
        f"  {data}:317: expected 40 tab-separated fields, got 12",
    ]
    assert "importing TensorFlow" not in result.stdout  # before TensorFlow: no graph was built
    assert not os.path.exists(f"{tmp_path}/model/config.yaml")


def config_with(paths, *overrides):
    return config_file.load_config(
        TINY, ["data.source=tsv", f"data.train_paths=[{','.join(paths)}]", "model_dir=/tmp/unused"] + list(overrides)
    )


def test_every_file_is_sampled_the_count_is_configurable_and_reports_are_capped(good_tsv, tmp_path):
    first = damaged_copy(good_tsv, tmp_path / "a.tsv", {150: bad_label, 317: short_row})
    second = damaged_copy(good_tsv, tmp_path / "b.tsv", {n: bad_label for n in range(1, 31)})
    with pytest.raises(CliError) as info:
        cli.check_data(config_with([first, second]), "train", sample_rows=1000)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("data.train_paths: 32 problems in the first 1000 rows of each file")
    assert lines[1:3] == [
        f"  {first}:150: label must be 0 or 1, got `2`",
        f"  {first}:317: expected 40 tab-separated fields, got 12",
    ]
    assert lines[3:21] == [f"  {second}:{n}: label must be 0 or 1, got `2`" for n in range(1, 19)]
    assert lines[21:] == ["  ... and 12 more in the sample"] and sample_check.MAX_REPORTED == 20
    with pytest.raises(CliError) as info:  # the first 200 rows only: line 317 is beyond the sample
        cli.check_data(config_with([first]), "train", sample_rows=200)
    assert str(info.value).splitlines()[1:] == [f"  {first}:150: label must be 0 or 1, got `2`"]
    cli.check_data(config_with([first]), "train", sample_rows=100)  # no problem in the first 100 rows
    # The reader skips malformed lines when asked to: nothing to report then.
    cli.check_data(config_with([first], "data.skip_malformed=true"), "train", sample_rows=1000)


def test_evaluation_files_and_gzip_files_are_sampled(good_tsv, tmp_path):
    bad = damaged_copy(good_tsv, tmp_path / "eval.tsv", {7: short_row})
    packed = str(tmp_path / "eval.tsv.gz")
    with open(bad, "rb") as f, gzip.open(packed, "wb") as g:
        g.write(f.read())
    config = config_with([good_tsv], f"data.eval_paths=[{packed}]", "data.compression=GZIP")
    with pytest.raises(CliError) as info:
        cli.check_data(config, "evaluate", sample_rows=1000)
    assert str(info.value).splitlines() == [
        "data.eval_paths: 1 problem in the first 1000 rows of each file (--validate_rows=N sets how many are "
        "checked before training; data.skip_malformed=true skips malformed lines):",
        f"  {packed}:7: expected 40 tab-separated fields, got 12",
    ]


def test_a_damaged_tfrecord_record_is_named_by_its_number_and_byte(good_tsv, tmp_path):
    path = str(tmp_path / "rows.tfrecord")
    assert convert.convert_tsv_to_tfrecord(good_tsv, path) == 400
    data = bytearray(open(path, "rb").read())
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        (length,) = struct.unpack("<Q", bytes(data[offset : offset + 8]))
        offset += 12 + length + 4
    data[offsets[2] + 12 + 5] ^= 0xFF  # one byte of record 3's data
    open(path, "wb").write(bytes(data))
    config = config_file.load_config(
        TINY, ["data.source=tfrecord", f"data.train_paths=[{path}]", "model_dir=/tmp/unused"]
    )
    with pytest.raises(CliError) as info:
        cli.check_data(config, "train", sample_rows=1000)
    assert str(info.value).splitlines()[1:] == [
        f"  {path}:record 3 (byte {offsets[2]}): corrupted record data (its CRC does not match)"
    ]
    cli.check_data(config, "train", sample_rows=2)  # the first 2 records are intact


@FUZZ
@given(lines=st.lists(tsv_line(), min_size=1, max_size=30), terminator=st.sampled_from(["\n", "\r\n"]))
def test_the_samples_first_problem_is_the_readers_error(tmp_path_factory, lines, terminator):
    """The oracle of the reader's fuzz test (tests/data/test_fuzz.py): the sample check finds the line the reader
    stops at, with its reason, and none in files the reader reads whole."""
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.tsv"
    content = b"".join(_encode(line) + terminator.encode() for line in lines)
    path.write_bytes(content)
    expected = reference_parse([line.replace(b"\r", b"") for line in content.split(b"\n")[:-1]])
    problems = list(sample_check.tsv_problems(str(path), 1000))
    if expected[0] == "error":
        assert problems and problems[0] == f"{path}:{expected[1]}: {expected[2]}"
    else:
        assert problems == []
