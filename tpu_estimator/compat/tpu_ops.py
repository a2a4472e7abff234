"""`tf.compat.v1.tpu` functions off a TPU: `replicate`, `shard`, `batch_parallel`, system init, bfloat16 scope.

`replicate` and `shard` build one copy of the computation per shard device with
`tpu_estimator.replicas.replication.run_replicated`, so `cross_replica_sum` and `CrossShardOptimizer` inside them reduce
across the copies. Variables created inside are one logical copy shared by the replicas. On a TPU every core
keeps its own copy and applies the same (cross-replica summed) update, so the result is one update per step;
here, as in `TPUEstimator`, only replica 0's operations run: the operations a replica returns (e.g. a
`train_op`) are replica 0's for every replica, and returned tensors wait for replica 0's operations. A tensor
that itself control-depends on a variable write inside replica i > 0 would repeat that write: return the
operation instead (the usual `tpu.replicate`/`tpu.shard` style).
"""

import contextlib
from typing import Any, Callable, Iterator, List, Optional, Sequence, Union

import tensorflow as tf

from tpu_estimator.hosts import shard_devices as devices_lib
from tpu_estimator.replicas import replication


def _reject_tpu_only(what: str, infeed_queue, device_assignment) -> None:
    if infeed_queue is not None:
        raise ValueError("{}(infeed_queue=...) needs a TPU infeed; pass the tensors as inputs instead.".format(what))
    if device_assignment is not None:
        raise ValueError(
            "{}(device_assignment=...) needs a TPU topology; remove it (replica i runs on shard device i).".format(what)
        )


def _is_flat(outputs: Any) -> bool:
    """Upstream's `xla.is_flat`: None, one object, or a list/tuple of non-nested objects."""
    if isinstance(outputs, (list, tuple)):
        return not any(isinstance(o, (list, tuple, dict)) for o in outputs)
    return not isinstance(outputs, dict)


def _postprocess(outputs: Any, replica_id: int, replica0_ops: List[tf.Operation]) -> Any:
    """One replica's outputs shaped as upstream's `replicate` returns them.

    Flat outputs become a list of tensors; operations among them become control dependencies of the tensors
    (or, without tensors, one grouped op). Nested outputs keep their structure and may not hold operations.
    Replicas > 0 use replica 0's operations in place of their own (see the module docstring); replica 0 has
    finished building when another replica gets here, because replicas finish in order.
    """
    if _is_flat(outputs):
        flat = [] if outputs is None else (list(outputs) if isinstance(outputs, (list, tuple)) else [outputs])
        ops = [o for o in flat if isinstance(o, tf.Operation)]
        values = [o for o in flat if not isinstance(o, tf.Operation)]
        if any(a is not b for a, b in zip(flat, values + ops)):
            raise ValueError(
                "TPU functions must return zero-or more Tensor values followed by zero or more Operations."
            )
        if replica_id == 0:
            replica0_ops.extend(ops)
        else:
            ops = list(replica0_ops)
        if not values:
            return tf.group(*ops, name="shard_%d" % replica_id)
        with tf.control_dependencies(ops):
            return [None if v is None else tf.identity(v) for v in values]
    for value in tf.nest.flatten(outputs):
        if isinstance(value, tf.Operation):
            raise ValueError(
                "tpu.rewrite does not support Operation as return value in non-flat output structure. "
                "You can set returned Operations as control dependencies of returned Tensors so "
                'Operations are triggered when Tensors are evaluated. Operation found: "{}"'.format(value.name)
            )
    return tf.nest.map_structure(lambda v: None if v is None else tf.identity(v), outputs)


