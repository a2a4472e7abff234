"""The command line's boundary before TensorFlow: config and data-file problems are one line and exit 2, fast,
quiet, without importing TensorFlow (issue 17 items 3, 4, 6, 7; issue 19's command-line items)."""

import os
import struct
import subprocess
import sys

import pytest
from absl import flags

from tpu_estimator.app import cli, config_file, data_command
from tpu_estimator.app.data import files

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(REPO, "configs", "dlrm_tiny.yaml")
TF_LOG_MARKERS = ("tensorflow/", "oneDNN", "cuDNN", "TensorRT", "cuda", "cpu_feature_guard", "I0000", "W0000")

# The config of issue 17 item 3: nine levels of nine aliases under train.steps (9**7 values once expanded).
ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
train: {steps: [*f,*f,*f,*f,*f,*f,*f,*f,*f]}
"""


def run_in_process(*args):
    """`cli.run` with fresh flags (what `main` does, without the process)."""
    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    argv = flag_values(["tpu-estimator"] + list(args))
    return cli.run(argv, flag_values)


def one_error_line(capsys, subcommand):
    """The stderr of the last run: exactly one line, `tpu-estimator SUBCOMMAND: error: ...`; returns it."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"tpu-estimator {subcommand}: error: "), err
    return lines[0]


def run_subprocess(code_or_args, python_code=False, timeout=120, tf_log_level=None):
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the command must be quiet on its own
    if tf_log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = str(tf_log_level)
    cmd = [sys.executable, "-c", code_or_args] if python_code else [sys.executable, "-m", "tpu_estimator.app.cli"]
    if not python_code:
        cmd += list(code_or_args)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)


# ---------------------------------------------------------------------------------------------------------------
# Issue 17 item 3: YAML alias bomb.


def test_alias_bomb_is_refused_quickly_with_a_short_message(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB.encode()) < 400
    assert run_in_process("train", f"--config={path}", f"--model_dir={tmp_path}/m") == 2
    line = one_error_line(capsys, "train")
    assert f"{path}: e: more than 10000 values once YAML aliases are expanded" in line
    assert len(line) < 300
    with pytest.raises(ValueError, match=r"^<root>: a YAML alias refers to itself|^train.steps"):
        config_file.parse_config("train: {steps: &x [*x]}")
    levels = ["&a0 [" + ",".join(["1"] * 9) + "]"]
    levels += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 6)]
    with pytest.raises(ValueError, match=r"^train\.steps: invalid YAML value .*more than 10000 values"):
        config_file.parse_config("", ["train.steps=[" + ", ".join(levels) + "]"])


def test_error_messages_quote_at_most_100_characters_of_a_value():
    with pytest.raises(ValueError) as info:
        config_file.parse_config("train: {steps: " + "x" * 5000 + "}")
    message = str(info.value)
    assert message.startswith("train.steps: expected int, got str 'xxx")
    assert len(message) < len("train.steps: expected int, got str ") + 101
    with pytest.raises(ValueError) as info:
        config_file.parse_config("model: {top_mlp: " + str(list(range(5000))) + "}")
    assert len(str(info.value)) < 200


# ---------------------------------------------------------------------------------------------------------------
# Issue 17 item 4: non-finite and out-of-range numbers.


@pytest.mark.parametrize(
    "override,message",
    [
        ("optimizer.dense.learning_rate=.nan", "optimizer.dense.learning_rate: expected a finite float, got nan"),
        (
            "optimizer.embedding.learning_rate=.inf",
            "optimizer.embedding.learning_rate: expected a finite float, got inf",
        ),
        (
            "optimizer.dense.learning_rate=-1e999",
            "optimizer.dense.learning_rate: expected a finite float, got -inf",
        ),
        (
            "optimizer.embedding.args.initial_accumulator=.nan",
            "optimizer.embedding.args.initial_accumulator: expected a",
        ),
        ("optimizer.embedding.args.initial_accumulator=0", "optimizer.embedding.args.initial_accumulator: must be > 0"),
        ("train.steps=100000000000000000000", "train.steps: 100000000000000000000 is out of range"),
        ("optimizer.dense.learning_rate=-0.5", "optimizer.dense.learning_rate: must be positive, got -0.5"),
    ],
)
def test_non_finite_and_out_of_range_values_are_config_errors(override, message, tmp_path, capsys):
    assert run_in_process("train", f"--config={TINY}", f"--model_dir={tmp_path}", f"--set={override}") == 2
    assert message in one_error_line(capsys, "train")


