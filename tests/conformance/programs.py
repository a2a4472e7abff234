"""Conformance programs: one small TPUEstimator program per case of the axes, and its NumPy oracle.

The program: features `a` (1-3 ids per row, or 3 in the dense format; optionally weighted by `a_w`), `c` (one id),
a dense feature `x` [2] and a label `y`. Embedding activations of `a` and `c` are concatenated, read out with fixed
weights `W`, plus `x . u + b` (`u`, `b` trained by SGD through `CrossShardOptimizer`); loss = mean squared error.
The embedding tables are trained by the TPU embedding optimizer of the case (or, without an embedding config, are
ordinary variables looked up with TensorFlow ops and trained by the same SGD).

The oracle (`train_oracle`, `forward`) computes the same thing in NumPy from `tpu_reference`'s formulas on the
global batches: every valid case, whatever its shards, loop size, input mode, partition strategy or input format,
must end with the oracle's variables. That makes the suite's shard/loop/partition invariance checks exact.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

import tpu_estimator as te
from tests.conformance import tpu_reference as ref

N, G, STEPS, EVAL_STEPS, N_PRED, PREDICT_BATCH = 48, 8, 3, 2, 13, 4
V, D, L = 10, 3, 3
DENSE_LR = 0.1
_RNG = np.random.RandomState(14)
A = _RNG.randint(0, V, size=(N, 3)).astype(np.int64)
A[0] = [4, 4, 2]  # duplicates inside one row
A_LEN = _RNG.randint(1, 4, size=N).astype(np.int64)
A_W = _RNG.uniform(0.5, 2.0, size=(N, 3)).astype(np.float32)
C = _RNG.randint(0, V, size=(N, 1)).astype(np.int64)
X = _RNG.randn(N, 2).astype(np.float32)
Y = _RNG.randn(N).astype(np.float32)
INIT_A = _RNG.uniform(-0.5, 0.5, size=(V, D)).astype(np.float32)
INIT_C = _RNG.uniform(-0.5, 0.5, size=(V, D)).astype(np.float32)

# The TPU embedding optimizer of each `optimizer` axis value: (parameters factory, reference hyper-parameters).
OPTIMIZER_HPARAMS: Dict[str, Dict[str, float]] = {
    "sgd": {"learning_rate": DENSE_LR},
    "adagrad": {"learning_rate": 0.3, "initial_accumulator": 0.1},
    "adagrad_momentum": {"learning_rate": 0.2, "momentum": 0.5, "epsilon": 1e-10},
    "proximal_adagrad": {"learning_rate": 0.3, "initial_accumulator": 0.1, "l1": 0.01, "l2": 0.02},
    "adam": {"learning_rate": 0.05, "beta1": 0.8, "beta2": 0.9, "epsilon": 1e-3},
    "ftrl": {"learning_rate": 0.3, "initial_accumulator": 0.1, "l1": 0.01, "l2": 0.02},
    "momentum": {"learning_rate": 0.2, "momentum": 0.5},
    "rmsprop": {"learning_rate": 0.1, "rho": 0.9, "momentum": 0.5, "epsilon": 1e-3},
}
# Checkpoint suffix of each reference slot (`<table>/<suffix>`).
SLOT_SUFFIXES = {
    "accumulators": {"adagrad": "Adagrad", "proximal_adagrad": "ProximalAdagrad", "ftrl": "Ftrl"},
    "momenta": {"adagrad_momentum": "AdagradMomentum/Momentum", "adam": "Adam/m", "momentum": "Momentum"},
    "velocities": {"adam": "Adam/v"},
    "linears": {"ftrl": "Ftrl_1"},
    "ms": {"rmsprop": "RMSProp/ms"},
    "mom": {"rmsprop": "RMSProp/mom"},
}
_ADAGRAD_MOMENTUM_ACCUMULATOR = "AdagradMomentum/Accumulator"

INPUT_CONFIGS = {
    "PER_HOST_V1": te.InputPipelineConfig.PER_HOST_V1,
    "PER_HOST_V2": te.InputPipelineConfig.PER_HOST_V2,
    "PER_SHARD_V1": te.InputPipelineConfig.PER_SHARD_V1,
    "BROADCAST": te.InputPipelineConfig.BROADCAST,
    "SLICED": te.InputPipelineConfig.PER_HOST_V1,  # trains PER_HOST_V1, evaluates/predicts SLICED
}
COLUMN_KINDS = ("columns", "shared_columns", "weighted_columns", "sequence_columns")
SEQUENCE_KINDS = ("dict_sequence", "sequence_columns")
WEIGHTED_KINDS = ("dict_weighted", "weighted_columns")


def optimization_parameters(kind: str) -> Any:
    """The `tpu_estimator.experimental` optimization parameters of an `optimizer` axis value."""
    h = OPTIMIZER_HPARAMS[kind]
    tex = te.experimental
    if kind == "sgd":
        return tex.StochasticGradientDescentParameters(h["learning_rate"])
    if kind == "adagrad":
        return tex.AdagradParameters(h["learning_rate"], initial_accumulator=h["initial_accumulator"])
    if kind == "adagrad_momentum":
        return tex.AdagradMomentumParameters(h["learning_rate"], momentum=h["momentum"], epsilon=h["epsilon"])
    if kind == "proximal_adagrad":
        return tex.ProximalAdagradParameters(
            h["learning_rate"],
            initial_accumulator=h["initial_accumulator"],
            l1_regularization_strength=h["l1"],
            l2_regularization_strength=h["l2"],
        )
    if kind == "adam":
        return tex.AdamParameters(h["learning_rate"], beta1=h["beta1"], beta2=h["beta2"], epsilon=h["epsilon"])
    if kind == "ftrl":
        return tex.FtrlParameters(
            h["learning_rate"],
            initial_accumulator_value=h["initial_accumulator"],
            l1_regularization_strength=h["l1"],
            l2_regularization_strength=h["l2"],
        )
    if kind == "momentum":
        return tex.MomentumParameters(h["learning_rate"], momentum=h["momentum"])
    if kind == "rmsprop":
        return tex.RMSPropParameters(h["learning_rate"], rho=h["rho"], momentum=h["momentum"], epsilon=h["epsilon"])
    raise ValueError(kind)


# ---------------------------------------------------------------------------------------------------------------
# Data of a case, as per-row id lists (for the oracle) and as the tensors input_fn yields.


def x_key(case: Dict[str, Any]) -> str:
    """The dense feature's key: `_x` sorts before the id features (dense first), `x` after them (ids first)."""
    return "_x" if case["key_order"] == "dense_first_reversed" else "x"