def replicate(
    computation: Callable[..., Any],
    inputs: Optional[Sequence[Sequence[Any]]] = None,
    infeed_queue=None,
    device_assignment=None,
    name: Optional[str] = None,
    maximum_shapes=None,
    padding_spec=None,
    xla_options=None,
) -> List[Any]:
    """Builds `computation(*inputs[i])` once per replica i, like `tf.compat.v1.tpu.replicate`.

    Replica i runs on shard device i (GPU i, else logical CPU i; a session without that device places it on the
    CPU when soft placement is on, TensorFlow's default).

    Args:
      computation: builds one replica from its inputs.
      inputs: `[replica][input]` nested structures; None means one replica without inputs.
      infeed_queue: must be None.
      device_assignment: must be None.
      name: unused.
      maximum_shapes: must be None (XLA input padding).
      padding_spec: must be None.
      xla_options: unused.

    Returns:
      One entry per replica: a list of output tensors for flat outputs (a single tensor comes back as a
      one-element list), the output structure for nested outputs, or an op when the computation returns only
      operations (or nothing).

    Raises:
      ValueError: TPU-only arguments, or replicas with different numbers of inputs.
    """
    del name, xla_options
    _reject_tpu_only("replicate", infeed_queue, device_assignment)
    if maximum_shapes is not None or padding_spec is not None:
        raise ValueError(
            "replicate(maximum_shapes=..., padding_spec=...) pads inputs to avoid XLA recompilation; "
            "off a TPU inputs keep their shapes: remove both arguments."
        )
    inputs = [[]] if inputs is None else [list(replica_inputs) for replica_inputs in inputs]
    if not inputs:
        raise ValueError("replicate needs at least one replica; got inputs=[].")
    if any(len(replica_inputs) != len(inputs[0]) for replica_inputs in inputs):
        raise ValueError(
            "Replicas must have the same number of inputs. Replica 0 had {} inputs, got: {}".format(
                len(inputs[0]), [len(replica_inputs) for replica_inputs in inputs]
            )
        )
    for replica_inputs in inputs[1:]:
        tf.nest.assert_same_structure(inputs[0], replica_inputs)
    converted = [tf.nest.map_structure(tf.convert_to_tensor, replica_inputs) for replica_inputs in inputs]

    replica0_ops: List[tf.Operation] = []

    def build(replica_id: int) -> Any:
        return _postprocess(computation(*converted[replica_id]), replica_id, replica0_ops)

    return replication.run_replicated(build, devices_lib.shard_devices(len(inputs)))


def shard(
    computation: Callable[..., Any],
    inputs: Optional[List[Any]] = None,
    num_shards: int = 1,
    input_shard_axes: Optional[List[int]] = None,
    outputs_from_all_shards: Union[bool, List[bool]] = True,
    output_shard_axes: Optional[List[int]] = None,
    infeed_queue=None,
    device_assignment=None,
    name: Optional[str] = None,
    xla_options=None,
) -> List[tf.Tensor]:
    """Splits `inputs` into `num_shards` pieces, runs `computation` on each, joins the outputs.

    Same contract as `tf.compat.v1.tpu.shard`: each input is split on its `input_shard_axes` entry (default 0);
    each output is concatenated over shards on its `output_shard_axes` entry (scalars are stacked), or taken
    from shard 0 where `outputs_from_all_shards` is False.

    Args:
      computation: builds one shard from its pieces of the inputs.
      inputs: a list of tensors (or None).
      num_shards: the number of shards.
      input_shard_axes: one split axis per input.
      outputs_from_all_shards: bool, or one bool per output.
      output_shard_axes: one concatenation axis per output.
      infeed_queue: must be None.
      device_assignment: must be None.
      name: unused.
      xla_options: unused.

    Returns:
      A list of output tensors (or `[op]` when the computation returns only operations).

    Raises:
      ValueError: non-positive `num_shards`, or lengths of the axis lists that do not match.
      TypeError: `inputs` is not a list.
    """
    if num_shards <= 0:
        raise ValueError("num_shards must be a positive integer. Received {}".format(num_shards))
    inputs = [] if inputs is None else inputs
    if not isinstance(inputs, list):
        raise TypeError("tpu.shard()'s inputs must be a list of Tensors or None. Received {}".format(type(inputs)))
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    if input_shard_axes is None:
        input_shard_axes = [0] * len(inputs)
    if len(inputs) != len(input_shard_axes):
        raise ValueError(
            "Length of input_shard_axes must be equal to the number of inputs. Received {} inputs and "
            "{} input_shard_axes.".format(len(inputs), len(input_shard_axes))
        )
    if inputs:
        with tf.device(devices_lib.HOST_DEVICE):
            split = [tf.split(x, num_shards, axis=axis) for axis, x in zip(input_shard_axes, inputs)]
        per_shard = [list(pieces) for pieces in zip(*split)]
    else:
        per_shard = [[] for _ in range(num_shards)]
    outputs = replicate(
        computation,
        per_shard,
        infeed_queue=infeed_queue,
        device_assignment=device_assignment,
        name=name,
        xla_options=xla_options,
    )
    if isinstance(outputs[0], tf.Operation):
        return [tf.group(*outputs)]
    num_outputs = len(outputs[0])
    if output_shard_axes is None:
        output_shard_axes = [0] * num_outputs
    if num_outputs != len(output_shard_axes):
        raise ValueError(
            "Length of output_shard_axes must be equal to the number of outputs. Received {} outputs "
            "and {} output_shard_axes.".format(num_outputs, len(output_shard_axes))
        )
    if isinstance(outputs_from_all_shards, bool):
        outputs_from_all_shards = [outputs_from_all_shards] * num_outputs
    if num_outputs != len(outputs_from_all_shards):
        raise ValueError(
            "Length of outputs_from_all_shards must be equal to the number of outputs. Received {} "
            "outputs  and {} outputs_from_all_shards.".format(num_outputs, len(outputs_from_all_shards))
        )
    results = []
    with tf.device(devices_lib.HOST_DEVICE):
        for axis, all_shards, pieces in zip(output_shard_axes, outputs_from_all_shards, zip(*outputs)):
            if not all_shards:
                results.append(pieces[0])
            elif pieces[0].shape.rank == 0:
                results.append(tf.stack(list(pieces)))
            else:
                results.append(tf.concat(list(pieces), axis=axis))
    return results


