"""Tests of the YAML run configuration loader."""

import os

import pytest

from tpu_estimator.app import config_file as cf

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")


def test_defaults_from_empty_and_minimal_files(tmp_path):
    empty = cf.parse_config("")
    assert empty == cf.Config()
    assert empty.model.name == "dlrm" and empty.model.bottom_mlp[-1] == empty.model.embedding_dim
    assert empty.data.source == "synthetic" and empty.data.max_vocab == 100000
    assert empty.optimizer.dense.name == "adam" and empty.optimizer.embedding.name == "adagrad"
    assert empty.train.batch_size == 256 and empty.eval.steps == 100
    assert empty.tpu.num_shards == 1 and empty.tpu.partition_strategy == "div"
    assert empty.model_dir is None and empty.export.export_to_tpu is False
    path = tmp_path / "min.yaml"
    path.write_text("train:\n  steps: 7\nmodel_dir: /tmp/m\n")
    config = cf.load_config(str(path))
    assert config.train.steps == 7 and config.train.batch_size == 256 and config.model_dir == "/tmp/m"
    assert cf.parse_config("model:\n") == cf.Config()  # a null section means defaults


def test_shipped_configs():
    tiny = cf.load_config(os.path.join(CONFIGS, "dlrm_tiny.yaml"))
    assert tiny.tpu.num_shards == 2 and tiny.train.steps == 20 and tiny.data.max_vocab == 100
    assert tiny.data.resolved_vocab_sizes()[:3] == [100, 100, 100] and tiny.data.resolved_vocab_sizes()[8] == 3
    assert tiny.optimizer.embedding.args == {"initial_accumulator": 0.1}
    demo = cf.load_config(os.path.join(CONFIGS, "dlrm_demo.yaml"))
    assert demo.tpu.num_shards == 2 and demo.data.source == "synthetic" and demo.data.num_examples is None
    assert demo.train.batch_size % demo.tpu.num_shards == 0


def test_types_are_converted():
    c = cf.parse_config("""
optimizer:
  dense: {name: sgd, learning_rate: 1}
  embedding: {name: adam, learning_rate: 1e-3, args: {beta1: 0.8, lazy_adam: false, epsilon: 1}}
tpu: {per_host_input_for_training: true}
data: {source: tsv, train_paths: [a.tsv, 'b*.tsv'], vocab_sizes: [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
       18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30], max_vocab: null}
""")
    assert c.optimizer.dense.learning_rate == 1.0 and isinstance(c.optimizer.dense.learning_rate, float)
    assert c.optimizer.embedding.learning_rate == 0.001  # PyYAML reads 1e-3 as a string
    assert c.optimizer.embedding.args == {"beta1": 0.8, "lazy_adam": False, "epsilon": 1.0}
    assert c.tpu.per_host_input_for_training is True
    assert c.data.train_paths == ["a.tsv", "b*.tsv"] and c.data.max_vocab is None
    assert c.data.resolved_vocab_sizes()[25] == 30