def a_rows(case: Dict[str, Any], rows: np.ndarray) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """Ids and weights of feature `a` per row (all 3 ids in the dense format, 1-3 otherwise)."""
    lengths = np.full(len(rows), 3) if case["id_format"] == "dense" else A_LEN[rows]
    ids = [A[r, :n] for r, n in zip(rows, lengths)]
    weights = [A_W[r, :n] if case["embedding"] in WEIGHTED_KINDS else np.ones(n) for r, n in zip(rows, lengths)]
    return ids, weights


def _id_value(ids: np.ndarray, lengths: np.ndarray, fmt: str, dtype=tf.int64) -> Any:
    """`[n, width]` ids (or weights) with per-row `lengths` as a dense array, SparseTensor or RaggedTensor."""
    if fmt == "dense":
        return ids
    values = np.concatenate([ids[i, :n] for i, n in enumerate(lengths)]).astype(ids.dtype)
    if fmt == "ragged":
        return tf.RaggedTensor.from_row_lengths(values, lengths)
    indices = np.array([[i, j] for i, n in enumerate(lengths) for j in range(n)], np.int64).reshape(-1, 2)
    return tf.SparseTensor(indices, values, [len(lengths), ids.shape[1]])


def features_and_labels(case: Dict[str, Any], rows: np.ndarray, with_labels: bool = True) -> Tuple[Dict, Any]:
    """The (features, labels) structure of `rows` in the case's formats and key order (labels None: inside)."""
    fmt = case["id_format"]
    lengths = np.full(len(rows), 3) if fmt == "dense" else A_LEN[rows]
    features = {
        "a": _id_value(A[rows], lengths, fmt),
        "c": _id_value(C[rows], np.ones(len(rows), np.int64), fmt),
        x_key(case): X[rows],
    }
    if case["embedding"] in WEIGHTED_KINDS:
        features["a_w"] = _id_value(A_W[rows], lengths, fmt)
    labels = None
    if with_labels:
        if case["labels"] == "none":
            features["y"] = Y[rows]
        else:
            labels = Y[rows] if case["labels"] == "tensor" else {"y": Y[rows]}
    order = sorted(features, reverse=case["key_order"] == "dense_first_reversed")
    return {key: features[key] for key in order}, labels


