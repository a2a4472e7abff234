"""Reading and comparing the full state of an engine's tables (parameters and optimizer slots)."""

from typing import Any, Dict, Mapping

import numpy as np


def engine_state(engine: Any) -> Dict[str, Dict[str, np.ndarray]]:
    """`{table: {'params': [V, D], slot: [V, D]}}` of an `EmbeddingEngine` (eagerly)."""
    return {
        name: dict(params=t.read_full_table().numpy(), **{s: t.read_full_slot(s).numpy() for s in t.slot_names})
        for name, t in engine.tables.items()
    }


def assert_state_close(
    got: Mapping[str, Mapping[str, np.ndarray]], expected: Mapping[str, Mapping[str, np.ndarray]], tol: float = 1e-5
) -> None:
    """Every array of `expected` equals the one of `got` within `tol` (relative and absolute)."""
    for t in expected:
        for key in expected[t]:
            np.testing.assert_allclose(got[t][key], expected[t][key], rtol=tol, atol=tol, err_msg=f"{t}/{key}")
