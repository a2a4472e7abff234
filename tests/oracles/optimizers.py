"""NumPy reference of the TPU embedding optimizers: the per-optimizer update formulas (docs/SEMANTICS.md section 9).

Independent of `embedding/`: hyper-parameters come in as plain keyword arguments, state is a dict of float64
arrays. One call = one step on rows whose gradient is already summed over every occurrence of each id.

Order per step: clip gradient -> decoupled weight decay (on the weights the rule then reads) -> rule ->
clip weights.

Usage:
  state = init_state('adagrad', params, initial_accumulator_value=0.1)
  state = step('adagrad', state, grads, lr=0.1, initial_accumulator_value=0.1)
"""

from typing import Dict, Optional

import numpy as np

SLOTS = {
    "sgd": [],
    "adagrad": ["accumulators"],
    "adagrad_momentum": ["accumulators", "momenta"],
    "adam": ["momenta", "velocities"],
    "ftrl": ["accumulators", "linears"],
}


def init_state(kind: str, params: np.ndarray, initial_accumulator_value: float = 0.1, **_) -> Dict[str, np.ndarray]:
    """Returns {'params': ..., slot: ...} with the documented initial slot values."""
    params = np.asarray(params, np.float64)
    state = {"params": params.copy()}
    for slot in SLOTS[kind]:
        if slot == "accumulators" and kind in ("adagrad", "ftrl"):
            state[slot] = np.full_like(params, initial_accumulator_value)
        else:
            state[slot] = np.zeros_like(params)
    return state


def _clip(x: np.ndarray, lo: Optional[float], hi: Optional[float]) -> np.ndarray:
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x


def step(
    kind: str,
    state: Dict[str, np.ndarray],
    grads: np.ndarray,
    lr: float,
    *,
    clip_gradient_min: Optional[float] = None,
    clip_gradient_max: Optional[float] = None,
    clip_weight_min: Optional[float] = None,
    clip_weight_max: Optional[float] = None,
    weight_decay_factor: Optional[float] = None,
    multiply_weight_decay_factor_by_learning_rate: bool = False,
    # Adagrad / FTRL
    initial_accumulator_value: float = 0.1,
    # AdagradMomentum
    momentum: float = 0.0,
    use_nesterov: bool = False,
    exponent: float = 2.0,
    beta2: float = 1.0,
    epsilon: float = 1e-10,
    # Adam
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    adam_epsilon: float = 1e-7,
    sum_inside_sqrt: bool = True,
    # FTRL
    learning_rate_power: float = -0.5,
    l1: float = 0.0,
    l2: float = 0.0,
    beta: float = 0.0,
    multiply_linear_by_learning_rate: bool = False,
) -> Dict[str, np.ndarray]:
    """Applies one step; returns the new state (inputs are not modified)."""
    del initial_accumulator_value
    g = _clip(np.asarray(grads, np.float64), clip_gradient_min, clip_gradient_max)
    w = state["params"].copy()
    if weight_decay_factor:
        decay = weight_decay_factor * (lr if multiply_weight_decay_factor_by_learning_rate else 1.0)
        w = w - decay * w
    new = {}
    if kind == "sgd":
        w = w - lr * g
    elif kind == "adagrad":
        a = state["accumulators"] + g**2
        w = w - lr * g / np.sqrt(a)
        new["accumulators"] = a
    elif kind == "adagrad_momentum":
        a = state["accumulators"]
        a = a + g**2 if beta2 == 1 else beta2 * a + (1 - beta2) * g**2
        s = (a + epsilon) ** (-1.0 / exponent) * g
        m = momentum * state["momenta"] + s
        w = w - lr * (momentum * m + s if use_nesterov else m)
        new.update(accumulators=a, momenta=m)
    elif kind == "adam":
        m = beta_1 * state["momenta"] + (1 - beta_1) * g
        v = beta_2 * state["velocities"] + (1 - beta_2) * g**2
        denom = np.sqrt(v + adam_epsilon**2) if sum_inside_sqrt else np.sqrt(v) + adam_epsilon
        w = w - lr * m / denom
        new.update(momenta=m, velocities=v)
    elif kind == "ftrl":
        p = learning_rate_power
        n = state["accumulators"]
        z = state["linears"]
        n_new = n + g**2
        d = n_new ** (-p) - n ** (-p)
        if multiply_linear_by_learning_rate:
            z = z + lr * g - d * w
            w = (np.clip(z, -lr * l1, lr * l1) - z) / (n_new ** (-p) + 2 * lr * l2 + beta)
        else:
            z = z + g - d * w / lr
            w = (np.clip(z, -l1, l1) - z) / ((n_new ** (-p) + beta) / lr + 2 * l2)
        new.update(accumulators=n_new, linears=z)
    else:
        raise ValueError(kind)
    new["params"] = _clip(w, clip_weight_min, clip_weight_max)
    return new


def lazy_table_step(
    kind: str, table: Dict[str, np.ndarray], ids: np.ndarray, grads: np.ndarray, lr: float, lazy: bool = True, **hparams
) -> Dict[str, np.ndarray]:
    """One step on a full table: sums gradients per unique id, updates only those rows unless `lazy=False`.

    Args:
      table: full-table state {'params': [V, D], slot: [V, D]}.
      ids: [k] ids (duplicates allowed); grads: [k, D] per-occurrence gradients.
    """
    vocab = table["params"].shape[0]
    summed = np.zeros_like(table["params"])
    np.add.at(summed, np.asarray(ids), np.asarray(grads, np.float64))
    rows = np.arange(vocab) if not lazy else np.unique(ids)
    sub = {k: v[rows] for k, v in table.items()}
    updated = step(kind, sub, summed[rows], lr, **hparams)
    out = {k: v.copy() for k, v in table.items()}
    for k in out:
        out[k][rows] = updated[k]
    return out