def predict_rows(case: Dict[str, Any]) -> int:
    """Rows predicted: N_PRED (the last batch partial, an unknown batch dimension) or, for `predict_batch='static'`,
    the whole batches of them read with `drop_remainder=True` (a static batch dimension). PER_HOST_V2's `input_fn`
    batches per replica (`PREDICT_BATCH / shards` rows), the other modes per host (`PREDICT_BATCH` on one host)."""
    if case["predict_batch"] == "partial":
        return N_PRED
    input_fn_batch = PREDICT_BATCH // case["shards"] if case["input_config"] == "PER_HOST_V2" else PREDICT_BATCH
    return N_PRED - N_PRED % input_fn_batch


def make_input_fn(case: Dict[str, Any], mode: str) -> Callable:
    """input_fn of `mode` ('train', 'eval', 'predict'): global batches in row order, as the case's input mode needs.

    PER_SHARD_V1 training calls input_fn once per shard: invocation i takes per-shard batches i, i + R, ..., i.e.
    slice i of each global batch, so every input mode trains on the same global batches.
    """

    def input_fn(params):
        batch = params["batch_size"]
        if mode == "predict":
            features, _ = features_and_labels(case, np.arange(N_PRED), with_labels=False)
            static = case["predict_batch"] == "static"
            dataset = tf.data.Dataset.from_tensor_slices(features).batch(batch, drop_remainder=static)
            if case["returns"] == "tensors":
                return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
            return dataset
        features, labels = features_and_labels(case, np.arange(N))
        elements = features if labels is None else (features, labels)
        dataset = tf.data.Dataset.from_tensor_slices(elements).repeat()
        dataset = dataset.batch(batch, drop_remainder=True)
        if mode == "train" and case["input_config"] == "PER_SHARD_V1":
            context = params["context"]
            dataset = dataset.shard(context.num_replicas, context.current_input_fn_deployment()[1])
        if case["returns"] == "tensors":
            return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        return dataset

    return input_fn


# ---------------------------------------------------------------------------------------------------------------
# The embedding configuration and the model.


def logical_tables(case: Dict[str, Any]) -> Dict[str, Tuple[np.ndarray, Tuple[str, ...]]]:
    """Logical table -> (initial value, features using it). Separate tables for a and c with separate columns."""
    if case["embedding"] in ("columns", "weighted_columns", "sequence_columns"):
        return {"ta": (INIT_A, ("a",)), "tc": (INIT_C, ("c",))}
    return {"t1": (INIT_A, ("a", "c"))}