def test_optimizer_argument_ranges():
    bad = "optimizer: {embedding: {name: adam, args: {beta1: 1.0}}}"
    with pytest.raises(ValueError, match=r"^optimizer\.embedding\.args\.beta1: must be in \[0\.0, 1\.0\), got 1\.0"):
        config_file.parse_config(bad)
    with pytest.raises(ValueError, match=r"clip_weight_min: 2\.0 is larger than clip_weight_max \(1\.0\)"):
        config_file.parse_config("optimizer: {embedding: {args: {clip_weight_min: 2, clip_weight_max: 1}}}")
    ok = config_file.parse_config("optimizer: {embedding: {name: adam, args: {beta1: 0.0, epsilon: 1e-8}}}")
    assert ok.optimizer.embedding.args == {"beta1": 0.0, "epsilon": 1e-8}


# ---------------------------------------------------------------------------------------------------------------
# Issue 17 item 6: path and data-file problems are one line and exit 2 (the checks before TensorFlow).


def test_config_path_problems(tmp_path, capsys):
    assert run_in_process("train", f"--config={tmp_path}", f"--model_dir={tmp_path}/m") == 2
    assert one_error_line(capsys, "train").endswith(f"{tmp_path}: is a directory, not a YAML config file")
    assert run_in_process("train", "--config=no_such_config", f"--model_dir={tmp_path}/m") == 2
    line = one_error_line(capsys, "train")
    assert "--config: no such file: no_such_config (and no built-in config of that name: dlrm_demo, dlrm_tiny" in line
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\xff\xfe junk")
    assert run_in_process("train", f"--config={binary}", f"--model_dir={tmp_path}/m") == 2
    assert one_error_line(capsys, "train").endswith(f"{binary}: not UTF-8 text (byte 1); not a YAML config file")


def test_data_file_problems(tmp_path, capsys):
    tsv = tmp_path / "day_0.tsv"
    tsv.write_text("0\t1" + "\t" * 38 + "\n")
    tfrecord = tmp_path / "day_0.tfrecord"
    record = b"x" * 5
    header = struct.pack("<Q", len(record))
    tfrecord.write_bytes(header + struct.pack("<I", files.masked_crc32c(header)) + record + b"\0\0\0\0")
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    base = [f"--config={TINY}", f"--model_dir={tmp_path}/m"]

    def error(subcommand, *sets):
        assert run_in_process(subcommand, *base, *[f"--set={s}" for s in sets]) == 2
        return one_error_line(capsys, subcommand)

    missing = tmp_path / "nope_*.tsv"
    line = error("train", "data.source=tsv", f"data.train_paths=[{missing}]")
    assert line.endswith(f"data.train_paths: no such file: {missing}")
    line = error("train", "data.source=tsv", f"data.train_paths=[{empty}]")
    assert line.endswith(f"data.train_paths: no examples: the file is empty ({empty})")
    line = error("evaluate", "data.source=tsv", f"data.train_paths=[{tsv}]", f"data.eval_paths=[{empty}]")
    assert line.endswith(f"data.eval_paths: no examples: the file is empty ({empty})")
    line = error("train", "data.source=tfrecord", f"data.train_paths=[{tsv}]")
    assert (
        f"data.train_paths: {tsv} is not a TFRecord file (no valid record header); for Criteo text files use " in line
    )
    line = error("train", "data.source=tsv", f"data.train_paths=[{tfrecord}]")
    assert f"data.train_paths: {tfrecord} is a TFRecord file, not Criteo TSV text; use data.source=tfrecord" in line
    line = error("train", "data.source=tsv", f"data.train_paths=[{tmp_path}]")
    assert f"data.train_paths: {tmp_path} is a directory" in line


