"""Fuzzing the boundaries: malformed YAML configs and malformed Criteo TSV files.

Every generated case must end in the command line's one-line error or a correct result: never another
exception, never a hang (each case runs under an alarm). Seeds are fixed (`derandomize=True`) and the example
counts bounded so that the module runs in well under a minute.
"""

import contextlib
import math
import signal

import numpy as np
import pytest
import tensorflow as tf
import yaml
from absl import flags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpu_estimator.app import cli, commands, config_file
from tpu_estimator.app.data import criteo, synthetic
from tpu_estimator.app.errors import CliError

SECONDS_PER_CASE = 20
FUZZ = settings(
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@contextlib.contextmanager
def time_limit(seconds=SECONDS_PER_CASE):
    def fail(signum, frame):
        raise AssertionError(f"a fuzz case ran for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------------------------
# Configs.

_BASE = config_file.config_to_dict(config_file.load_config(config_file.resolve_config_path("dlrm_tiny")))

_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.lists(st.integers(min_value=-5, max_value=100), max_size=4),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
)


def _paths(data, prefix=()):
    for key, value in data.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _paths(value, prefix + (key,))


_KEY_PATHS = list(_paths(_BASE))


@st.composite
def mutated_config_text(draw):
    """The tiny config with some values replaced (or keys added), dumped, then possibly damaged."""
    data = yaml.safe_load(yaml.safe_dump(_BASE))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_KEY_PATHS))
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[draw(st.sampled_from([path[-1], path[-1] + "x"]))] = draw(_LEAVES)
    text = yaml.safe_dump(data, sort_keys=False)
    damage = draw(st.sampled_from(["none", "truncate", "crlf", "junk", "tabs"]))
    if damage == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif damage == "crlf":
        text = text.replace("\n", "\r\n")
    elif damage == "junk":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(max_size=20)).decode("latin-1") + text[at:]
    elif damage == "tabs":
        text = text.replace("  ", "\t", draw(st.integers(1, 3)))
    return text


_YAML_TEXT = st.text(alphabet=list(":{}[]&*!|>-#'\",.?%@` \n\t\r") + list("abcsteptrain0129e.") + ["\x00", "\ufeff"])


def check_config_text(path, raw: bytes):
    """Loads `raw` as a config file through the command line's loader: a valid Config or a one-line CliError."""
    path.write_bytes(raw)
    flag_values = flags.FlagValues()
    cli.define_flags(flag_values)
    flag_values(["tpu-estimator", f"--config={path}", "--model_dir=/tmp/unused"])
    with time_limit():
        try:
            config = cli.load(flag_values)
        except CliError as e:
            message = str(e)
            assert message and "\n" not in message and len(message) < 1000, message
            return None
    # A correct result: typed, finite, and it round-trips.
    assert config_file.parse_config(config_file.dump_config(config)) == config
    for kind in ("dense", "embedding"):
        rate = getattr(config.optimizer, kind).learning_rate
        assert math.isfinite(rate) and rate > 0
    assert 0 < config.train.steps < 2**63 and config.train.batch_size % config.tpu.num_shards == 0
    return config