@pytest.mark.parametrize(
    "text,message",
    [
        ("train: {batch_size: abc}", "train.batch_size: expected int, got str 'abc'"),
        ("train: {batch_size: 2.5}", "train.batch_size: expected int, got float 2.5"),
        ("train: {batch_size: true}", "train.batch_size: expected int, got bool True"),
        ("train: {batch_sise: 3}", "train.batch_sise: unknown key (allowed: batch_size, steps,"),
        ("bogus: 1", "bogus: unknown key (allowed: model, data,"),
        ("model: {name: bert}", "model.name: expected one of 'dlrm', 'wide_deep', got str 'bert'"),
        ("model: {bottom_mlp: [8, x]}", "model.bottom_mlp[1]: expected int, got str 'x'"),
        ("model: {top_mlp: 8}", "model.top_mlp: expected list of int, got int 8"),
        ("model: [1]", "model: expected a mapping, got list [1]"),
        ("[1, 2]", "<root>: expected a mapping, got list [1, 2]"),
        ('data: {skip_malformed: "yes"}', "data.skip_malformed: expected bool, got str 'yes'"),
        ("data: {train_paths: a.tsv}", "data.train_paths: expected list of str, got str 'a.tsv'"),
        (
            "optimizer: {embedding: {name: adam, args: {beta1: fast}}}",
            "optimizer.embedding.args.beta1: expected float, got str 'fast'",
        ),
        (
            "optimizer: {embedding: {name: sgd, args: {beta1: 0.9}}}",
            "optimizer.embedding.args.beta1: unknown argument for optimizer 'sgd'",
        ),
        ("optimizer: {dense: {name: lamb}}", "optimizer.dense.name: expected one of 'sgd'"),
        ("optimizer: {dense: {learning_rate: 0}}", "optimizer.dense.learning_rate: must be positive, got 0.0"),
        ("embedding: {tables: {cat_3: {dimension: 8}}}", "embedding.tables.cat_3.dimension: unknown key"),
        (
            "embedding: {tables: {cat_3: {combiner: max}}}",
            "embedding.tables.cat_3.combiner: expected one of 'mean', 'sum', 'sqrtn' or null, got str 'max'",
        ),
        ("embedding: {tables: {cat_30: {combiner: sum}}}", "embedding.tables.cat_30: unknown feature"),
        (
            "embedding: {tables: {cat_1: {dim: 8}}}",
            "embedding.tables.cat_1.dim: dlrm with dot interaction needs every dim equal to model.embedding_dim (16)",
        ),
        ("tpu: {per_host_input_for_training: PER_HOST}", "tpu.per_host_input_for_training: expected bool or one of"),
        ("tpu: {partition_strategy: hash}", "tpu.partition_strategy: expected one of 'div', 'mod', got str 'hash'"),
        ("tpu: {num_shards: 0}", "tpu.num_shards: must be positive, got 0"),
        ("tpu: {num_shards: 3}", "train.batch_size: 256 must be divisible by tpu.num_shards 3"),
        ("data: {source: tsv}", "data.train_paths: required for data.source 'tsv'"),
        ("data: {vocab_sizes: [1, 2]}", "data.vocab_sizes: expected 26 entries, got 2"),
        ("data: {vocab_sizes: [1, x]}", "data.vocab_sizes[1]: expected int, got str 'x'"),
        ("data: {vocab_sizes: 5}", "data.vocab_sizes: expected list of int or null, got int 5"),
        ("model: {embedding_dim: 8}", "model.bottom_mlp: last layer (16) must equal model.embedding_dim (8)"),
        ("model_dir: 3", "model_dir: expected str or null, got int 3"),
        ("export: {export_to_tpu: 1}", "export.export_to_tpu: expected bool, got int 1"),
        ("train: {steps: [", "invalid YAML"),
    ],
)
def test_errors_name_the_key_path(text, message):
    with pytest.raises(ValueError) as info:
        cf.parse_config(text)
    assert str(info.value).startswith(message), str(info.value)


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("eval:\n  steps: many\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: eval\.steps: expected int or null, got str 'many'"):
        cf.load_config(str(path))


def test_overrides():
    base = cf.parse_config("train: {batch_size: 64}")
    c = cf.apply_overrides(
        base,
        [
            "train.batch_size=2048",
            "tpu.num_shards=2",
            "model.top_mlp=[128, 64]",
            "embedding.tables.cat_3.combiner=sum",
            "data.max_vocab=null",
            "optimizer.embedding.args.initial_accumulator=0.5",
            "model_dir=/tmp/x",
            "tpu.per_host_input_for_training=PER_HOST_V1",
            "eval.steps=",
        ],
    )
    assert c.train.batch_size == 2048 and c.tpu.num_shards == 2 and c.model.top_mlp == [128, 64]
    assert c.embedding.tables["cat_3"] == cf.TableOverride(combiner="sum")
    assert c.data.max_vocab is None and c.model_dir == "/tmp/x" and c.eval.steps is None
    assert c.optimizer.embedding.args == {"initial_accumulator": 0.5}
    assert c.tpu.per_host_input_for_training == "PER_HOST_V1"
    assert base.train.batch_size == 64 and base.embedding.tables == {}  # the input is not changed
    assert c.table_settings("cat_3") == {"dim": 16, "combiner": "sum", "vocab_size": 2202608}
    assert c.table_settings("cat_0") == {"dim": 16, "combiner": "mean", "vocab_size": 1460}
    # Later overrides win; file + overrides in one call.
    assert cf.parse_config("", ["train.steps=5", "train.steps=6"]).train.steps == 6


@pytest.mark.parametrize(
    "override,message",
    [
        ("train.batch_size=abc", "train.batch_size: expected int, got str 'abc'"),
        ("train.batch_sise=3", "train.batch_sise: unknown key"),
        ("nothing.here=1", "nothing: unknown key"),
        ("train.batch_size.x=1", "train.batch_size: not a mapping, cannot set train.batch_size.x"),
        ("train.batch_size", "override 'train.batch_size': expected key.path=value"),
        ("tpu.num_shards=3", "train.batch_size: 256 must be divisible by tpu.num_shards 3"),
        ("model.top_mlp=[1, 2", "model.top_mlp: invalid YAML value"),
    ],
)
def test_override_errors(override, message):
    with pytest.raises(ValueError) as info:
        cf.apply_overrides(cf.Config(), [override])
    assert str(info.value).startswith(message), str(info.value)


def test_dump_round_trip():
    c = cf.load_config(os.path.join(CONFIGS, "dlrm_demo.yaml"), ["embedding.tables.cat_0.vocab_size=10"])
    assert cf.parse_config(cf.dump_config(c)) == c
    assert cf.config_from_dict(cf.config_to_dict(c)) == c
