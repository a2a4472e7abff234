"""NumPy reference of TPU embedding training for the conformance suite, written from the formulas.

Independent of `embedding/` and `tpu_estimator/`: the update rules are the TPU optimizer formulas (docs/SEMANTICS.md
section 9, and TensorFlow's `ResourceSparseApply*` kernels for Momentum, RMSProp and
ProximalAdagrad); the lookups are the combiner formulas. State is float64.

A table is a dict `{"params": [V, D], slot: [V, D], ...}`. One training step of a table:
`table_step(kind, hparams, table, ids, grads)` sums the per-occurrence gradients per unique id, then applies the
optimizer once to those rows only (lazy update).
"""

from typing import Dict, List, Sequence, Tuple

import numpy as np

# kind -> slot names in update order, with their initial values (None: the `initial_accumulator` hyper-parameter).
SLOTS: Dict[str, List[Tuple[str, object]]] = {
    "sgd": [],
    "adagrad": [("accumulators", None)],
    "adagrad_momentum": [("accumulators", 0.0), ("momenta", 0.0)],
    "proximal_adagrad": [("accumulators", None)],
    "adam": [("momenta", 0.0), ("velocities", 0.0)],
    "ftrl": [("accumulators", None), ("linears", 0.0)],
    "momentum": [("momenta", 0.0)],
    "rmsprop": [("ms", 0.0), ("mom", 0.0)],
}


def init_table(kind: str, params: np.ndarray, hparams: Dict[str, float]) -> Dict[str, np.ndarray]:
    """The table state before training: the parameters and each slot at its documented initial value."""
    table = {"params": np.array(params, np.float64)}
    for slot, value in SLOTS[kind]:
        table[slot] = np.full_like(table["params"], hparams["initial_accumulator"] if value is None else value)
    return table


def update_rows(kind: str, h: Dict[str, float], rows: Dict[str, np.ndarray], g: np.ndarray) -> Dict[str, np.ndarray]:
    """One optimizer step on `rows` (params and slots of the updated ids) with their summed gradients `g`."""
    lr = h["learning_rate"]
    w = rows["params"]
    new: Dict[str, np.ndarray] = {}
    if kind == "sgd":
        w = w - lr * g
    elif kind == "adagrad":
        a = rows["accumulators"] + g**2
        w = w - lr * g / np.sqrt(a)
        new["accumulators"] = a
    elif kind == "adagrad_momentum":  # beta2 = 1, exponent = 2, no Nesterov
        a = rows["accumulators"] + g**2
        scaled = (a + h["epsilon"]) ** (-1.0 / 2.0) * g
        m = h["momentum"] * rows["momenta"] + scaled
        w = w - lr * m
        new.update(accumulators=a, momenta=m)
    elif kind == "proximal_adagrad":
        a = rows["accumulators"] + g**2
        adaptive = lr / np.sqrt(a)  # the kernel's regularization uses the per-coordinate rate
        prox = w - adaptive * g
        w = np.sign(prox) / (1.0 + adaptive * h["l2"]) * np.maximum(np.abs(prox) - adaptive * h["l1"], 0.0)
        new["accumulators"] = a
    elif kind == "adam":  # no bias correction, epsilon inside the square root
        m = h["beta1"] * rows["momenta"] + (1 - h["beta1"]) * g
        v = h["beta2"] * rows["velocities"] + (1 - h["beta2"]) * g**2
        w = w - lr * m / np.sqrt(v + h["epsilon"] ** 2)
        new.update(momenta=m, velocities=v)
    elif kind == "ftrl":  # learning_rate_power -0.5, beta 0
        n, z = rows["accumulators"], rows["linears"]
        n_new = n + g**2
        z = z + g - (np.sqrt(n_new) - np.sqrt(n)) * w / lr
        w = (np.clip(z, -h["l1"], h["l1"]) - z) / (np.sqrt(n_new) / lr + 2 * h["l2"])
        new.update(accumulators=n_new, linears=z)
    elif kind == "momentum":  # no Nesterov
        a = h["momentum"] * rows["momenta"] + g
        w = w - lr * a
        new["momenta"] = a
    elif kind == "rmsprop":
        ms = h["rho"] * rows["ms"] + (1 - h["rho"]) * g**2
        mom = h["momentum"] * rows["mom"] + lr * g / np.sqrt(ms + h["epsilon"])
        w = w - mom
        new.update(ms=ms, mom=mom)
    else:
        raise ValueError("unknown optimizer kind {!r}".format(kind))
    new["params"] = w
    return new


