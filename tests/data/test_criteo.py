"""Tests of the Criteo readers, the TSV -> TFRecord converter and the synthetic generator."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from tpu_estimator.app.data import convert, criteo, synthetic

SMALL = tuple(criteo.criteo_cardinalities(max_vocab=1000))


def _gen(seed=0, cardinalities=SMALL, **kw):
    return synthetic.SyntheticCriteo(synthetic.SyntheticCriteoSpec(seed=seed, cardinalities=cardinalities, **kw))


def _collect(ds):
    """Concatenates (features, label) batches into NumPy arrays."""
    feats, labels = {}, []
    for f, l in ds.as_numpy_iterator():
        for k, v in f.items():
            feats.setdefault(k, []).append(v)
        labels.append(l)
    return {k: np.concatenate(v) for k, v in feats.items()}, np.concatenate(labels)


def _assert_same(a, b):
    fa, la = a
    fb, lb = b
    assert sorted(fa) == sorted(fb)
    for k in fa:
        np.testing.assert_array_equal(fa[k], fb[k], err_msg=k)
    np.testing.assert_array_equal(la, lb)


def _rows(features, label):
    """Rows as hashable tuples (for comparing multisets)."""
    cols = [features["dense"]] + [features[n][:, None] for n in criteo.CATEGORICAL_FEATURE_NAMES] + [label[:, None]]
    return sorted(map(tuple, np.concatenate([c.astype(np.float64) for c in cols], axis=1).tolist()))


def _auc(y, score):
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    # Average ranks over ties.
    _, inv, counts = np.unique(score, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    ranks = (sums / counts)[inv]
    pos = y == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def test_auc_helper():
    assert _auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == pytest.approx(0.75)
    assert _auc(np.array([0, 1]), np.array([0.5, 0.5])) == pytest.approx(0.5)


def test_cardinalities():
    assert len(criteo.CRITEO_KAGGLE_CARDINALITIES) == 26
    assert criteo.criteo_cardinalities()[2] == 10131227
    capped = criteo.criteo_cardinalities(max_vocab=1000)
    assert capped[:4] == [1000, 583, 1000, 1000] and capped[8] == 3
    scaled = criteo.criteo_cardinalities(scale=0.001)
    assert scaled[2] == 10131 and scaled[8] == 1 and min(scaled) >= 1
    with pytest.raises(ValueError, match="vocab_sizes must have 26"):
        criteo.resolve_vocab_sizes([5] * 3)
    assert criteo.resolve_vocab_sizes(7) == [7] * 26


def test_generator_deterministic_by_seed():
    a = _gen(seed=3).generate(1500)
    b = _gen(seed=3).generate(1500)
    c = _gen(seed=4).generate(1500)
    for name in ("label", "dense", "dense_present", "categorical", "ranks"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.categorical, c.categorical)
    assert not np.array_equal(a.dense, c.dense)
    # An example depends only on (seed, index): ranges agree with slices of a longer run.
    part = _gen(seed=3).generate(100, start=1000)
    np.testing.assert_array_equal(part.categorical, a.categorical[1000:1100])
    np.testing.assert_array_equal(part.label, a.label[1000:1100])


def test_synthetic_statistics():
    gen = _gen(seed=5)
    b = gen.generate(8192)
    assert 0.22 < b.label.mean() < 0.28
    assert b.dense.min() >= 0
    assert b.dense.max() > 1000  # heavy tailed
    assert (b.dense == 0).mean() > 0.05
    missing = 1 - b.dense_present.mean(axis=0)
    assert missing[11] == pytest.approx(0.77, abs=0.03)  # I12
    assert missing[1] == 0.0
    cat_missing = (b.categorical == b"").mean(axis=0)
    assert cat_missing[21] == pytest.approx(0.76, abs=0.03)  # C22
    np.testing.assert_array_equal(b.categorical == b"", b.ranks < 0)


def test_cardinalities_respected():
    cards = tuple([3, 50] + [20] * 24)
    gen = _gen(seed=1, cardinalities=cards)
    b = gen.generate(5000)
    for i, card in enumerate(cards):
        ranks = b.ranks[:, i][b.ranks[:, i] >= 0]
        assert ranks.max() < card
        tokens = set(b.categorical[:, i].tolist()) - {b""}
        assert len(tokens) <= card
    assert len(set(b.categorical[:, 1].tolist()) - {b""}) > 40  # most of the 50 values show up
    features, _ = _collect(gen.dataset(1000, 5000))
    for i, card in enumerate(cards):
        ids = features[criteo.CATEGORICAL_FEATURE_NAMES[i]]
        assert ids.min() >= 0 and ids.max() < card


def test_power_law_frequencies():
    gen = _gen(seed=2, cardinalities=tuple(criteo.criteo_cardinalities(max_vocab=100000)))
    b = gen.generate(20000)
    ranks = b.ranks[:, 2]  # C3: 100000 values after capping
    ranks = ranks[ranks >= 0]
    counts = np.bincount(ranks, minlength=100000)
    assert counts[0] > 50 * max(np.median(counts[:1000]), 1)
    assert counts[0] > counts[9] > counts[99]
    # Frequency ~ rank ** -1.1: rank 0 about 10 ** 1.1 = 12.6 times rank 9.
    assert 6 < counts[0] / counts[9] < 25
    # The 1% most frequent values cover most occurrences.
    top = np.sort(counts)[::-1]
    assert top[:1000].sum() > 0.5 * counts.sum()


def test_tsv_format(tmp_path):
    gen = _gen(seed=0)
    path = gen.write_tsv(str(tmp_path / "a.tsv"), 2000)
    with open(path) as f:
        text = f.read()
    assert text.endswith("\n")
    lines = text.split("\n")[:-1]
    assert len(lines) == 2000
    empty_dense = empty_cat = 0
    for line in lines:
        fields = line.split("\t")
        assert len(fields) == 40
        assert fields[0] in ("0", "1")
        for v in fields[1:14]:
            assert v == "" or re.fullmatch(r"[0-9]+", v), v
            empty_dense += v == ""
        for v in fields[14:]:
            assert v == "" or re.fullmatch(r"[0-9a-f]{8}", v), v
            empty_cat += v == ""
    assert empty_dense > 1000 and empty_cat > 1000
    b = gen.generate(2000)
    assert lines == b.tsv_lines()


def test_synthetic_dataset_equals_tsv_reading(tmp_path):
    gen = _gen(seed=7)
    paths = gen.write_tsv_files(str(tmp_path), 3000, num_files=3)
    assert [os.path.basename(p) for p in paths] == [f"criteo-0000{i}-of-00003.tsv" for i in range(3)]
    direct = _collect(gen.dataset(256, 3000))
    read = _collect(criteo.criteo_tsv_dataset(str(tmp_path / "*.tsv"), 256, SMALL))
    assert direct[1].shape == (3000,)
    _assert_same(direct, read)


HANDWRITTEN = (
    "1\t0\t5\t\t-3\t99\t1\t2\t3\t4\t5\t6\t7\t1000\t" + "\t".join(["68fd1e64"] * 25) + "\t\n"
    "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t" + "\t".join([""] * 26) + "\n"
    "0\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t" + "\t".join(f"{i:08x}" for i in range(26)) + "\n"
)


@pytest.mark.quick
def test_reader_on_handwritten_tsv(tmp_path):
    path = tmp_path / "hand.tsv"
    path.write_text(HANDWRITTEN)
    vocab = [10] * 13 + [1000] * 13
    ds = criteo.criteo_tsv_dataset(str(path), 3, vocab)
    features, label = next(iter(ds))
    assert sorted(features) == sorted(["dense"] + [f"cat_{i}" for i in range(26)])
    assert features["dense"].dtype == tf.float32 and features["dense"].shape == (3, 13)
    assert label.dtype == tf.float32 and label.shape == (3,)
    for name in criteo.CATEGORICAL_FEATURE_NAMES:
        assert features[name].dtype == tf.int64 and features[name].shape == (3,)
    np.testing.assert_array_equal(label.numpy(), [1.0, 0.0, 0.0])
    raw0 = np.array([0, 5, 0, 0, 99, 1, 2, 3, 4, 5, 6, 7, 1000], np.float32)  # missing -> 0, -3 clamped to 0
    np.testing.assert_allclose(features["dense"].numpy()[0], np.log1p(raw0), rtol=1e-6)
    np.testing.assert_array_equal(features["dense"].numpy()[1], np.zeros(13))
    np.testing.assert_allclose(features["dense"].numpy()[2], np.full(13, np.log(2.0)), rtol=1e-6)
    for i, name in enumerate(criteo.CATEGORICAL_FEATURE_NAMES):
        ids = features[name].numpy()
        expected0 = (
            criteo.missing_categorical_id(vocab[i])
            if i == 25
            else tf.strings.to_hash_bucket_fast("68fd1e64", vocab[i]).numpy()
        )
        assert ids[0] == expected0
        assert ids[1] == criteo.missing_categorical_id(vocab[i])
        assert ids[2] == tf.strings.to_hash_bucket_fast(f"{i:08x}", vocab[i]).numpy()
        assert 0 <= ids.min() and ids.max() < vocab[i]
    # Fixed, documented hash: FarmHash Fingerprint64 of the string modulo the vocabulary size.
    assert criteo.missing_categorical_id(1000) == tf.strings.to_hash_bucket_fast("", 1000).numpy()


def _good_lines(n):
    return _gen(seed=11).generate(n).tsv_lines()


@pytest.mark.parametrize(
    "line_index,bad,pattern",
    [
        (2, lambda l: l.replace("\t", "\t\t", 1), r"bad\.tsv:3: expected 40 tab-separated fields, got 41"),
        (
            6,
            lambda l: "\t".join(l.split("\t")[:3] + ["1.5"] + l.split("\t")[4:]),
            r"bad\.tsv:7: dense feature I3 must be an integer of at most 18 digits, got `1\.5`",
        ),
    ],
)
@pytest.mark.quick
def test_malformed_line_error_names_file_and_line(tmp_path, line_index, bad, pattern):
    lines = _good_lines(9)
    lines[line_index] = bad(lines[line_index])
    path = tmp_path / "bad.tsv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
        _collect(criteo.criteo_tsv_dataset(str(path), 4))


def test_malformed_reasons():
    good = _good_lines(1)[0]
    fields = good.split("\t")
    assert criteo.malformed_reason(good) == ""
    assert criteo.malformed_reason(good.rsplit("\t", 1)[0]) == "expected 40 tab-separated fields, got 39"
    assert criteo.malformed_reason("") == "expected 40 tab-separated fields, got 1"
    assert criteo.malformed_reason("\t".join(["2"] + fields[1:])) == "label must be 0 or 1, got `2`"
    assert criteo.malformed_reason("\t".join([""] + fields[1:])) == "label must be 0 or 1, got ``"
    for value in ("abc", "1.5", "1e3", " 7", "+3", "1" * 19):
        line = "\t".join(fields[:1] + [value] + fields[2:])
        assert (
            criteo.malformed_reason(line) == f"dense feature I1 must be an integer of at most 18 digits, got `{value}`"
        )
    for value in ("-12", "0", "9" * 18, ""):
        assert criteo.malformed_reason("\t".join(fields[:5] + [value] + fields[6:])) == ""
    # The in-graph checks agree with malformed_reason (eager call, no dataset).
    lines = [good, "\t".join(fields[:5] + ["-12"] + fields[6:]), "\t".join(["x"] + fields[1:])]
    label, dense, present, cat = criteo.parse_tsv_lines(
        tf.constant(lines),
        tf.constant(["f"] * 3),
        tf.constant([1, 2, 3], tf.int64),
        skip_malformed=True,
        counter=criteo.MalformedLineCounter(),
    )
    assert label.shape == (2,) and dense.numpy()[1, 4] == -12 and cat.shape == (2, 26)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"f:3: label must be 0 or 1, got `x`"):
        criteo.parse_tsv_lines(tf.constant(lines), tf.constant(["f"] * 3), tf.constant([1, 2, 3], tf.int64))


def test_malformed_lines_skipped_and_counted(tmp_path):
    lines = _good_lines(10)
    good = list(lines)
    lines[1] = "garbage"
    lines[4] = "x" + lines[4][1:]
    lines[8] = "\t".join(lines[8].split("\t")[:5] + ["12x"] + lines[8].split("\t")[6:])
    bad_path = tmp_path / "bad.tsv"
    bad_path.write_text("\n".join(lines) + "\n")
    good_path = tmp_path / "good.tsv"
    good_path.write_text("\n".join(l for i, l in enumerate(good) if i not in (1, 4, 8)) + "\n")
    counter = criteo.MalformedLineCounter()
    got = _collect(criteo.criteo_tsv_dataset(str(bad_path), 3, skip_malformed=True, malformed_counter=counter))
    assert counter.count == 3
    # Batches are parsed in parallel: messages arrive in any order.
    messages = sorted(counter.messages, key=lambda m: int(m.split(":")[1]))
    assert messages[0] == f"{bad_path}:2: expected 40 tab-separated fields, got 1"
    assert messages[1] == f"{bad_path}:5: label must be 0 or 1, got `x`"
    assert messages[2].startswith(f"{bad_path}:9: dense feature I5 must be an integer of at most 18 digits")
    _assert_same(got, _collect(criteo.criteo_tsv_dataset(str(good_path), 3)))
    # Batches are refilled to full size after skipping.
    ds = criteo.criteo_tsv_dataset(
        str(bad_path), 3, skip_malformed=True, drop_remainder=True, malformed_counter=counter
    )
    assert [l.shape[0] for _, l in ds] == [3, 3]
    assert ds.element_spec[1].shape == (3,)
    assert counter.count == 6


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("num_pipelines", [1, 2, 5])  # 5 > 4 files: every pipeline reads every file
def test_malformed_lines_of_many_files_name_their_file_and_line(tmp_path, shuffle, num_pipelines):
    # Line k of file f (0-based) is malformed when k == 2 + f: every file and line number differs.
    paths = []
    for f in range(4):
        lines = _good_lines(7)
        lines[2 + f] = f"garbage{f}"
        path = tmp_path / f"part-{f}.tsv"
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    messages = []
    for pipeline in range(num_pipelines):
        counter = criteo.MalformedLineCounter()
        _collect(
            criteo.criteo_tsv_dataset(
                str(tmp_path / "part-*.tsv"),
                5,
                skip_malformed=True,
                malformed_counter=counter,
                shuffle=shuffle,
                seed=3,
                input_pipeline_id=pipeline,
                num_pipelines=num_pipelines,
            )
        )
        messages += counter.messages
    assert sorted(messages) == [f"{paths[f]}:{3 + f}: expected 40 tab-separated fields, got 1" for f in range(4)]


def test_tfrecord_round_trip_equals_tsv(tmp_path):
    gen = _gen(seed=4)
    gen.write_tsv_files(str(tmp_path / "tsv"), 2500, num_files=2)
    hand = tmp_path / "tsv" / "z_hand.tsv"
    hand.write_text(HANDWRITTEN)
    out = str(tmp_path / "rec" / "criteo.tfrecord")
    n = convert.convert_tsv_to_tfrecord(str(tmp_path / "tsv" / "*.tsv"), out)
    assert n == 2503
    tsv = _collect(criteo.criteo_tsv_dataset(str(tmp_path / "tsv" / "*.tsv"), 500, SMALL))
    rec = _collect(criteo.criteo_tfrecord_dataset(out, 500, SMALL))
    _assert_same(tsv, rec)
    # Missing values leave their keys out of the Example.
    first = next(iter(tf.data.TFRecordDataset(out).skip(2500))).numpy()
    keys = set(tf.train.Example.FromString(first).features.feature)
    assert "I3" not in keys and "C26" not in keys and "I1" in keys and "C1" in keys


def test_convert_command_line(tmp_path):
    gen = _gen(seed=9)
    gen.write_tsv(str(tmp_path / "in.tsv"), 300)
    with open(tmp_path / "in.tsv", "a") as f:
        f.write("bad line\n")
    out = str(tmp_path / "out.tfrecord")
    fv = flags.FlagValues()
    convert.define_flags(fv)
    fv(
        [
            "convert",
            f"--input={tmp_path / 'in.tsv'}",
            f"--output={out}",
            "--skip_malformed",
            "--num_output_files=2",
            "--output_compression=GZIP",
        ]
    )
    assert convert.run(fv) == "wrote 300 records, skipped 1 malformed lines"
    paths = convert.output_paths(out, 2)
    assert [os.path.basename(p) for p in paths] == ["out.tfrecord-00000-of-00002", "out.tfrecord-00001-of-00002"]
    assert [sum(1 for _ in tf.data.TFRecordDataset(p, "GZIP")) for p in paths] == [150, 150]
    # Round robin over the files: together they hold the 300 examples.
    rec = _collect(criteo.criteo_tfrecord_dataset(out + "-*", 300, SMALL, compression_type="GZIP"))
    tsv = _collect(gen.dataset(300, 300))
    assert _rows(*rec) == _rows(*tsv)
    with pytest.raises(flags.IllegalFlagValueError):
        fv2 = flags.FlagValues()
        convert.define_flags(fv2)
        fv2(["convert", "--input=a", "--output=b", "--num_output_files=0"])


def test_sharding_by_pipeline(tmp_path):
    gen = _gen(seed=6)
    gen.write_tsv_files(str(tmp_path / "three"), 3000, num_files=3)
    one = gen.write_tsv(str(tmp_path / "one.tsv"), 3000)
    # Three mechanisms (whole files, every other line of one file, blocks of the generator) split the same 3000
    # examples into two disjoint parts.
    by_files = [
        _collect(
            criteo.criteo_tsv_dataset(str(tmp_path / "three" / "*"), 512, SMALL, input_pipeline_id=i, num_pipelines=2)
        )
        for i in range(2)
    ]
    by_lines = [
        _collect(criteo.criteo_tsv_dataset(one, 512, SMALL, input_pipeline_id=i, num_pipelines=2)) for i in range(2)
    ]
    by_blocks = [_collect(gen.dataset(512, 3000, input_pipeline_id=i, num_pipelines=2)) for i in range(2)]
    assert [len(p[1]) for p in by_files] == [2000, 1000]  # files 0, 2 and file 1
    assert [len(p[1]) for p in by_lines] == [1500, 1500]
    assert [len(p[1]) for p in by_blocks] == [1976, 1024]  # blocks 0, 2 and block 1
    np.testing.assert_array_equal(by_lines[0][0]["cat_3"][:512], by_blocks[0][0]["cat_3"][:1024:2])  # even lines
    merged = [sorted(_rows(*p[0]) + _rows(*p[1])) for p in (by_files, by_lines, by_blocks)]
    assert len(set(map(tuple, merged[0]))) > 2900
    assert merged[0] == merged[1] == merged[2]
    with pytest.raises(ValueError, match="input_pipeline_id"):
        criteo.criteo_tsv_dataset(one, 8, input_pipeline_id=2, num_pipelines=2)


def test_shuffle_repeat_and_drop_remainder(tmp_path):
    gen = _gen(seed=8)
    path = gen.write_tsv(str(tmp_path / "a.tsv"), 1000)
    plain = _collect(criteo.criteo_tsv_dataset(path, 128, SMALL))
    shuffled = _collect(criteo.criteo_tsv_dataset(path, 128, SMALL, shuffle=True, seed=1, shuffle_buffer_size=500))
    assert not np.array_equal(plain[0]["cat_0"], shuffled[0]["cat_0"])
    assert _rows(*plain) == _rows(*shuffled)
    ds = criteo.criteo_tsv_dataset(path, 128, SMALL, num_epochs=2, drop_remainder=True)
    assert ds.element_spec[0]["dense"].shape == (128, 13)
    assert sum(1 for _ in ds) == 2000 // 128
    endless = criteo.criteo_tsv_dataset(path, 128, SMALL, num_epochs=None)
    assert sum(1 for _ in endless.take(20)) == 20
    synth = gen.dataset(100, None, drop_remainder=True)
    assert synth.element_spec[1].shape == (100,)
    assert sum(1 for _ in synth.take(15)) == 15
    with pytest.raises(ValueError, match="No files match"):
        criteo.criteo_tsv_dataset(str(tmp_path / "nothing*.tsv"), 8)


def test_synthetic_task_is_learnable():
    """Logistic regression (dense + one-hot ids, NumPy Adagrad) beats AUC 0.65 on held-out rows."""
    vocab = criteo.criteo_cardinalities(max_vocab=1000)
    gen = _gen(seed=12, cardinalities=tuple(vocab))
    features, label = _collect(gen.dataset(1024, 12000))
    dense = features["dense"]
    dense = (dense - dense[:8000].mean(0)) / (dense[:8000].std(0) + 1e-6)
    offsets = np.cumsum([0] + vocab[:-1])
    ids = np.stack([features[n] for n in criteo.CATEGORICAL_FEATURE_NAMES], 1) + offsets
    tr, te = slice(0, 8000), slice(8000, 12000)
    w_dense, w_cat, bias = np.zeros(13), np.zeros(sum(vocab)), 0.0
    acc_d, acc_c, acc_b = np.full(13, 1e-3), np.full(sum(vocab), 1e-3), 1e-3
    y = label[tr]
    for _ in range(150):
        logit = dense[tr] @ w_dense + w_cat[ids[tr]].sum(1) + bias
        err = 1 / (1 + np.exp(-logit)) - y
        g_d = dense[tr].T @ err / len(y)
        g_c = np.bincount(ids[tr].ravel(), weights=np.repeat(err, 26), minlength=len(w_cat)) / len(y) + 1e-4 * w_cat
        g_b = err.mean()
        acc_d += g_d**2
        acc_c += g_c**2
        acc_b += g_b**2
        w_dense -= 0.3 * g_d / np.sqrt(acc_d)
        w_cat -= 0.3 * g_c / np.sqrt(acc_c)
        bias -= 0.3 * g_b / np.sqrt(acc_b)
    score = dense[te] @ w_dense + w_cat[ids[te]].sum(1)
    auc = _auc(label[te], score)
    assert auc > 0.65, auc
    # The hidden model itself does better still (the task is far from saturated).
    raw = gen.generate(4000, start=8000)
    assert _auc(raw.label, gen.click_probability(raw)) > auc
