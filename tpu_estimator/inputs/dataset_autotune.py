"""No idle tf.data autotuner on the input iterators: it can hold a `train()` for seconds after its last step.

With autotuning on (tf.data's default), every iterator runs a model thread that wakes to re-tune after periods that
double (20 ms, 40 ms, ..., 10 s, 20 s, 41 s, as `TF_CPP_VMODULE=model=2` logs them). Destroying the iterator
(the session's close, at the end of every `train()`, `evaluate()` and `predict()`) cancels it and waits for that
thread; the cancellation's wake-up can be missed (the thread checks "cancelled?" before the cancellation is marked
done, then sleeps the rest of its period), so the close waits until the period ends: 11-16 s after a 25-30 s
`train()` (issue 38: nearly every run of upstream's CPU path on a quiet machine, about half of ours, depending on
which thread the scheduler runs first).

A pipeline written with sequential transformations and fixed `prefetch` buffers gets `autotune.enabled=False` on its
iterator: no model thread, nothing to wait for, the same elements in the same order. The one thing the tuner tunes
in such a pipeline is the parallelism of the maps that tf.data's own `map_parallelization` rewrite makes parallel;
without it they run at tf.data's default parallelism (issue 38's pipeline: the tuner chose 2 on 2 cores; read alone,
the pipeline ran at 29-32k examples/s without the tuner against 13-17k with it). A pipeline with anything the user
asked to tune or that the tuner injects (an `AUTOTUNE` argument, a parallel or interleaved transformation) or whose
autotune options the user set keeps autotuning as it is.
"""

from typing import Any

import tensorflow as tf
from tensorflow.core.framework import dataset_options_pb2

from tpu_estimator import _tf_internal

# Dataset ops whose argument of this name takes `tf.data.AUTOTUNE` (-1).
_AUTOTUNE_ARGUMENTS = ("num_parallel_calls", "buffer_size", "cycle_length", "block_length", "num_parallel_batches")
# Op types the autotuner tunes or puts a prefetch after, even with fixed arguments; and ops whose functions build
# datasets of their own (their arguments are not in this graph).
_TUNED_OP_MARKERS = ("Parallel", "Interleave", "MapAndBatch", "FlatMap", "Snapshot", "DataService")


def has_work_for_autotune(dataset: Any) -> bool:
    """Whether `dataset` (graph mode) asks for tuning as written, or the user set its autotune options.

    Args:
      dataset: a `tf.data.Dataset` built in the current graph.

    Returns:
      False only for pipelines written with sequential transformations and fixed arguments whose options leave
      autotuning at its default; True otherwise (including any dataset this check cannot read).
    """
    variant = _tf_internal.dataset_variant(dataset)
    if variant is None or not hasattr(variant, "op"):
        return True
    seen, stack = set(), [variant.op]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if any(marker in op.type for marker in _TUNED_OP_MARKERS):
            return True
        if op.type == "OptionsDataset" and _sets_autotune(op):
            return True
        if op.type.endswith("Dataset") or "DatasetV" in op.type:
            for name, tensor in _named_inputs(op):
                if name in _AUTOTUNE_ARGUMENTS and _constant_value(tensor) == -1:
                    return True
        stack.extend(t.op for t in op.inputs)
    return False


def without_idle_autotune(dataset: Any) -> Any:
    """`dataset` with autotuning off when the autotuner has no work in it (`has_work_for_autotune`), else itself."""
    if has_work_for_autotune(dataset):
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def _sets_autotune(op: tf.Operation) -> bool:
    options = dataset_options_pb2.Options()
    try:
        options.ParseFromString(op.get_attr("serialized_options"))
    except Exception:
        return True
    return options.HasField("autotune_options") and options.autotune_options.ListFields() != []


def _named_inputs(op: tf.Operation):
    """`(argument name, tensor)` for the op's single-tensor arguments before and after its list arguments."""
    try:
        arguments = list(op.op_def.input_arg)
    except Exception:
        return []
    is_list = [bool(a.number_attr or a.type_list_attr) for a in arguments]
    inputs = list(op.inputs)
    if True not in is_list:
        return list(zip([a.name for a in arguments], inputs))
    first, last = is_list.index(True), len(is_list) - 1 - is_list[::-1].index(True)
    head = [(a.name, t) for a, t in zip(arguments[:first], inputs)]
    tail_arguments = arguments[last + 1 :]
    tail_inputs = inputs[len(inputs) - len(tail_arguments) :] if tail_arguments else []
    return head + [(a.name, t) for a, t in zip(tail_arguments, tail_inputs)]


def _constant_value(tensor: tf.Tensor):
    if tensor.op.type != "Const":
        return None
    try:
        value = tf.make_ndarray(tensor.op.get_attr("value"))
    except Exception:
        return None
    return value.item() if value.size == 1 else None
