"""NumPy reference of the combiners (docs/SEMANTICS.md 9): rows of ids and weights -> activations, and back.

An output row holds ids `i_k` with weights `w_k`; its activation is `scale * sum_k w_k * table[i_k]` with `scale`
1 (sum), `1 / sum(w)` (mean) or `1 / sqrt(sum(w^2))` (sqrtn); an empty row gives zeros.
"""

from typing import Any, Sequence

import numpy as np


def combiner_scale(weights: Sequence[float], combiner: str) -> float:
    """The factor a combiner applies to `sum(w * row)` over one output row."""
    w = np.asarray(weights, np.float64)
    if combiner == "sum":
        return 1.0
    if combiner == "mean":
        return 1.0 / w.sum()
    return 1.0 / np.sqrt((w**2).sum())


def combine(
    ids: Sequence[Sequence[int]], weights: Sequence[Sequence[float]], combiner: str, table: np.ndarray
) -> np.ndarray:
    """`[rows, dim]` float64 activations of the rows `ids[r]` weighted by `weights[r]`."""
    out = np.zeros((len(ids), table.shape[1]), np.float64)
    for r, (row_ids, row_w) in enumerate(zip(ids, weights)):
        if len(row_ids):
            total = sum(w * table[i].astype(np.float64) for i, w in zip(row_ids, row_w))
            out[r] = combiner_scale(row_w, combiner) * total
    return out


def sequence(
    ids: Sequence[Sequence[int]], weights: Sequence[Sequence[float]], length: int, table: np.ndarray
) -> np.ndarray:
    """`[rows, length, dim]` activations of a sequence feature: position p of row r is `w * table[id]`, zero-padded."""
    out = np.zeros((len(ids), length, table.shape[1]), np.float64)
    for r, (row_ids, row_w) in enumerate(zip(ids, weights)):
        for p, (i, w) in enumerate(zip(row_ids[:length], row_w[:length])):
            out[r, p] = w * table[i]
    return out


def quantize(x: np.ndarray, quantization: Any) -> np.ndarray:
    """Simulated quantization: clip to `[lower, upper]`, round to the nearest of `num_buckets` levels."""
    x = np.clip(x, quantization.lower, quantization.upper)
    quantum = (quantization.upper - quantization.lower) / (quantization.num_buckets - 1)
    return np.floor((x - quantization.lower) / quantum + 0.5) * quantum + quantization.lower


def backprop(
    ids: Sequence[Sequence[int]], weights: Sequence[Sequence[float]], combiner: str, grads: np.ndarray, vocab: int
) -> np.ndarray:
    """`[vocab, dim]` d loss / d table for `loss = sum(activations * grads)`."""
    out = np.zeros((vocab, grads.shape[-1]), np.float64)
    for r, (row_ids, row_w) in enumerate(zip(ids, weights)):
        if not len(row_ids):
            continue
        scale = combiner_scale(row_w, combiner)
        for i, w in zip(row_ids, row_w):
            out[i] += w * scale * grads[r]
    return out