@FUZZ
@given(text=mutated_config_text())
def test_fuzz_mutated_configs(tmp_path, text):
    check_config_text(tmp_path / "fuzz.yaml", text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(text=_YAML_TEXT)
def test_fuzz_yaml_junk(tmp_path, text):
    check_config_text(tmp_path / "junk.yaml", text.encode("utf-8", "surrogatepass"))


@settings(FUZZ, max_examples=30)
@given(raw=st.binary(max_size=300))
def test_fuzz_binary_configs(tmp_path, raw):
    check_config_text(tmp_path / "binary.yaml", raw)


# ---------------------------------------------------------------------------------------------------------------
# TSV files.

_GOOD = (
    synthetic.SyntheticCriteo(
        synthetic.SyntheticCriteoSpec(seed=3, cardinalities=tuple(criteo.criteo_cardinalities(50)))
    )
    .generate(64)
    .tsv_lines()
)


@st.composite
def tsv_line(draw):
    """A Criteo line: well formed, or damaged in one of the ways real files are."""
    line = draw(st.sampled_from(_GOOD))
    fields = line.split("\t")
    kind = draw(
        st.sampled_from(
            ["good", "good", "good", "truncated", "fields", "non_numeric", "huge", "label", "junk", "empty", "crlf"]
        )
    )
    if kind == "truncated":
        return line[: draw(st.integers(0, len(line) - 1))]
    if kind == "fields":
        count = draw(st.sampled_from([1, 2, 39, 41, 60]))
        return "\t".join((fields * 2)[:count])
    if kind == "non_numeric":
        fields[draw(st.integers(1, 13))] = draw(st.sampled_from(["abc", "1.5", "1e3", "--1", " 1", "٣", "0x10"]))
    elif kind == "huge":
        fields[draw(st.integers(1, 13))] = draw(st.sampled_from(["9" * 19, "-" + "9" * 18, "123456789012345678"]))
    elif kind == "label":
        fields[0] = draw(st.sampled_from(["", "2", "-1", "yes", "1.0"]))
    elif kind == "junk":
        return draw(st.binary(min_size=1, max_size=60)).replace(b"\n", b"").decode("latin-1")
    elif kind == "empty":
        return ""
    elif kind == "crlf":
        return line + "\r"
    return "\t".join(fields)


def _encode(line: str) -> bytes:
    """Junk lines are bytes decoded as latin-1: encode them back; other lines are UTF-8 text."""
    try:
        return line.encode("latin-1")
    except UnicodeEncodeError:
        return line.encode("utf-8")


def reference_parse(lines):
    """What the reader must give for `lines` (without terminators): ('error', 1-based line, reason) for the first
    malformed line, else ('ok', labels, dense, present, categorical)."""
    for number, line in enumerate(lines, start=1):
        text = line.decode("utf-8", "replace")
        reason = criteo.malformed_reason(text)
        if reason:
            return ("error", number, reason)
    labels, dense, present, categorical = [], [], [], []
    for line in lines:
        fields = line.split(b"\t")
        labels.append(int(fields[0]))
        values = fields[1:14]
        present.append([bool(v) for v in values])
        dense.append([int(v) if v else 0 for v in values])
        categorical.append(fields[14:])
    return ("ok", labels, dense, present, categorical)


@settings(FUZZ, max_examples=40)
@given(lines=st.lists(tsv_line(), min_size=1, max_size=30), terminator=st.sampled_from(["\n", "\r\n"]))
def test_fuzz_tsv_reader(tmp_path, lines, terminator):
    path = tmp_path / "fuzz.tsv"
    content = b"".join(_encode(line) + terminator.encode() for line in lines)
    path.write_bytes(content)
    # TextLineDataset ends lines at \n and drops every \r (so CRLF files read as LF ones).
    expected = reference_parse([line.replace(b"\r", b"") for line in content.split(b"\n")[:-1]])
    with time_limit():
        ds = criteo.tsv_raw_dataset(str(path), batch_size=64)
        try:
            batches = list(ds.as_numpy_iterator())
        except tf.errors.InvalidArgumentError as e:
            message = commands.explain(e, None)
            assert expected[0] == "error", (message, lines)
            assert message == f"{path}:{expected[1]}: {expected[2]} (--skip_malformed skips malformed lines)"
            return
    assert expected[0] == "ok", (expected, lines)
    label = np.concatenate([b[0] for b in batches])
    dense = np.concatenate([b[1] for b in batches])
    present = np.concatenate([b[2] for b in batches])
    categorical = np.concatenate([b[3] for b in batches])
    assert label.tolist() == expected[1]
    assert dense.tolist() == expected[2] and present.tolist() == expected[3]
    assert [list(row) for row in categorical] == [list(row) for row in expected[4]]


def test_tsv_reader_crlf_and_unlabeled_rows(tmp_path):
    """CRLF line ends are read as LF ones; predict's reader accepts rows without a label (label -1)."""
    path = tmp_path / "crlf.tsv"
    path.write_bytes(("\r\n".join(_GOOD[:3]) + "\r\n").encode())
    label, dense, present, categorical = next(iter(criteo.tsv_raw_dataset(str(path), batch_size=8)))
    assert [row[-1] for row in categorical.numpy().tolist()] == [line.split("\t")[-1].encode() for line in _GOOD[:3]]
    unlabeled = tmp_path / "test.tsv"
    unlabeled.write_text("".join(line.split("\t", 1)[1] + "\n" for line in _GOOD[:4]) + _GOOD[4] + "\n")
    label, dense, present, categorical = next(iter(criteo.tsv_raw_dataset(str(unlabeled), 8, allow_unlabeled=True)))
    assert label.numpy().tolist() == [-1, -1, -1, -1, int(_GOOD[4][0])]
    expected = np.array([[int(v) if v else 0 for v in line.split("\t")[1:14]] for line in _GOOD[:5]])
    np.testing.assert_array_equal(dense.numpy(), expected)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"test\.tsv:1: expected 40 tab-separated fields, got 39"):
        list(criteo.tsv_raw_dataset(str(unlabeled), 8))