def test_masked_crc32c_matches_tensorflow_records(tmp_path):
    assert files.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    import tensorflow as tf

    path = str(tmp_path / "r.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"hello")
    assert files.looks_like_tfrecord(path)
    (tmp_path / "t.tsv").write_text("1\t2\t3\n")
    assert not files.looks_like_tfrecord(str(tmp_path / "t.tsv"))


# ---------------------------------------------------------------------------------------------------------------
# Issue 17 item 7: a different model in a used model_dir is refused before config.yaml is touched.


def test_another_model_in_a_used_model_dir_is_refused_and_config_yaml_is_kept(tmp_path, capsys):
    model_dir = tmp_path / "dlrm"
    model_dir.mkdir()
    dlrm = config_file.load_config(TINY)
    (model_dir / "config.yaml").write_text(config_file.dump_config(dlrm))
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-20"\n')
    before = (model_dir / "config.yaml").read_text()
    assert run_in_process("train", "--config=wide_deep_tiny", f"--model_dir={model_dir}") == 2
    line = one_error_line(capsys, "train")
    assert f"model_dir {model_dir} holds a checkpoint of another model: model.name: 'dlrm' vs 'wide_deep'" in line
    assert f"--config={model_dir}/config.yaml" in line
    assert (model_dir / "config.yaml").read_text() == before
    assert run_in_process("evaluate", "--config=dlrm_tiny", f"--model_dir={model_dir}", "--set=data.max_vocab=50") == 2
    assert "cat_0 table vocab_size: 100 vs 50" in one_error_line(capsys, "evaluate")
    # Optimizer and training settings may change.
    changed = config_file.apply_overrides(dlrm, ["optimizer.dense.learning_rate=0.5", "train.steps=99"])
    assert config_file.model_difference(dlrm, changed) == ""


# ---------------------------------------------------------------------------------------------------------------
# Issue 19: built-in configs by name, --config from the model directory, --version, quiet and fast errors.


def test_builtin_configs_by_name_and_the_model_dir_default(tmp_path):
    assert {"dlrm_tiny", "dlrm_demo", "wide_deep_tiny"} <= set(config_file.builtin_config_names())
    assert config_file.resolve_config_path("dlrm_tiny") == os.path.join(
        config_file.BUILTIN_CONFIG_DIR, "dlrm_tiny.yaml"
    )
    assert config_file.resolve_config_path("wide_deep_tiny.yaml").endswith("app/configs/wide_deep_tiny.yaml")
    assert config_file.resolve_config_path(TINY) == TINY  # an existing path wins
    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    flag_values(["tpu-estimator", "--config=wide_deep_tiny", f"--model_dir={tmp_path}", "--set=train.steps=7"])
    config = cli.load(flag_values)
    assert config.model.name == "wide_deep" and config.train.steps == 7 and config.model_dir == str(tmp_path)
    (tmp_path / "config.yaml").write_text(config_file.dump_config(config))
    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    flag_values(["tpu-estimator", f"--model_dir={tmp_path}", "--set=train.steps=9"])
    saved = cli.load(flag_values)
    assert saved.model.name == "wide_deep" and saved.train.steps == 9


def test_version():
    import tpu_estimator

    assert tpu_estimator.__version__ == "0.1.0"
    proc = run_subprocess(["--version"])
    assert proc.returncode == 0 and proc.stdout == "tpu-estimator 0.1.0\n" and proc.stderr == ""


def test_help_and_config_errors_are_quiet_and_do_not_import_tensorflow(tmp_path):
    proc = run_subprocess(["--help"])
    assert proc.returncode == 0 and "Subcommands:" in proc.stdout and "data " in proc.stdout
    assert "`loss` is the model's loss as TPUEstimator reports it: per batch, on the rows of the first shard" in (
        proc.stdout.replace("\n", " ")
    )
    assert not any(marker in proc.stderr + proc.stdout for marker in TF_LOG_MARKERS), proc.stderr
    proc = run_subprocess(["--helpfull"])
    assert "--config:" in proc.stdout and "--held_out_rows:" in proc.stdout
    for foreign in ("absl.testing", "tensor_tracer", "tpu_", "--test_", "--alsologtostderr", "--only_check_args"):
        assert foreign not in proc.stdout, foreign
    code = f"""
import sys
from absl import flags
from tpu_estimator.app import cli
fv = flags.FlagValues()
cli.define_flags(fv)
status = cli.run(fv(["tpu-estimator", "train", "--config=dlrm_tiny", "--model_dir={tmp_path}",
                     "--set=optimizer.dense.learning_rate=.nan"]), fv)
assert status == 2, status
assert "tensorflow" not in sys.modules, "TensorFlow imported on the config error path"
print("ok")
"""
    proc = run_subprocess(code, python_code=True)
    assert proc.stdout == "ok\n", proc.stderr
    assert (
        proc.stderr == "tpu-estimator train: error: optimizer.dense.learning_rate: expected a finite float, got nan\n"
    )
    proc = run_subprocess(["train", "--config=dlrm_tiny", f"--model_dir={tmp_path}", "--set=train.steps=0"])
    assert proc.returncode == 2
    assert proc.stderr == "tpu-estimator train: error: train.steps: must be positive, got 0\n"


# ---------------------------------------------------------------------------------------------------------------
# The data command's flags.


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "--output is required"),
        (["--output=x.csv", "--rows=3"], "--output: x.csv: the extension says the format: .tsv or .tfrecord"),
        (["--output=x.tsv"], "give --rows=N (synthetic rows) or --input=FILES"),
        (["--output=x.tsv", "--rows=0"], "--rows: must be positive, got 0"),
        (["--output=x.tsv", "--rows=5", "--held_out_rows=-1"], "--held_out_rows: must be non-negative, got -1"),
        (["--output=x.tsv", "--input=nope*.tsv"], "--output: x.tsv: converting --input writes TFRecord"),
        (["--output=x.tfrecord", "--input=nope*.tsv"], "--input: no such file: nope*.tsv"),
        (["--output=x.tfrecord", "--input=a.tsv", "--rows=3"], "--input converts files; --rows/--held_out_rows"),
    ],
)
def test_data_command_flag_errors(args, message, capsys):
    assert run_in_process("data", *args) == 2
    assert message in one_error_line(capsys, "data")


