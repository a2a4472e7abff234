"""The pairwise generator: every required, feasible pair is covered, validity holds, the seed fixes the cases."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conformance import cases, covering


def _all_pairs(case_list, axes):
    pairs = set()
    for case in case_list:
        for a, b in itertools.combinations(axes, 2):
            pairs.add(((a, case[a]), (b, case[b])))
    return pairs


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=4), min_size=2, max_size=5),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_every_pair_of_values_meets_in_some_case(sizes, seed):
    axes = {"axis{}".format(i): list(range(n)) for i, n in enumerate(sizes)}
    generated = covering.pairwise(axes, seed=seed)
    expected = {((a, va), (b, vb)) for a, b in itertools.combinations(axes, 2) for va in axes[a] for vb in axes[b]}
    assert _all_pairs(generated, axes) == expected
    # Far fewer cases than the product once there are several axes (the point of a covering array).
    product = 1
    for n in sizes:
        product *= n
    assert len(generated) <= product


def test_constraints_are_respected_and_feasible_pairs_still_covered():
    axes = {"a": [0, 1, 2], "b": [0, 1, 2], "c": [0, 1]}
    valid = lambda case: not (case["a"] == 2 and case["b"] == 2)  # noqa: E731
    generated = covering.pairwise(axes, seed=3, valid=valid)
    assert all(valid(case) for case in generated)
    assert covering.uncovered_pairs(generated, axes, valid, lambda *args: True) == set()
    assert (("a", 2), ("b", 2)) not in _all_pairs(generated, axes)


def test_the_conformance_covering_array_covers_every_required_pair_with_a_fixed_seed():
    first, second = cases.covering_cases(), cases.covering_cases()
    assert first == second
    supported = [case for case in first if cases.is_supported(case)]
    assert all(cases.is_covering_case(case) for case in supported)
    uncovered = covering.uncovered_pairs(
        supported, cases.AXES, cases.is_covering_case, cases.pair_required, attempts=cases.COVERING_ATTEMPTS
    )
    assert uncovered == set()
    # Every unsupported rule has cases, and each case expects an error.
    unsupported = [case for case in first if not cases.is_supported(case)]
    assert {cases.expected_error(case)[1] for case in unsupported} == {
        cases.expected_error(case)[1] for case in cases.unsupported_cases()
    }
    assert len({cases.expected_error(case)[1] for case in unsupported}) == 6