def _columns(case: Dict[str, Any]) -> List[Any]:
    init_a, init_c = tf.compat.v1.constant_initializer(INIT_A), tf.compat.v1.constant_initializer(INIT_C)
    tpu_column = tf.compat.v1.tpu.experimental.embedding_column
    cat_a = tf.feature_column.categorical_column_with_identity("a", V)
    cat_c = tf.feature_column.categorical_column_with_identity("c", V)
    combiner, kind = case["combiner"], case["embedding"]
    if kind == "shared_columns":
        return tf.compat.v1.tpu.experimental.shared_embedding_columns([cat_a, cat_c], D, combiner, init_a)
    col_c = tpu_column(cat_c, D, combiner, init_c)
    if kind == "weighted_columns":
        return [tpu_column(tf.feature_column.weighted_categorical_column(cat_a, "a_w"), D, combiner, init_a), col_c]
    if kind == "sequence_columns":
        sequence = tf.feature_column.sequence_categorical_column_with_identity("a", V)
        return [tpu_column(sequence, D, initializer=init_a, max_sequence_length=L), col_c]
    return [tpu_column(cat_a, D, combiner, init_a), col_c]


def embedding_config_spec(case: Dict[str, Any], columns: Optional[List[Any]] = None) -> Any:
    """The case's `EmbeddingConfigSpec`, or None without embeddings."""
    kind = case["embedding"]
    if kind == "none":
        return None
    tex = te.experimental
    common = dict(
        optimization_parameters=optimization_parameters(case["optimizer"]), partition_strategy=case["partition"]
    )
    if kind in COLUMN_KINDS:
        return tex.EmbeddingConfigSpec(feature_columns=columns, **common)
    table = tex.TableConfig(V, D, initializer=tf.compat.v1.constant_initializer(INIT_A), combiner=case["combiner"])
    feature_a = tex.FeatureConfig(
        "t1",
        max_sequence_length=L if kind == "dict_sequence" else 0,
        weight_key="a_w" if kind == "dict_weighted" else None,
    )
    return tex.EmbeddingConfigSpec(
        table_to_config_dict={"t1": table},
        feature_to_config_dict={"a": feature_a, "c": tex.FeatureConfig("t1")},
        **common,
    )


def readout_width(case: Dict[str, Any]) -> int:
    return (L * D if case["embedding"] in SEQUENCE_KINDS else D) + D


def readout(case: Dict[str, Any]) -> np.ndarray:
    return np.linspace(-1.0, 1.0, readout_width(case)).astype(np.float32)


def _plain_lookup(table: tf.Tensor, ids: Any, combiner: str) -> tf.Tensor:
    """Without an embedding config: `[B, D]` combined lookup with TensorFlow ops (dense/sparse/ragged ids)."""
    if isinstance(ids, tf.SparseTensor):
        return tf.nn.embedding_lookup_sparse(table, ids, None, combiner=combiner)
    if not isinstance(ids, tf.RaggedTensor):
        ids = tf.RaggedTensor.from_tensor(ids)
    rows = tf.gather(table, ids)
    total = tf.reduce_sum(rows, axis=1)
    count = tf.cast(tf.expand_dims(ids.row_lengths(), 1), total.dtype)
    if combiner == "mean":
        return total / count
    if combiner == "sqrtn":
        return total / tf.sqrt(count)
    return total


def _activations(case: Dict[str, Any], features: Dict[str, Any], columns: Optional[List[Any]]) -> tf.Tensor:
    kind = case["embedding"]
    if kind == "none":
        table = tf.compat.v1.get_variable("t1", [V, D], initializer=tf.compat.v1.constant_initializer(INIT_A))
        parts = [_plain_lookup(table, features["a"], case["combiner"]), _plain_lookup(table, features["c"], "mean")]
    elif kind in COLUMN_KINDS:
        if kind == "sequence_columns":
            sequence, _ = tf.keras.experimental.SequenceFeatures([columns[0]])(features)
            first = tf.reshape(sequence, [-1, L * D])
        else:
            first = tf.compat.v1.keras.layers.DenseFeatures([columns[0]])(features)
        parts = [first, tf.compat.v1.keras.layers.DenseFeatures([columns[1]])(features)]
    else:
        first = features["a"]
        if kind == "dict_sequence":
            first = tf.reshape(first, [-1, L * D])
        parts = [first, features["c"]]
    return tf.concat(parts, axis=1)


