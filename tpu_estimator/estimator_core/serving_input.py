"""Serving input receivers: the placeholders a SavedModel is fed and the features `model_fn` sees."""

import collections
from typing import Any, Callable, Dict, Optional

import tensorflow as tf

from tpu_estimator.estimator_core._tf_internal import (
    SINGLE_FEATURE_DEFAULT_NAME,
    SINGLE_LABEL_DEFAULT_NAME,
    SINGLE_RECEIVER_DEFAULT_NAME,
)
from tpu_estimator.estimator_core.inputs import parse_input_fn_result

_SINGLE_TENSOR_DEFAULT_NAMES = {
    "feature": SINGLE_FEATURE_DEFAULT_NAME,
    "label": SINGLE_LABEL_DEFAULT_NAME,
    "receiver_tensor": SINGLE_RECEIVER_DEFAULT_NAME,
    "receiver_tensors_alternative": SINGLE_RECEIVER_DEFAULT_NAME,
}


def wrap_and_check_input_tensors(tensors, field_name: str, allow_int_keys: bool = False) -> Dict[Any, Any]:
    """`tensors` as a dict (a single tensor gets the default name for `field_name`), each key and value checked.

    Raises:
      ValueError: `tensors` is None, a key is not a string (or int when allowed), or a value is not a tensor.
    """
    if tensors is None:
        raise ValueError("{}s must be defined.".format(field_name))
    if not isinstance(tensors, dict):
        tensors = {_SINGLE_TENSOR_DEFAULT_NAMES[field_name]: tensors}
    for name, tensor in tensors.items():
        _check_tensor_key(name, error_label=field_name, allow_ints=allow_int_keys)
        _check_tensor(tensor, name, error_label=field_name)
    return tensors


def _check_tensor(tensor, name, error_label: str = "feature") -> None:
    if isinstance(tensor, (tf.Tensor, tf.sparse.SparseTensor, tf.RaggedTensor)):
        return
    fmt_name = " {}".format(name) if name else ""
    error = ValueError("{}{} must be a Tensor, SparseTensor, or RaggedTensor.".format(error_label, fmt_name))
    # Objects that wrap a tensor (e.g. variables) are accepted when they convert to one.
    if not hasattr(tensor, "tensor"):
        raise error
    try:
        tf.convert_to_tensor(tensor)
    except TypeError:
        raise error


def _check_tensor_key(name, error_label: str = "feature", allow_ints: bool = False) -> None:
    if isinstance(name, str):
        return
    if not allow_ints:
        raise ValueError("{} keys must be strings: {}.".format(error_label, name))
    if not isinstance(name, int):
        raise ValueError("{} keys must be strings or ints: {}.".format(error_label, name))


class ServingInputReceiver(
    collections.namedtuple("ServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives"])
):
    """What a `serving_input_receiver_fn` returns: features for `model_fn` and the tensors a request feeds.

    Args:
      features: a tensor or dict of tensors passed to `model_fn` (a single tensor becomes `{'feature': t}`).
      receiver_tensors: the tensor or dict of tensors the serving signatures take (a single one is `input`).
      receiver_tensors_alternatives: dict of alternative name to receiver tensors, one more signature each.

    Raises:
      ValueError: missing or non-tensor features/receiver tensors, or alternatives that are not a dict.
    """

    def __new__(cls, features, receiver_tensors, receiver_tensors_alternatives=None):
        features = wrap_and_check_input_tensors(features, "feature", allow_int_keys=True)
        receiver_tensors = wrap_and_check_input_tensors(receiver_tensors, "receiver_tensor")
        if receiver_tensors_alternatives is not None:
            if not isinstance(receiver_tensors_alternatives, dict):
                raise ValueError(
                    "receiver_tensors_alternatives must be a dict: {}.".format(receiver_tensors_alternatives)
                )
            for alternative_name, alternative in receiver_tensors_alternatives.items():
                receiver_tensors_alternatives[alternative_name] = wrap_and_check_input_tensors(
                    alternative, "receiver_tensors_alternative"
                )
        return super(ServingInputReceiver, cls).__new__(
            cls,
            features=features,
            receiver_tensors=receiver_tensors,
            receiver_tensors_alternatives=receiver_tensors_alternatives,
        )


class TensorServingInputReceiver(
    collections.namedtuple(
        "TensorServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives"]
    )
):
    """A `ServingInputReceiver` whose features are one tensor, passed to `model_fn` as that tensor (not a dict).

    Raises:
      ValueError: `features` is missing or not a tensor, or invalid receiver tensors.
    """

    def __new__(cls, features, receiver_tensors, receiver_tensors_alternatives=None):
        if features is None:
            raise ValueError("features must be defined.")
        _check_tensor(features, None)
        receiver = ServingInputReceiver(
            features=features,
            receiver_tensors=receiver_tensors,
            receiver_tensors_alternatives=receiver_tensors_alternatives,
        )
        return super(TensorServingInputReceiver, cls).__new__(
            cls,
            features=receiver.features[SINGLE_FEATURE_DEFAULT_NAME],
            receiver_tensors=receiver.receiver_tensors,
            receiver_tensors_alternatives=receiver.receiver_tensors_alternatives,
        )