# ---------------------------------------------------------------------------------------------------------------
# TFRecord files.


def _record(payload: bytes) -> bytes:
    import struct

    from tpu_estimator.app.data import files

    length = struct.pack("<Q", len(payload))
    return (
        length
        + struct.pack("<I", files.masked_crc32c(length))
        + payload
        + struct.pack("<I", files.masked_crc32c(payload))
    )


_EXAMPLES = [
    criteo.raw_to_example(1, [3] * 13, [True] * 13, [b"ab"] * 26).SerializeToString(),
    criteo.raw_to_example(0, [0] * 13, [False] * 13, [b""] * 26).SerializeToString(),
]


@st.composite
def tfrecord_bytes(draw):
    """A TFRecord file of Criteo examples, possibly damaged: truncated, junk records, junk bytes, or TSV text."""
    records = [_record(draw(st.sampled_from(_EXAMPLES))) for _ in range(draw(st.integers(0, 5)))]
    kind = draw(st.sampled_from(["good", "truncated", "junk_record", "junk_bytes", "text"]))
    if kind == "junk_record":
        records.insert(draw(st.integers(0, len(records))), _record(draw(st.binary(max_size=40))))
    raw = b"".join(records)
    if kind == "truncated" and raw:
        raw = raw[: draw(st.integers(1, len(raw) - 1))]
    elif kind == "junk_bytes":
        raw = draw(st.binary(min_size=1, max_size=80))
    elif kind == "text":
        raw = ("\n".join(_GOOD[:3]) + "\n").encode()
    return raw


@settings(FUZZ, max_examples=20)
@given(raw=tfrecord_bytes())
def test_fuzz_tfrecord_reader(tmp_path, raw):
    """A config's tfrecord files: the pre-check's one-line error, the reader's explained one-line error, or the
    right number of rows."""
    from tpu_estimator.app.data import files

    path = tmp_path / "fuzz.tfrecord"
    path.write_bytes(raw)
    config = config_file.parse_config("", ["data.source=tfrecord", f"data.train_paths=[{path}]"])
    with time_limit():
        try:
            files.check_files([str(path)], "tfrecord", "data.train_paths", allow_empty=True)
        except CliError as e:
            assert "\n" not in str(e) and str(path) in str(e)
            return
        try:
            batches = list(criteo.criteo_tfrecord_dataset(str(path), 4, 10).as_numpy_iterator())
        except (tf.errors.OpError, UnicodeDecodeError) as e:
            message = commands.explain(e, config)
            assert message is not None and "\n" not in message and str(path) in message, str(e)
            return
    rows = sum(len(label) for _, label in batches)
    assert rows == sum(1 for _ in tf.data.TFRecordDataset(str(path)))