def batch_parallel(
    computation: Callable[..., Any],
    inputs: Optional[List[Any]] = None,
    num_shards: int = 1,
    infeed_queue=None,
    device_assignment=None,
    name: Optional[str] = None,
    xla_options=None,
) -> List[tf.Tensor]:
    """`shard` on axis 0 of every input and output, like `tf.compat.v1.tpu.batch_parallel`."""
    return shard(
        computation,
        inputs,
        num_shards=num_shards,
        infeed_queue=infeed_queue,
        device_assignment=device_assignment,
        name=name,
        xla_options=xla_options,
    )


def initialize_system(
    embedding_config=None,
    job: Optional[str] = None,
    compilation_failure_closes_chips=True,
    tpu_cancellation_closes_chips=None,
) -> tf.Tensor:
    """A no-op stand-in for `tf.compat.v1.tpu.initialize_system`: there is no TPU system to configure.

    Returns:
      A string tensor (upstream returns the serialized topology); its value is an empty `TopologyProto`.
    """
    del embedding_config, job, compilation_failure_closes_chips, tpu_cancellation_closes_chips
    with tf.device(devices_lib.HOST_DEVICE):
        return tf.constant(b"", name="configure_distributed_tpu")


def shutdown_system(job: Optional[str] = None) -> tf.Operation:
    """A no-op stand-in for `tf.compat.v1.tpu.shutdown_system`."""
    del job
    with tf.device(devices_lib.HOST_DEVICE):
        return tf.no_op(name="shutdown_distributed_tpu")


def _bfloat16_getter(getter, *args, **kwargs):
    """Stores variables requested as bfloat16 in float32 and returns them cast to bfloat16 (upstream's rule)."""
    cast_to_bfloat16 = False
    if kwargs.get("dtype") == tf.bfloat16:
        kwargs["dtype"] = tf.float32
        cast_to_bfloat16 = True
    var = getter(*args, **kwargs)
    # Only the cast variables stop being variables: batch norm assigns to its (float32) moving statistics.
    if cast_to_bfloat16:
        var = tf.cast(var, tf.bfloat16)
    return var


@contextlib.contextmanager
def bfloat16_scope(name: Optional[str] = None) -> Iterator[tf.compat.v1.VariableScope]:
    """Variable scope whose bfloat16 variables are stored in float32 and read as bfloat16.

    Same as `tf.compat.v1.tpu.bfloat16_scope`: compute stays in bfloat16 (TensorFlow has CPU and GPU bfloat16
    kernels for the common ops); the variables, their checkpoints and their optimizer updates are float32.
    Only `tf.compat.v1.get_variable`-based variables (tf.compat.v1.layers, slim) see the custom getter; Keras
    layers create their variables directly and are unaffected, as on a TPU.

    Args:
      name: the variable scope name ('' by default, i.e. no extra scope level).

    Yields:
      The variable scope.
    """
    with tf.compat.v1.variable_scope(name or "", custom_getter=_bfloat16_getter) as scope:
        yield scope
