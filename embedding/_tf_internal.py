"""The few `tensorflow.python` internals `embedding/` needs, each wrapped once here.

Every other module of `embedding/` uses public TensorFlow APIs (tests/estimator/test_layering.py checks). The
checkpoint internals of the shard variables (`checkpointing.py`): the `Trackable` and `SaveableObject` protocols, the
meta-graph proto functions of a variable collection, shared-resource registration, a resource variable made past
the variable creator scopes, and the deferred children of a `tf.train.Checkpoint` restore.
"""

import contextlib
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Union

import tensorflow as tf
from tensorflow.core.framework import variable_pb2
from tensorflow.python.framework import ops as _ops
from tensorflow.python.ops import ref_variable as _ref_variable
from tensorflow.python.ops import resource_variable_ops as _resource_variable_ops
from tensorflow.python.ops import resources as _resources
from tensorflow.python.trackable import base as _trackable_base
from tensorflow.python.training.saving import saveable_object as _saveable_object

#: The base class of objects `tf.train.Checkpoint` saves and restores.
Trackable = _trackable_base.Trackable
#: Local name under which `tf.train.Checkpoint` serializes a variable's value.
VARIABLE_VALUE_KEY = _trackable_base.VARIABLE_VALUE_KEY
#: What a TF1 `Saver` saves: a `SaveableObject` made of `SaveSpec`s.
SaveableObject = _saveable_object.SaveableObject
SaveSpec = _saveable_object.SaveSpec


def register_variable_collection(collection: str) -> None:
    """Variables in the graph collection `collection` survive meta-graph export and import as variables (like
    `GLOBAL_VARIABLES`)."""
    _ops.register_proto_function(
        collection,
        proto_type=variable_pb2.VariableDef,
        to_proto=_ref_variable._to_proto_fn,
        from_proto=_ref_variable._from_proto_fn,
    )


def resource_variable(initial_value: Union[tf.Tensor, Callable[[], tf.Tensor]], **kwargs) -> tf.Variable:
    """A `ResourceVariable` constructed directly: no variable creator scope (a distribution strategy's) sees it."""
    return _resource_variable_ops.ResourceVariable(initial_value=initial_value, **kwargs)


def register_shared_resource(variable: tf.Variable) -> None:
    """Registers `variable` as a shared resource of its (TF1) graph, with its own `IsInitialized` op where it has
    one in that graph (`is_initialized()` builds another each call): the default `Scaffold` initialises it and its
    ready op reports it while it is not."""
    is_initialized = getattr(variable, "_is_initialized_op", None)
    if not isinstance(is_initialized, tf.Tensor) or is_initialized.graph is not variable.graph:
        is_initialized = variable.is_initialized()
    _resources.register_resource(variable.handle, variable.initializer, is_initialized)


def take_deferred_restore(trackable: Any, name: str) -> Optional[Dict[str, tf.Tensor]]:
    """The checkpoint values (by local name) of `trackable`'s child `name` that a `tf.train.Checkpoint` restore
    found no object for, or None; the child counts as restored afterwards.

    A restore keeps each checkpoint child its object does not have (`_lookup_dependency` returned None) as a
    deferred position; this reads the latest restore's values (eagerly) and binds every position to a placeholder,
    so that the restore's status counts them as matched and restored.
    """
    deferred = getattr(trackable, "_deferred_dependencies", None) or {}
    positions = deferred.get(name)
    if not positions:
        return None
    values = positions[-1].value_tensors()
    deferred.pop(name, None)
    for position in positions:
        placeholder = Trackable()
        placeholder._maybe_initialize_trackable()
        position.bind_object(placeholder)
        placeholder._update_uid = position.restore_uid
    return values


def control_flow_context(graph: tf.Graph):
    """The graph's current (TF1) control-flow context: None at the root, else the while loop or cond branch being
    built. Tensors made in one context can only be used in it (or in contexts nested in it)."""
    return graph._get_control_flow_context()


@contextlib.contextmanager
def without_control_dependencies(graph: tf.Graph) -> Iterator[None]:
    """Builds ops with no control dependencies, in the current control-flow context (loop or cond).

    `graph.control_dependencies(None)` also leaves the control-flow context (and restores it on exit); this stays in
    it, so that what is built belongs to the loop or branch (its frame's control input only).
    """
    context = graph._get_control_flow_context()
    with graph.control_dependencies(None):
        graph._set_control_flow_context(context)
        yield


def shard_info(shape: Sequence[int], offset: Sequence[int]):
    """The `shard_info` argument of a Keras/`tf.Module` initializer for the slice at `offset` of `shape`."""
    return _trackable_base.ShardInfo(list(shape), tuple(offset))