class UnsupervisedInputReceiver(ServingInputReceiver):
    """Features and receiver tensors for exporting TRAIN/EVAL graphs of models without labels."""

    def __new__(cls, features, receiver_tensors):
        return super(UnsupervisedInputReceiver, cls).__new__(
            cls, features=features, receiver_tensors=receiver_tensors, receiver_tensors_alternatives=None
        )


class SupervisedInputReceiver(
    collections.namedtuple("SupervisedInputReceiver", ["features", "labels", "receiver_tensors"])
):
    """Features, labels and receiver tensors, for exporting TRAIN/EVAL graphs.

    Raises:
      ValueError: missing or non-tensor features, labels or receiver tensors.
    """

    def __new__(cls, features, labels, receiver_tensors):
        wrap_and_check_input_tensors(features, "feature", allow_int_keys=True)
        wrap_and_check_input_tensors(labels, "label", allow_int_keys=True)
        receiver_tensors = wrap_and_check_input_tensors(receiver_tensors, "receiver_tensor")
        return super(SupervisedInputReceiver, cls).__new__(
            cls, features=features, labels=labels, receiver_tensors=receiver_tensors
        )


def build_parsing_serving_input_receiver_fn(
    feature_spec: Dict[str, Any], default_batch_size: Optional[int] = None
) -> Callable[[], ServingInputReceiver]:
    """A `serving_input_receiver_fn` that parses serialized `tf.Example`s fed as `examples`.

    Args:
      feature_spec: dict of feature name to `FixedLenFeature`/`VarLenFeature`/... (as for `parse_example`).
      default_batch_size: the batch dimension of the placeholder (None: any).

    Returns:
      A function returning a `ServingInputReceiver` with receiver tensor `examples` (placeholder
      `input_example_tensor`).
    """

    def serving_input_receiver_fn():
        serialized = tf.compat.v1.placeholder(
            dtype=tf.dtypes.string, shape=[default_batch_size], name="input_example_tensor"
        )
        features = tf.compat.v1.io.parse_example(serialized, feature_spec)
        return ServingInputReceiver(features, {"examples": serialized})

    return serving_input_receiver_fn


def _placeholder_from_tensor(t, default_batch_size: Optional[int] = None):
    shape = tf.TensorShape([default_batch_size]).concatenate(t.get_shape()[1:])
    try:
        name = t.op.name
    except AttributeError:  # Eager tensors have no op; the placeholder gets a default name.
        name = None
    return tf.compat.v1.placeholder(dtype=t.dtype, shape=shape, name=name)


def _placeholders_from_dict(tensors: Dict[str, Any], default_batch_size: Optional[int] = None) -> Dict[str, Any]:
    return {name: _placeholder_from_tensor(t, default_batch_size) for name, t in tensors.items()}


def build_raw_serving_input_receiver_fn(
    features: Dict[str, Any], default_batch_size: Optional[int] = None
) -> Callable[[], ServingInputReceiver]:
    """A `serving_input_receiver_fn` feeding raw tensors: one placeholder per feature, named and shaped like it.

    Args:
      features: dict of name to a tensor whose dtype and (non-batch) shape the placeholder takes.
      default_batch_size: the batch dimension of the placeholders (None: any).

    Returns:
      A function returning a `ServingInputReceiver` whose features are its receiver tensors.
    """

    def serving_input_receiver_fn():
        receiver_tensors = _placeholders_from_dict(features, default_batch_size)
        return ServingInputReceiver(receiver_tensors, receiver_tensors)

    return serving_input_receiver_fn


def build_raw_supervised_input_receiver_fn(features, labels, default_batch_size: Optional[int] = None):
    """A receiver function with placeholders for raw features and labels (for TRAIN/EVAL export).

    Raises:
      ValueError: features and labels share keys.
    """
    feat_keys = features.keys() if isinstance(features, dict) else [SINGLE_RECEIVER_DEFAULT_NAME]
    label_keys = labels.keys() if isinstance(labels, dict) else [SINGLE_LABEL_DEFAULT_NAME]
    overlap_keys = set(feat_keys) & set(label_keys)
    if overlap_keys:
        raise ValueError("Features and labels must have distinct keys. Found overlapping keys: {}".format(overlap_keys))

    def supervised_input_receiver_fn():
        if isinstance(features, dict):
            features_cp = receiver_features = _placeholders_from_dict(features, default_batch_size)
        else:
            features_cp = _placeholder_from_tensor(features, default_batch_size)
            receiver_features = {SINGLE_RECEIVER_DEFAULT_NAME: features_cp}
        if isinstance(labels, dict):
            labels_cp = receiver_labels = _placeholders_from_dict(labels, default_batch_size)
        else:
            labels_cp = _placeholder_from_tensor(labels, default_batch_size)
            receiver_labels = {SINGLE_LABEL_DEFAULT_NAME: labels_cp}
        receiver_tensors = dict(receiver_features)
        receiver_tensors.update(receiver_labels)
        return SupervisedInputReceiver(features_cp, labels_cp, receiver_tensors)

    return supervised_input_receiver_fn


def build_supervised_input_receiver_fn_from_input_fn(input_fn, **input_fn_args):
    """A supervised receiver function with placeholders shaped like what `input_fn` returns."""
    with tf.Graph().as_default():
        features, labels, _ = parse_input_fn_result(input_fn(**input_fn_args))
    return build_raw_supervised_input_receiver_fn(features, labels)