def make_model_fn(case: Dict[str, Any], columns: Optional[List[Any]] = None, spec_cls: Any = None) -> Callable:
    """The case's model_fn, with the signature of its `signature` axis value.

    Args:
      case: the case.
      columns: its feature columns (column embedding kinds).
      spec_cls: the TPUEstimatorSpec class to return (default ours; upstream's for the upstream oracle).
    """
    weights = readout(case)
    spec_cls = spec_cls or te.TPUEstimatorSpec

    def body(features, labels, mode, params):
        acts = _activations(case, features, columns)
        u = tf.compat.v1.get_variable("u", [2], initializer=tf.compat.v1.constant_initializer(0.1))
        b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.zeros_initializer())
        logit = tf.squeeze(tf.matmul(acts, tf.constant(weights.reshape(-1, 1))), 1)
        logit = logit + tf.reduce_sum(features[x_key(case)] * u, axis=1) + b
        if mode == te.estimator.ModeKeys.PREDICT:
            return spec_cls(mode, predictions={"logit": logit})
        if case["labels"] == "none":
            y = features["y"]
        else:
            y = labels["y"] if isinstance(labels, dict) else labels
        loss = tf.reduce_mean(tf.square(logit - y))
        if mode == te.estimator.ModeKeys.EVAL:
            metric_fn = lambda logit: {"mean_logit": tf.compat.v1.metrics.mean(logit)}  # noqa: E731
            return spec_cls(mode, loss=loss, eval_metrics=(metric_fn, [logit]))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(DENSE_LR)
        if params.get("use_tpu", True):
            optimizer = te.CrossShardOptimizer(optimizer)
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return spec_cls(mode, loss=loss, train_op=train_op)

    signature = case["signature"]
    if signature == "features_labels_mode_params_config":

        def model_fn(features, labels, mode, params, config):
            assert isinstance(config, te.RunConfig), config
            return body(features, labels, mode, params)

    elif signature == "features_labels_mode_params":

        def model_fn(features, labels, mode, params):
            return body(features, labels, mode, params)

    elif signature == "features_mode_params":

        def model_fn(features, mode, params):
            return body(features, None, mode, params)

    elif signature == "features_labels_mode":

        def model_fn(features, labels, mode):
            return body(features, labels, mode, {})

    else:
        raise ValueError("unknown signature {!r}".format(signature))
    return model_fn


def columns_of(case: Dict[str, Any]) -> Optional[List[Any]]:
    """The case's TPU embedding feature columns, or None for dict configs and no embeddings."""
    return _columns(case) if case["embedding"] in COLUMN_KINDS else None


def make_estimator(case: Dict[str, Any], model_dir: str) -> te.TPUEstimator:
    """The case's TPUEstimator (its shards, loop size, input mode, embedding config and model_fn)."""
    columns = columns_of(case)
    tpu_config = te.TPUConfig(
        iterations_per_loop=case["iterations_per_loop"],
        num_shards=case["shards"],
        per_host_input_for_training=INPUT_CONFIGS[case["input_config"]],
        eval_training_input_configuration=(
            te.InputPipelineConfig.SLICED if case["input_config"] == "SLICED" else te.InputPipelineConfig.PER_HOST_V1
        ),
    )
    return te.TPUEstimator(
        model_fn=make_model_fn(case, columns),
        config=te.RunConfig(model_dir=str(model_dir), tpu_config=tpu_config),
        train_batch_size=G,
        eval_batch_size=G,
        predict_batch_size=PREDICT_BATCH,
        embedding_config_spec=embedding_config_spec(case, columns),
    )


