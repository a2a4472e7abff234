"""NumPy reference of training embedding tables from id features ("train the tables"), docs/SEMANTICS.md 9.

One step: every feature's activations are computed from the parameters BEFORE the step (`combiners.combine`);
`dL/da` comes from the model; every occurrence of an id (output row `b`, weight `w`, in any feature reading the
table) contributes `w * scale(row b) * dL/da[b]`; the contributions are summed per unique id, and the optimizer
rule is applied ONCE per unique id and step (`optimizers.lazy_table_step`).
"""

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tests.oracles import combiners, optimizers

Rows = Sequence[Tuple[Sequence[int], Sequence[float]]]  # per output row: (ids, weights)
State = Dict[str, np.ndarray]  # {'params': [V, D], slot: [V, D]}


def activations(
    params: Mapping[str, np.ndarray],
    samples: Mapping[str, Rows],
    table_of: Mapping[str, str],
    combiner_of: Mapping[str, str],
) -> Dict[str, np.ndarray]:
    """`{feature: [rows, dim]}` activations.

    Args:
      params: `{table: [V, D]}`.
      samples: `{feature: [(ids, weights)] per output row}`.
      table_of: `{feature: table}`.
      combiner_of: `{table: 'sum' | 'mean' | 'sqrtn'}`.
    """
    out = {}
    for feature, table in table_of.items():
        rows = samples[feature]
        out[feature] = combiners.combine(
            [ids for ids, _ in rows], [w for _, w in rows], combiner_of[table], params[table]
        )
    return out


def train_table(
    kind: str,
    initial: np.ndarray,
    steps: Sequence[Tuple[np.ndarray, np.ndarray]],
    lr: float,
    lazy: bool = True,
    **hparams: Any,
) -> State:
    """The state of one table after steps of per-occurrence gradients `[(ids [k], grads [k, D])]`."""
    state = optimizers.init_state(kind, initial, **hparams)
    for ids, grads in steps:
        state = optimizers.lazy_table_step(kind, state, ids, grads, lr, lazy=lazy, **hparams)
    return state


def train_tables(
    kind: str,
    initial: Mapping[str, np.ndarray],
    table_of: Mapping[str, str],
    combiner_of: Mapping[str, str],
    steps: Sequence[Mapping[str, Rows]],
    activation_gradients: Callable[[int, Dict[str, np.ndarray]], Mapping[str, Optional[np.ndarray]]],
    lr: float,
    lazy: bool = True,
    multiplier: float = 1.0,
    stale: bool = False,
    **hparams: Any,
) -> Dict[str, State]:
    """Full-table states `{table: {'params': ..., slot: ...}}` after training.

    Args:
      kind: optimizer kind (a key of `optimizers.SLOTS`).
      initial: `{table: [V, D]}` initial parameters.
      table_of: `{feature: table}`.
      combiner_of: `{table: combiner}`.
      steps: per step, `{feature: [(ids, weights)] per output row}`.
      activation_gradients: `(step index, {feature: activations}) -> {feature: dL/da}`; a missing or None entry
        means the feature contributes nothing to its table's gradient.
      lr: learning rate.
      lazy: update only the rows of this step's ids (False: every row, e.g. non-lazy Adam).
      multiplier: factor on every gradient contribution.
      stale: pipelined updates: step t's activations are computed before step t-1's update is applied; the last
        update is applied at the end.
      **hparams: optimizer hyper-parameters (`optimizers.step` keywords; `initial_accumulator_value` also sets
        the initial slots).
    """
    state = {t: optimizers.init_state(kind, initial[t], **hparams) for t in initial}
    pending: Optional[Dict[str, Tuple[List[int], List[np.ndarray]]]] = None

    def apply(occurrences: Dict[str, Tuple[List[int], List[np.ndarray]]]) -> None:
        for t, (ids, grads) in occurrences.items():
            if ids:
                state[t] = optimizers.lazy_table_step(
                    kind, state[t], np.array(ids), np.array(grads), lr, lazy=lazy, **hparams
                )

    for step, samples in enumerate(steps):
        acts = activations({t: s["params"] for t, s in state.items()}, samples, table_of, combiner_of)
        grads = activation_gradients(step, acts)
        occurrences: Dict[str, Tuple[List[int], List[np.ndarray]]] = {t: ([], []) for t in state}
        for feature, t in table_of.items():
            grad = grads.get(feature)
            if grad is None:
                continue
            for b, (ids, weights) in enumerate(samples[feature]):
                for i, w in zip(ids, weights):
                    occurrences[t][0].append(i)
                    occurrences[t][1].append(
                        multiplier * w * combiners.combiner_scale(weights, combiner_of[t]) * grad[b]
                    )
        if stale:
            if pending is not None:
                apply(pending)
            pending = occurrences
        else:
            apply(occurrences)
    if pending is not None:
        apply(pending)
    return state