def test_held_out_path():
    assert data_command.held_out_path("/d/day_0.tsv") == "/d/day_0.held_out.tsv"
    assert data_command.held_out_path("x.tfrecord") == "x.held_out.tfrecord"


# ---------------------------------------------------------------------------------------------------------------
# tpu-estimator-run's line, the converter module, and other failures as one line.


def test_launcher_line_says_shards_and_ignored_tpu_address():
    from tpu_estimator.compat import launcher

    args = ["--tpu=grpc://10.0.0.2:8470", "--model_dir=/m", "--tpu_name", "my-tpu", "--master=local"]
    assert launcher.tpu_addresses(args) == ["--tpu=grpc://10.0.0.2:8470", "--tpu_name=my-tpu"]
    assert launcher.describe_run("4", 0, args) == (
        "tpu-estimator-run: running on 4 shards on logical CPU devices (--num_shards); "
        "--tpu=grpc://10.0.0.2:8470, --tpu_name=my-tpu ignored (no TPU: everything runs on this machine)"
    )
    assert launcher.describe_run("2", 2, []) == (
        "tpu-estimator-run: running on 2 shards on GPUs (--num_shards); no TPU: everything runs on this machine"
    )
    assert launcher.describe_run(None, 0, ["--tpu=x"]).startswith(
        "tpu-estimator-run: running on the shards of the program's TPUConfig(num_shards=...), else 1 (CPU); "
        "--num_shards=N sets them; --tpu=x ignored"
    )
    assert launcher.describe_run(None, 0, ["--tpu=grpc://127.0.0.1:2222"], addresses_name_a_cluster=True) == (
        "tpu-estimator-run: --tpu=grpc://127.0.0.1:2222: grpc:// addresses name the cluster's workers "
        "(TPU_ESTIMATOR_TPU_ADDRESSES=cluster)"
    )