def serving_input_receiver_fn(case: Dict[str, Any]) -> Callable:
    """Dense receiver tensors (ids padded to 3 with their lengths) turned into the case's feature formats."""

    def receiver_fn():
        ph = tf.compat.v1.placeholder
        receivers = {
            "a_ids": ph(tf.int64, [None, 3], "a_ids"),
            "a_len": ph(tf.int64, [None], "a_len"),
            "a_w": ph(tf.float32, [None, 3], "a_w"),
            "c_ids": ph(tf.int64, [None, 1], "c_ids"),
            "x": ph(tf.float32, [None, 2], "x"),
        }

        def shaped(value, lengths):
            if case["id_format"] == "dense":
                return value
            ragged = tf.RaggedTensor.from_tensor(value, lengths=lengths)
            return ragged if case["id_format"] == "ragged" else ragged.to_sparse()

        features = {
            "a": shaped(receivers["a_ids"], receivers["a_len"]),
            "c": shaped(receivers["c_ids"], tf.ones_like(receivers["a_len"])),
            x_key(case): receivers["x"],
        }
        if case["embedding"] in WEIGHTED_KINDS:
            features["a_w"] = shaped(receivers["a_w"], receivers["a_len"])
        return te.estimator.export.ServingInputReceiver(features, receivers)

    return receiver_fn


def serve(export_dir: str, case: Dict[str, Any], rows: np.ndarray) -> np.ndarray:
    """Runs the exported SERVING signature on `rows` in a fresh graph; returns its `logit` output."""
    lengths = np.full(len(rows), 3) if case["id_format"] == "dense" else A_LEN[rows]
    feed_values = {"a_ids": A[rows], "a_len": lengths, "a_w": A_W[rows], "c_ids": C[rows], "x": X[rows]}
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
        signature = meta.signature_def["serving_default"]
        feed = {signature.inputs[k].name: v for k, v in feed_values.items() if k in signature.inputs}
        return session.run(signature.outputs["logit"].name, feed)


# ---------------------------------------------------------------------------------------------------------------
# The NumPy oracle.


def initial_state(case: Dict[str, Any]) -> Dict[str, Any]:
    kind = "sgd" if case["embedding"] == "none" else case["optimizer"]
    hparams = OPTIMIZER_HPARAMS[kind] if case["embedding"] != "none" else {"learning_rate": DENSE_LR}
    tables = {name: ref.init_table(kind, init, hparams) for name, (init, _) in logical_tables(case).items()}
    return {"tables": tables, "u": np.full(2, 0.1), "b": 0.0}


def _feature_table(case: Dict[str, Any], feature: str) -> str:
    return next(name for name, (_, feats) in logical_tables(case).items() if feature in feats)


def forward(case: Dict[str, Any], state: Dict[str, Any], rows: np.ndarray) -> Tuple[np.ndarray, Dict[str, Any]]:
    """Logits of `rows`, and what the backward pass needs."""
    ids_a, w_a = a_rows(case, rows)
    ids_c = [C[r] for r in rows]
    table_a = state["tables"][_feature_table(case, "a")]["params"]
    table_c = state["tables"][_feature_table(case, "c")]["params"]
    if case["embedding"] in SEQUENCE_KINDS:
        act_a = ref.sequence_lookup(table_a, ids_a, L).reshape(len(rows), -1)
    else:
        act_a = ref.combined_lookup(table_a, ids_a, w_a, case["combiner"])
    act_c = ref.combined_lookup(table_c, ids_c, [np.ones(1)] * len(rows), "mean")
    acts = np.concatenate([act_a, act_c], axis=1)
    logits = acts @ readout(case).astype(np.float64) + X[rows].astype(np.float64) @ state["u"] + state["b"]
    return logits, {"ids_a": ids_a, "w_a": w_a, "ids_c": ids_c, "width_a": act_a.shape[1]}