def table_step(
    kind: str, hparams: Dict[str, float], table: Dict[str, np.ndarray], ids: Sequence[int], grads: np.ndarray
) -> Dict[str, np.ndarray]:
    """One lazy step: per-id gradient sums over every occurrence, one update per unique id, other rows unchanged."""
    ids = np.asarray(ids, np.int64).reshape(-1)
    grads = np.asarray(grads, np.float64).reshape(len(ids), -1)
    out = {name: value.copy() for name, value in table.items()}
    if len(ids) == 0:
        return out
    summed = np.zeros_like(table["params"])
    np.add.at(summed, ids, grads)
    rows = np.unique(ids)
    updated = update_rows(kind, hparams, {name: value[rows] for name, value in table.items()}, summed[rows])
    for name in out:
        out[name][rows] = updated[name]
    return out


def combiner_gains(weights: Sequence[float], combiner: str) -> np.ndarray:
    """Per-id factors of a combined lookup: output = sum_j gain_j * row[id_j] (zeros for an empty row)."""
    w = np.asarray(weights, np.float64)
    if len(w) == 0:
        return w
    if combiner == "sum":
        return w
    if combiner == "mean":
        return w / w.sum()
    if combiner == "sqrtn":
        return w / np.sqrt((w**2).sum())
    raise ValueError("unknown combiner {!r}".format(combiner))


def combined_lookup(
    params: np.ndarray, ids: Sequence[Sequence[int]], weights: Sequence[Sequence[float]], combiner: str
) -> np.ndarray:
    """`[B, D]` activations of a combined feature: row i combines the rows of ids[i] with weights[i]."""
    out = np.zeros((len(ids), params.shape[1]))
    for i, (row_ids, row_weights) in enumerate(zip(ids, weights)):
        gains = combiner_gains(row_weights, combiner)
        for gain, index in zip(gains, row_ids):
            out[i] += gain * params[index]
    return out


def combined_gradients(
    ids: Sequence[Sequence[int]], weights: Sequence[Sequence[float]], combiner: str, grad_out: np.ndarray
) -> Tuple[np.ndarray, np.ndarray]:
    """Per-occurrence (ids, gradients) of a combined feature given the gradient of its `[B, D]` output."""
    flat_ids, flat_grads = [], []
    for i, (row_ids, row_weights) in enumerate(zip(ids, weights)):
        for gain, index in zip(combiner_gains(row_weights, combiner), row_ids):
            flat_ids.append(index)
            flat_grads.append(gain * grad_out[i])
    return np.asarray(flat_ids, np.int64), np.asarray(flat_grads, np.float64).reshape(len(flat_ids), -1)


def sequence_lookup(params: np.ndarray, ids: Sequence[Sequence[int]], length: int) -> np.ndarray:
    """`[B, L, D]` activations of a sequence feature: position p holds row ids[i][p], zeros past the end."""
    out = np.zeros((len(ids), length, params.shape[1]))
    for i, row_ids in enumerate(ids):
        for p, index in enumerate(list(row_ids)[:length]):
            out[i, p] = params[index]
    return out


def sequence_gradients(
    ids: Sequence[Sequence[int]], length: int, grad_out: np.ndarray
) -> Tuple[np.ndarray, np.ndarray]:
    """Per-occurrence (ids, gradients) of a sequence feature given the gradient of its `[B, L, D]` output."""
    flat_ids, flat_grads = [], []
    for i, row_ids in enumerate(ids):
        for p, index in enumerate(list(row_ids)[:length]):
            flat_ids.append(index)
            flat_grads.append(grad_out[i, p])
    return np.asarray(flat_ids, np.int64), np.asarray(flat_grads, np.float64).reshape(len(flat_ids), -1)