def test_convert_module_prints_its_result_once_without_a_runpy_warning(tmp_path):
    tsv = tmp_path / "rows.tsv"
    tsv.write_text("1\t5" + "\t" * 12 + "\tab" + "\t" * 25 + "\n")
    code = (
        "import runpy, sys; sys.argv = ['convert', '--input=%s', '--output=%s'];"
        "runpy.run_module('tpu_estimator.app.data.convert', run_name='__main__', alter_sys=True)"
    ) % (tsv, tmp_path / "rows.tfrecord")
    proc = run_subprocess(code, python_code=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "wrote 1 records, skipped 0 malformed lines\n"
    assert "RuntimeWarning" not in proc.stderr
    assert not any(marker in proc.stderr for marker in TF_LOG_MARKERS), proc.stderr


def test_other_failures_are_one_line_with_exit_1(tmp_path, capsys, monkeypatch):
    from tpu_estimator.app import commands

    def locked(config, flag_values, last_step=None):
        raise RuntimeError(f"model_dir {config.model_dir} is in use by another training process (pid 42)\ndetails")

    monkeypatch.setitem(commands._RUNNERS, "train", locked)
    assert run_in_process("train", "--config=dlrm_tiny", f"--model_dir={tmp_path}") == 1
    assert one_error_line(capsys, "train") == (
        f"tpu-estimator train: error: RuntimeError: model_dir {tmp_path} is in use by another training process "
        "(pid 42) (--traceback shows the full traceback)"
    )
    with pytest.raises(RuntimeError, match="in use by another training process"):
        run_in_process("train", "--config=dlrm_tiny", f"--model_dir={tmp_path}", "--traceback")


def test_package_names_are_imported_on_first_use():
    code = """
import sys
import tpu_estimator as te
assert te.__version__ == "0.1.0" and "tensorflow" not in sys.modules
import tpu_estimator.replicas.device_rewrite  # the module of the exported function
assert callable(te.rewrite) and te.rewrite.__module__ == "tpu_estimator.replicas.device_rewrite"
assert te.TPUEstimator.__name__ == "TPUEstimator" and te.experimental.__name__ == "tpu_estimator.experimental"
from tpu_estimator import RunConfig, TPUConfig, rewrite
assert rewrite is te.rewrite and sorted(te.__all__) == te.__all__ and "TPUEstimatorSpec" in dir(te)
print("ok")
"""
    proc = run_subprocess(code, python_code=True, timeout=300)
    assert proc.stdout == "ok\n", proc.stderr


def test_a_training_run_says_what_it_does_and_prints_no_tensorflow_log(tmp_path):
    # Without TF_CPP_MIN_LOG_LEVEL: no start-up lines, no "failed call to cuInit", no C++ warning such as the
    # rendezvous lines of the embedding infeed's shutdown; the first line comes before TensorFlow is imported.
    proc = run_subprocess(
        ["train", f"--config={TINY}", f"--model_dir={tmp_path}/m", "--set=train.steps=10"], timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[:3] == [
        "tpu-estimator train: importing TensorFlow, then building the graph ...",
        "creating the session (initializing variables and embedding tables) ...",
        "training from step 0: the first loop includes the warm-up ...",
    ], proc.stdout
    output = proc.stdout + proc.stderr
    assert not any(marker in output for marker in TF_LOG_MARKERS + ("E0000", "cuInit", "rendezvous")), output


def test_runs_with_embeddings_end_without_a_cancelled_run_even_with_tensorflow_warnings_shown(tmp_path):
    # The infeed threads' last runs complete at the session's end (drained, not cancelled), so TensorFlow has no
    # "Local rendezvous is aborting with status: CANCELLED" warning to log: train, evaluate and predict.
    model_dir = f"{tmp_path}/m"
    train = run_subprocess(
        ["train", f"--config={TINY}", f"--model_dir={model_dir}", "--set=train.steps=30"], timeout=300, tf_log_level=1
    )
    assert train.returncode == 0, train.stderr[-3000:]
    evaluate = run_subprocess(
        ["evaluate", f"--model_dir={model_dir}", "--set=eval.steps=4"], timeout=300, tf_log_level=1
    )
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    for proc in (train, evaluate):
        assert "rendezvous" not in proc.stderr and "CANCELLED" not in proc.stderr, proc.stderr