def train_oracle(case: Dict[str, Any], steps: int = STEPS) -> Dict[str, Any]:
    """The state after `steps` SGD/TPU-embedding steps on the global batches 0..steps-1."""
    state = initial_state(case)
    kind = "sgd" if case["embedding"] == "none" else case["optimizer"]
    hparams = OPTIMIZER_HPARAMS[kind] if case["embedding"] != "none" else {"learning_rate": DENSE_LR}
    w = readout(case).astype(np.float64)
    for step in range(steps):
        rows = np.arange(step * G, (step + 1) * G) % N
        logits, saved = forward(case, state, rows)
        dlogit = 2.0 * (logits - Y[rows]) / G
        grad_acts = np.outer(dlogit, w)
        grad_a, grad_c = grad_acts[:, : saved["width_a"]], grad_acts[:, saved["width_a"] :]
        if case["embedding"] in SEQUENCE_KINDS:
            ids_a, g_a = ref.sequence_gradients(saved["ids_a"], L, grad_a.reshape(len(rows), L, D))
        else:
            ids_a, g_a = ref.combined_gradients(saved["ids_a"], saved["w_a"], case["combiner"], grad_a)
        ids_c, g_c = ref.combined_gradients(saved["ids_c"], [np.ones(1)] * len(rows), "mean", grad_c)
        per_table: Dict[str, List[Tuple[np.ndarray, np.ndarray]]] = {}
        per_table.setdefault(_feature_table(case, "a"), []).append((ids_a, g_a))
        per_table.setdefault(_feature_table(case, "c"), []).append((ids_c, g_c))
        state["u"] = state["u"] - DENSE_LR * (X[rows].astype(np.float64).T @ dlogit)
        state["b"] = state["b"] - DENSE_LR * dlogit.sum()
        for name, parts in per_table.items():
            ids = np.concatenate([p[0] for p in parts])
            grads = np.concatenate([p[1] for p in parts])
            state["tables"][name] = ref.table_step(kind, hparams, state["tables"][name], ids, grads)
    return state


def eval_oracle(case: Dict[str, Any], state: Dict[str, Any]) -> Dict[str, float]:
    """`loss` and `mean_logit` of EVAL_STEPS global batches from row 0.

    `mean_logit` (an `eval_metrics` metric) covers every row of every replica. `loss` is upstream's: the mean over
    steps of replica 0's loss (upstream shards the eval step with `outputs_from_all_shards=False`), so on R shards
    it covers the first G/R rows of each global batch (all G rows with BROADCAST, where every replica gets them).
    """
    per_replica = G if case["input_config"] == "BROADCAST" else G // case["shards"]
    losses, logits = [], []
    for step in range(EVAL_STEPS):
        rows = np.arange(step * G, (step + 1) * G)
        batch_logits, _ = forward(case, state, rows)
        losses.append(np.mean((batch_logits[:per_replica] - Y[rows][:per_replica]) ** 2))
        logits.append(batch_logits)
    return {"loss": float(np.mean(losses)), "mean_logit": float(np.mean(np.concatenate(logits)))}


# ---------------------------------------------------------------------------------------------------------------
# Reading the trained estimator's variables in the oracle's terms.


def table_variable_names(case: Dict[str, Any], names: List[str]) -> Dict[str, str]:
    """Logical table -> checkpoint variable name of its parameters."""
    kind = case["embedding"]
    if kind == "none" or kind in ("dict", "dict_weighted", "dict_sequence"):
        return {"t1": "t1"}
    if kind == "shared_columns":
        return {"t1": _only(names, lambda n: n.endswith("shared_embedding"))}
    return {
        "ta": _only(
            names,
            lambda n: n.endswith("a_embedding/embedding_weights") or n.endswith("a_w_embedding/embedding_weights"),
        ),
        "tc": _only(names, lambda n: n.endswith("c_embedding/embedding_weights")),
    }


def _only(names: List[str], predicate: Callable[[str], bool]) -> str:
    found = [n for n in names if predicate(n)]
    assert len(found) == 1, "expected one variable, found {} among {}".format(found, names)
    return found[0]


def slot_variable_names(case: Dict[str, Any], table_var: str) -> Dict[str, str]:
    """Reference slot -> checkpoint variable name for the table variable `table_var`."""
    kind = case["optimizer"]
    out = {}
    for slot, _ in ref.SLOTS[kind]:
        if kind == "adagrad_momentum" and slot == "accumulators":
            out[slot] = table_var + "/" + _ADAGRAD_MOMENTUM_ACCUMULATOR
        else:
            out[slot] = table_var + "/" + SLOT_SUFFIXES[slot][kind]
    return out
