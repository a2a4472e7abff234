"""The axes of the configuration space, which combinations are unsupported (and their errors), and the case runner.

`run_case` builds the case's program (`programs`), runs its mode and checks it against the oracles:
- TRAIN: every variable (tables, slots, dense `u`, `b`, `global_step`) equals the NumPy TPU reference after
  `STEPS` global batches, whatever the shards, loop size, input mode, partition strategy and input format
  (shard/loop/partition invariance follows: every case meets the same numbers);
- EVAL: `loss` and `mean_logit` equal the oracle's on the trained variables;
- PREDICT: one prediction per input row (13 rows: a padded last batch), equal to the oracle's forward pass;
- EXPORT: the SERVING signature, loaded in a fresh graph, gives the predictions of `predict`.
Unsupported combinations must raise one clear error (type and message given by `expected_error`).
"""

import collections
import functools
import random
import re
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Type

import numpy as np

from tests.conformance import covering, programs

AXES = collections.OrderedDict(
    mode=["train", "train_eval", "predict", "export"],
    input_config=["PER_HOST_V1", "PER_HOST_V2", "PER_SHARD_V1", "BROADCAST", "SLICED"],
    shards=[1, 2, 4],
    iterations_per_loop=[1, 3],
    returns=["dataset", "tensors"],
    labels=["tensor", "dict", "none"],
    id_format=["dense", "sparse", "ragged"],
    key_order=["ids_first_sorted", "dense_first_reversed"],
    embedding=[
        "none",
        "dict",
        "dict_weighted",
        "dict_sequence",
        "columns",
        "shared_columns",
        "weighted_columns",
        "sequence_columns",
    ],
    partition=["div", "mod"],
    combiner=["mean", "sum", "sqrtn"],
    optimizer=["sgd", "adagrad", "adagrad_momentum", "proximal_adagrad", "adam", "ftrl", "momentum", "rmsprop"],
    signature=[
        "features_labels_mode_params",
        "features_labels_mode_params_config",
        "features_mode_params",
        "features_labels_mode",
    ],
    predict_batch=["partial", "static"],
)
SEED = 14

# Axes whose value has no effect on some cases: pairs with them need not be covered there.
_EMBEDDING_ONLY = ("partition", "optimizer")
_WITHOUT_PREDICT = ("train", "train_eval")


def pair_required(axis1: str, value1: Any, axis2: str, value2: Any) -> bool:
    """Whether the pair (axis1=value1, axis2=value2) means something and so must be covered."""
    for (a, v), (other, _) in (((axis1, value1), (axis2, value2)), ((axis2, value2), (axis1, value1))):
        if a == "embedding" and v == "none" and other in _EMBEDDING_ONLY:
            return False
        if a == "embedding" and v in programs.SEQUENCE_KINDS and other == "combiner":
            return False
        if a == "mode" and v in _WITHOUT_PREDICT and other == "predict_batch":
            return False
    return True


# ---------------------------------------------------------------------------------------------------------------
# Unsupported combinations: the one clear error each must raise.

ErrorSpec = Tuple[Tuple[Type[BaseException], ...], str]
_DATASET_REQUIRED = r"`input_fn` must return a `?Dataset"


def unsupported_rule(case: Dict[str, Any]) -> Optional[str]:
    """The first unsupported-combination rule the case meets, in the order TPUEstimator checks them, or None.

    Order: the constructor (embeddings need PER_HOST_V1/V2), the training input (PER_HOST_V2 needs a Dataset;
    RaggedTensor features), the model_fn signature (when the graph is built), PREDICT's input (a Dataset).
    """
    if case["embedding"] != "none" and case["input_config"] in ("PER_SHARD_V1", "BROADCAST"):
        return "embedding_needs_per_host"
    if case["returns"] == "tensors" and case["input_config"] == "PER_HOST_V2":
        return "per_host_v2_needs_dataset"
    if case["id_format"] == "ragged":
        return "ragged_features"
    if case["signature"] == "features_labels_mode":
        return "model_fn_without_params"
    if case["signature"] == "features_mode_params" and case["labels"] != "none":
        return "model_fn_without_labels_but_labels"
    if case["returns"] == "tensors" and case["mode"] in ("predict", "export"):
        return "predict_needs_dataset"
    return None


