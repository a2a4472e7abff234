"""The data command writes its files whole or not at all and replaces an existing file only with --overwrite
(issue 36 item 6): a conversion failing at a malformed line leaves the existing output as it was (it used to be
truncated to 0 bytes), and --rows over an existing file is refused."""

import os

import tensorflow as tf
from absl import flags

from tpu_estimator.app import cli
from tpu_estimator.app.data import convert, criteo, synthetic


def run_in_process(*args):
    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    return cli.run(flag_values(["tpu-estimator"] + list(args)), flag_values)


def last_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("tpu-estimator data: error: "), err
    return err[-1][len("tpu-estimator data: error: ") :]


def rows_of(seed, count, start=0):
    generator = synthetic.SyntheticCriteo(
        synthetic.SyntheticCriteoSpec(seed=seed, cardinalities=tuple(criteo.criteo_cardinalities(100)))
    )
    return generator.generate(count, start).tsv_lines()


def test_a_failed_conversion_leaves_the_existing_output_and_no_temporary_file(tmp_path, capsys):
    lines = rows_of(0, 500)
    lines[413] = "1\t2\tx"  # line 414
    bad = tmp_path / "bad.tsv"
    bad.write_text("\n".join(lines) + "\n")
    output = tmp_path / "criteo.tfrecord"
    output.write_bytes(b"the records of yesterday")
    assert run_in_process("data", f"--input={bad}", f"--output={output}", "--overwrite") == 2
    assert last_error(capsys).startswith(f"{bad}:414: expected 40 tab-separated fields, got 3")
    assert output.read_bytes() == b"the records of yesterday"
    assert sorted(os.listdir(tmp_path)) == ["bad.tsv", "criteo.tfrecord"]
    # Asked, and complete: replaced.
    good = tmp_path / "good.tsv"
    good.write_text("\n".join(rows_of(0, 300)) + "\n")
    assert run_in_process("data", f"--input={good}", f"--output={output}", "--overwrite") == 0
    assert len(list(tf.data.TFRecordDataset(str(output)))) == 300
    assert sorted(os.listdir(tmp_path)) == ["bad.tsv", "criteo.tfrecord", "good.tsv"]


def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path, capsys):
    output, held_out = tmp_path / "day_0.tsv", tmp_path / "day_0.held_out.tsv"
    output.write_text("mine\n")
    assert run_in_process("data", "--rows=10", "--max_vocab=100", f"--output={output}") == 2
    assert last_error(capsys) == (
        f"--output: {output} already exists; pass --overwrite to replace it (it is replaced only once the new "
        "file is complete)"
    )
    assert output.read_text() == "mine\n"
    # The held-out file counts too; neither is written.
    output.unlink()
    held_out.write_text("mine\n")
    assert run_in_process("data", "--rows=10", "--held_out_rows=5", "--max_vocab=100", f"--output={output}") == 2
    assert f"--output: {held_out} already exists" in last_error(capsys)
    assert not output.exists() and held_out.read_text() == "mine\n"
    args = ["data", "--rows=10", "--held_out_rows=5", "--max_vocab=100", f"--output={output}", "--overwrite"]
    assert run_in_process(*args) == 0
    assert output.read_text().splitlines() == rows_of(0, 10)
    assert held_out.read_text().splitlines() == rows_of(0, 5, start=10)
    # A conversion's existing output too.
    (tmp_path / "c.tfrecord").write_bytes(b"kept")
    assert run_in_process("data", f"--input={output}", f"--output={tmp_path / 'c.tfrecord'}") == 2
    assert last_error(capsys).startswith(f"--output: {tmp_path / 'c.tfrecord'} already exists")
    assert (tmp_path / "c.tfrecord").read_bytes() == b"kept"


def test_the_library_conversion_is_whole_or_nothing(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("\n".join(rows_of(0, 20) + ["1\t2\tx"]) + "\n")
    outputs = convert.output_paths(str(tmp_path / "out.tfrecord"), 2)
    for path in outputs:
        with open(path, "wb") as f:
            f.write(b"kept")
    try:
        convert.convert_tsv_to_tfrecord(str(bad), str(tmp_path / "out.tfrecord"), num_output_files=2)
    except tf.errors.InvalidArgumentError as e:
        assert f"{bad}:21:" in str(e)
    else:
        raise AssertionError("no error")
    assert sorted(os.listdir(tmp_path)) == sorted(["bad.tsv"] + [os.path.basename(p) for p in outputs])
    for path in outputs:
        with open(path, "rb") as f:
            assert f.read() == b"kept"
