"""A seeded greedy pairwise (2-way) covering array over named axes, with validity constraints.

Every pair of values of two different axes that occurs in at least one valid case occurs in at least one generated
case. Greedy in the AETG style: each new case starts from an uncovered pair and fills the other axes one at a time
with the value that covers the most still-uncovered pairs (ties broken by the seeded RNG), keeping only valid cases.
"""

import itertools
import random
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

Case = Dict[str, Any]
Pair = Tuple[Tuple[str, Any], Tuple[str, Any]]


def _pairs_of(case: Mapping[str, Any], names: Sequence[str]) -> Iterator[Pair]:
    for first, second in itertools.combinations(names, 2):
        yield (first, case[first]), (second, case[second])


def _random_case(axes: Mapping[str, Sequence[Any]], rng: random.Random) -> Case:
    return {name: rng.choice(list(values)) for name, values in axes.items()}


def _feasible_pairs(
    axes: Mapping[str, Sequence[Any]],
    valid: Callable[[Case], bool],
    pair_required: Callable[[str, Any, str, Any], bool],
    rng: random.Random,
    attempts: int,
) -> Set[Pair]:
    """The required pairs that some valid case contains (searched by random completion of each pair)."""
    names = list(axes)
    feasible = set()
    for first, second in itertools.combinations(names, 2):
        for v1 in axes[first]:
            for v2 in axes[second]:
                if not pair_required(first, v1, second, v2):
                    continue
                for _ in range(attempts):
                    case = _random_case(axes, rng)
                    case[first], case[second] = v1, v2
                    if valid(case):
                        feasible.add(((first, v1), (second, v2)))
                        break
    return feasible


def pairwise(
    axes: Mapping[str, Sequence[Any]],
    seed: int = 0,
    valid: Optional[Callable[[Case], bool]] = None,
    pair_required: Optional[Callable[[str, Any, str, Any], bool]] = None,
    candidates: int = 20,
    attempts: int = 400,
) -> List[Case]:
    """Returns valid cases (dicts axis -> value) in which every required, feasible pair of axis values occurs.

    Args:
      axes: ordered mapping axis name -> its values.
      seed: seed of the tie-breaking RNG; the same seed gives the same cases.
      valid: predicate on a full case; invalid cases are never returned. Default: every case is valid.
      pair_required: predicate (axis, value, axis, value) -> whether the pair must be covered (False for pairs
        whose combination has no meaning, e.g. an optimizer without embeddings). Default: all pairs.
      candidates: candidate cases built per chosen case (the best one is kept).
      attempts: random completions tried per pair to decide whether a valid case contains it.

    Returns:
      The covering cases, in generation order.
    """
    valid = valid or (lambda case: True)
    pair_required = pair_required or (lambda *args: True)
    rng = random.Random(seed)
    names = list(axes)
    uncovered = _feasible_pairs(axes, valid, pair_required, rng, attempts)
    cases: List[Case] = []
    while uncovered:
        best, best_gain = None, 0
        for _ in range(candidates):
            (a1, v1), (a2, v2) = rng.choice(sorted(uncovered, key=repr))
            case = {a1: v1, a2: v2}
            rest = [name for name in names if name not in case]
            rng.shuffle(rest)
            for name in rest:
                scored = []
                for value in axes[name]:
                    trial = dict(case, **{name: value})
                    gain = sum(
                        1
                        for other, other_value in trial.items()
                        if other != name
                        and (
                            ((other, other_value), (name, value)) in uncovered
                            or ((name, value), (other, other_value)) in uncovered
                        )
                    )
                    scored.append((gain, rng.random(), value))
                case[name] = max(scored, key=lambda s: (s[0], s[1]))[2]
            case = {name: case[name] for name in names}
            if not valid(case):
                continue
            gain = sum(1 for pair in _pairs_of(case, names) if pair in uncovered)
            if gain > best_gain:
                best, best_gain = case, gain
        if best is None:  # the greedy fill kept producing invalid cases: complete the pair at random instead
            (a1, v1), (a2, v2) = rng.choice(sorted(uncovered, key=repr))
            for _ in range(attempts):
                case = _random_case(axes, rng)
                case[a1], case[a2] = v1, v2
                if valid(case):
                    best = case
                    break
            else:
                raise AssertionError("no valid case contains {}={!r}, {}={!r}".format(a1, v1, a2, v2))
        cases.append(best)
        uncovered -= set(_pairs_of(best, names))
    return cases


def uncovered_pairs(
    cases: Sequence[Case],
    axes: Mapping[str, Sequence[Any]],
    valid: Callable[[Case], bool],
    pair_required: Callable[[str, Any, str, Any], bool],
    seed: int = 1,
    attempts: int = 400,
) -> Set[Pair]:
    """Required, feasible pairs that no case in `cases` contains (empty for a covering array)."""
    feasible = _feasible_pairs(axes, valid, pair_required, random.Random(seed), attempts)
    covered = set()
    for case in cases:
        covered |= set(_pairs_of(case, list(axes)))
    return feasible - covered


def full_product(axes: Mapping[str, Sequence[Any]], valid: Optional[Callable[[Case], bool]] = None) -> Iterator[Case]:
    """Every combination of axis values (that `valid` accepts), in axis order."""
    names = list(axes)
    for values in itertools.product(*(axes[name] for name in names)):
        case = dict(zip(names, values))
        if valid is None or valid(case):
            yield case