_ERRORS = {
    "embedding_needs_per_host": (
        (ValueError,),
        "Only PER_HOST_V1 and PER_HOST_V2 is supported when using TPU Embedding",
    ),
    "per_host_v2_needs_dataset": ((TypeError,), "`input_fn` must return a `Dataset` for the PER_HOST_V2"),
    "ragged_features": ((ValueError,), "must have static shape"),
    "model_fn_without_params": ((ValueError,), "params"),
    "model_fn_without_labels_but_labels": ((ValueError,), "labels"),
    "predict_needs_dataset": ((TypeError,), "For mode PREDICT, `input_fn` must return `Dataset`"),
}


# A supported program with every axis at a plain value: tests name only the axes they vary.
BASE_CASE = dict(
    mode="train",
    input_config="PER_HOST_V1",
    shards=2,
    iterations_per_loop=1,
    returns="dataset",
    labels="tensor",
    id_format="dense",
    key_order="ids_first_sorted",
    embedding="none",
    partition="div",
    combiner="mean",
    optimizer="adagrad",
    signature="features_labels_mode_params",
    predict_batch="partial",
)


def expected_error(case: Dict[str, Any]) -> Optional[ErrorSpec]:
    """(exception types, regex of the message) for an unsupported combination; None for a supported one.

    The rules are upstream's (TPUEstimator 2.15) plus RaggedTensor features, which no TPUEstimator input path
    carries (the error names the tensor; convert ragged ids with `.to_sparse()`).
    """
    rule = unsupported_rule(case)
    return None if rule is None else _ERRORS[rule]


def known_failure(case: Dict[str, Any]) -> Optional[str]:
    """Why a case fails today (a finding, kept as strict xfail until fixed), or None.

    No generated case reaches a known bug today: the findings of issue 14 are fixed (their regression tests are plain
    tests in test_regressions.py). A new finding gets a string constant here, returned for the cases it reaches.
    """
    del case
    return None


def working_case(base: Dict[str, Any], **overrides: Any) -> Dict[str, Any]:
    """`base` with `overrides`: a case of every axis that must work (no expected error, no known failure)."""
    case = dict(base, **overrides)
    assert set(case) == set(AXES)
    assert expected_error(case) is None and known_failure(case) is None
    return case


def is_supported(case: Dict[str, Any]) -> bool:
    return expected_error(case) is None


def normalize(case: Dict[str, Any]) -> Dict[str, Any]:
    """The case with axes that have no effect on it set to their first value (so equal programs compare equal)."""
    case = dict(case)
    if case["embedding"] == "none":
        case.update(partition=AXES["partition"][0], optimizer=AXES["optimizer"][0])
    if case["embedding"] in programs.SEQUENCE_KINDS:
        case["combiner"] = AXES["combiner"][0]
    if case["mode"] in _WITHOUT_PREDICT:
        case["predict_batch"] = AXES["predict_batch"][0]
    return case


# Random completions tried per pair to find a covering case that contains it (normalized cases are rare).
COVERING_ATTEMPTS = 4000


def is_covering_case(case: Dict[str, Any]) -> bool:
    """Whether the pairwise array may use the case: supported and normalized, so that a pair is only covered by a
    case where both values take effect (a partition strategy with embeddings, the predict batch when predicting)."""
    return is_supported(case) and case == normalize(case)


def full_cases() -> Iterator[Dict[str, Any]]:
    """The whole product of the axes, without duplicates that differ only in axes without effect."""
    for case in covering.full_product(AXES):
        if case == normalize(case):
            yield case


def sample_cases(count: int, seed: int = SEED) -> List[Dict[str, Any]]:
    """`count` distinct cases drawn uniformly (seeded) from the product, after normalization."""
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < count:
        case = normalize({name: rng.choice(values) for name, values in AXES.items()})
        key = tuple(case.values())
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out


def select(level: str) -> Iterable[Dict[str, Any]]:
    """The cases of a conformance level: 'pairwise' (default), 'full' or 'sample:N'."""
    if level == "full":
        return full_cases()
    if level.startswith("sample:"):
        return sample_cases(int(level.split(":", 1)[1]))
    return covering_cases()


@functools.lru_cache(maxsize=None)
def _covering_cases() -> Tuple[Tuple[Tuple[str, Any], ...], ...]:
    supported = covering.pairwise(
        AXES, seed=SEED, valid=is_covering_case, pair_required=pair_required, attempts=COVERING_ATTEMPTS
    )
    return tuple(tuple(case.items()) for case in supported + unsupported_cases())


def covering_cases() -> List[Dict[str, Any]]:
    """The default subset: a pairwise covering array of the supported cases, plus per unsupported rule a pairwise
    array of (mode, input_config) among the cases the rule refuses."""
    return [dict(case) for case in _covering_cases()]


def unsupported_cases() -> List[Dict[str, Any]]:
    """Per unsupported rule, a pairwise array of (mode, input_config) among the cases whose first rule it is and
    that no known bug reaches first (so each case asserts that rule's error)."""
    cases = []
    for index, name in enumerate(_ERRORS):

        def valid(case, name=name):
            return unsupported_rule(case) == name and known_failure(case) is None

        def required(a1, v1, a2, v2):
            return {a1, a2} == {"mode", "input_config"}

        cases += covering.pairwise(AXES, seed=SEED + 1 + index, valid=valid, pair_required=required, attempts=2000)
    return cases


def case_id(case: Dict[str, Any]) -> str:
    short = {"features_labels_mode_params": "flmp", "features_labels_mode_params_config": "flmpc"}
    short.update(features_mode_params="fmp", features_labels_mode="flm", ids_first_sorted="ids1st")
    short.update(dense_first_reversed="dense1st")
    parts = [str(short.get(case[name], case[name])) for name in AXES]
    return "-".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# Running a case against the oracles.


def _check_trained_variables(case: Dict[str, Any], estimator: Any, expected: Dict[str, Any]) -> None:
    names = estimator.get_variable_names()
    assert estimator.get_variable_value("global_step") == programs.STEPS
    np.testing.assert_allclose(estimator.get_variable_value("u"), expected["u"], atol=2e-5, err_msg="u")
    np.testing.assert_allclose(estimator.get_variable_value("b"), expected["b"], atol=2e-5, err_msg="b")
    for table, variable in programs.table_variable_names(case, names).items():
        state = expected["tables"][table]
        np.testing.assert_allclose(estimator.get_variable_value(variable), state["params"], atol=2e-5, err_msg=variable)
        if case["embedding"] == "none":
            continue
        for slot, slot_variable in programs.slot_variable_names(case, variable).items():
            assert slot_variable in names, "slot {} missing among {}".format(slot_variable, names)
            np.testing.assert_allclose(
                estimator.get_variable_value(slot_variable), state[slot], atol=2e-5, err_msg=slot_variable
            )


def run_supported(case: Dict[str, Any], model_dir: str) -> Dict[str, Any]:
    """Runs a supported case's mode and asserts every oracle; returns what it observed."""
    estimator = programs.make_estimator(case, model_dir)
    estimator.train(programs.make_input_fn(case, "train"), max_steps=programs.STEPS)
    expected = programs.train_oracle(case)
    _check_trained_variables(case, estimator, expected)
    observed: Dict[str, Any] = {}
    if case["mode"] == "train_eval":
        metrics = estimator.evaluate(programs.make_input_fn(case, "eval"), steps=programs.EVAL_STEPS)
        want = programs.eval_oracle(case, expected)
        np.testing.assert_allclose(metrics["loss"], want["loss"], rtol=1e-4, err_msg="eval loss")
        np.testing.assert_allclose(metrics["mean_logit"], want["mean_logit"], rtol=1e-4, atol=1e-6, err_msg="mean")
        observed["metrics"] = metrics
    if case["mode"] in ("predict", "export"):
        predictions = np.array([p["logit"] for p in estimator.predict(programs.make_input_fn(case, "predict"))])
        rows = np.arange(programs.predict_rows(case))
        want, _ = programs.forward(case, expected, rows)
        assert predictions.shape == rows.shape
        np.testing.assert_allclose(predictions, want, atol=2e-5, err_msg="predictions")
        observed["predictions"] = predictions
    if case["mode"] == "export":
        export_dir = estimator.export_saved_model(
            str(model_dir) + "_export", programs.serving_input_receiver_fn(case)
        ).decode()
        served = programs.serve(export_dir, case, np.arange(programs.predict_rows(case)))
        np.testing.assert_allclose(served, observed["predictions"], atol=1e-5, err_msg="export != predict")
    return observed


def run_case(case: Dict[str, Any], model_dir: str) -> None:
    """Runs a case: a supported one must meet the oracles, an unsupported one must raise its one clear error."""
    error = expected_error(case)
    if error is None:
        run_supported(case, model_dir)
        return
    error_types, pattern = error
    try:
        run_supported(case, model_dir)
    except error_types as exc:
        assert re.search(pattern, str(exc)), "{}: {!r} does not match {!r}".format(case_id(case), str(exc), pattern)
        return
    raise AssertionError("{}: expected {}({!r}), nothing raised".format(case_id(case), error_types, pattern))
