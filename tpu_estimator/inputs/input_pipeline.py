"""Input pipeline: calls `input_fn` per `InputPipelineConfig` and hands each replica its batch every step.

Datasets are read in-graph: an initializable iterator is created once, outside the training loop, and its
`get_next()` runs inside the loop body, so input errors surface from the same `Session.run`. `input_fn`s that
return tensors (allowed outside PREDICT in every input mode but PER_HOST_V2, as upstream) are fed through a host
queue by an infeed thread (`TensorInfeedHook`).
"""

import contextlib
import threading
import time
from typing import Any, Callable, List, NamedTuple, Optional, Protocol, Sequence, Tuple

import tensorflow as tf

from embedding import engine
from tpu_estimator import _estimator_lib
from tpu_estimator.inputs import dataset_autotune, input_position
from tpu_estimator.inputs.queued_structure import QueuedStructure
from tpu_estimator.specs.batch_size import check_divisible
from tpu_estimator.specs.context import ShardingContext, TPUContext
from tpu_estimator.tpu_config import InputPipelineConfig

ModeKeys = _estimator_lib.ModeKeys
_REMOTE_ENQUEUE_TIMEOUT_MS = 24 * 3600 * 1000
# How long a session's end drains the thread's queues for its last run to complete before cancelling it.
_DRAIN_SECS = 5.0


def split_features_and_labels(element: Any) -> Tuple[Any, Any]:
    """`(features, labels)` from a dataset element or an `input_fn` result, as Estimator reads them."""
    if isinstance(element, (tuple, list)):
        if len(element) != 2:
            raise ValueError("input_fn should return (features, labels) as a len 2 tuple.")
        return element[0], element[1]
    return element, None


def _is_dataset(value) -> bool:
    return isinstance(value, (tf.data.Dataset, tf.compat.v1.data.Dataset))


class DatasetInitializerHook(tf.compat.v1.train.SessionRunHook):
    """Initialises the input iterators after the session is created (after an optional sleep), and moves those
    whose position the checkpoint holds to it (`input_position.py`), before any other hook reads them.

    Attributes:
      skipped: per checkpointed position, the batches read and dropped to reach it at the last session start.
    """

    def __init__(
        self,
        initializers: List[tf.Operation],
        sleep_secs: Optional[int] = None,
        positions: Sequence[input_position.InputPosition] = (),
    ):
        self._initializers = initializers
        self._sleep_secs = sleep_secs
        self._positions = list(positions)
        self.skipped: List[int] = []

    def begin(self):
        for position in self._positions:
            position.build_start_ops()

    def after_create_session(self, session, coord):
        if self._sleep_secs:
            time.sleep(self._sleep_secs)
        session.run(self._initializers)
        self.skipped = [position.start(session) for position in self._positions]


class TensorInfeedHook(tf.compat.v1.train.SessionRunHook):
    """Runs an enqueue op in a thread while the shards compute; errors reach the caller.

    When the thread fails, the queue is closed (so the step's dequeue stops instead of hanging) and the error is
    raised from the next hook call in the main thread. With `errors_in_order` it is raised at the end of the
    session, and only if the step took every step the thread had queued before it failed (the closed queue then
    ended the session): a caller that stopped earlier (a hook's `request_stop`, a generator closed) never asked for
    the failing step, and gets no error for it. An error the thread meets once the session is ending is not one.

    At the session's end, with a `drain_op`, the thread's last run completes instead of being cancelled: the hook
    runs `stop_op` (the enqueue loop ends after its current step) and then `drain_op` until the thread is done, for
    at most `_DRAIN_SECS`; only then does it close the queues, cancelling what still waits. A cancelled run is an
    error inside TensorFlow's runtime, which logs it ("Local rendezvous is aborting with status: CANCELLED").

    Args:
      enqueue_op: what the thread runs, again and again.
      close_op: closes the queue(s) the step dequeues from (run when the thread fails: the step's dequeue then
        ends the session, and `end` raises the thread's error).
      sleep_secs: how long the thread waits before its first run.
      errors_in_order: each run of `enqueue_op` queues one step, and each `Session.run` of the caller takes one;
        the thread's error comes after the steps it queued before failing (PREDICT: the batches before a bad one
        are predicted), not at the next step.
      end_close_op: closes every queue the thread may wait on, run at the end of the session; `close_op` if
        None. A queue the step only enqueues into belongs here, not in `close_op`: the step's enqueue into a
        closed queue fails with a `CancelledError` that would hide the thread's error.
      stop_op: tells an in-graph enqueue loop to end after its current step (None: each run enqueues one step,
        and the thread stops between runs).
      drain_op: takes whatever the thread's queues hold, without blocking; only valid when the step is their one
        consumer. None: the end cancels the thread's pending run.
    """

    def __init__(
        self,
        enqueue_op: tf.Operation,
        close_op: tf.Operation,
        sleep_secs: Optional[int] = None,
        errors_in_order: bool = False,
        end_close_op: Optional[tf.Operation] = None,
        stop_op: Optional[tf.Operation] = None,
        drain_op: Optional[tf.Operation] = None,
    ):
        self._enqueue_op = enqueue_op
        self._stop_op = stop_op
        self._drain_op = drain_op
        self._close_op = close_op
        self._end_close_op = close_op if end_close_op is None else end_close_op
        self._sleep_secs = sleep_secs
        self._errors_in_order = errors_in_order
        self._thread = None
        self._error = None
        self._stop = threading.Event()
        self._steps_queued = 0  # runs of enqueue_op that succeeded
        self._steps_taken = 0  # runs of the caller that succeeded

    def after_create_session(self, session, coord):
        self._stop.clear()
        self._error = None
        self._steps_queued = self._steps_taken = 0
        self._thread = threading.Thread(target=self._feed, args=(session,), name="tensor_infeed", daemon=True)
        self._thread.start()

    def _feed(self, session) -> None:
        # On a cluster every run has a deadline (cluster.py); an enqueue legitimately waits for the loop to dequeue
        # for as long as the client pauses (checkpoints, hooks), so it gets its own. A lost host still fails it.
        options = None
        if getattr(session, "sess_str", ""):
            options = tf.compat.v1.RunOptions(timeout_in_ms=_REMOTE_ENQUEUE_TIMEOUT_MS)
        try:
            if self._sleep_secs:
                time.sleep(self._sleep_secs)
            while not self._stop.is_set():
                session.run(self._enqueue_op, options=options)
                self._steps_queued += 1
        except tf.errors.OutOfRangeError:
            if not self._stop.is_set():
                self._close(session)
        except tf.errors.CancelledError as error:
            # Stopping, the close cancels the thread's run; otherwise something else cancelled it (a collective
            # aborted by a lost host): the caller gets the error.
            if not self._stop.is_set():
                self._error = error
                self._close(session)
        except Exception as error:
            if not self._stop.is_set():
                self._error = error
            self._close(session)

    def _close(self, session, close_op: Optional[tf.Operation] = None) -> None:
        try:
            session.run(self._close_op if close_op is None else close_op)
        except Exception:
            pass

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def after_run(self, run_context, run_values):
        self._steps_taken += 1
        if not self._errors_in_order:
            self._raise_if_failed()

    def _drain(self, session) -> None:
        """Lets the thread's last run complete: stops its loop and empties its queues until it is done."""
        if self._drain_op is None or self._thread is None or self._error is not None:
            return
        deadline = time.monotonic() + _DRAIN_SECS
        try:
            if self._stop_op is not None:
                session.run(self._stop_op)
            while self._thread.is_alive() and time.monotonic() < deadline:
                session.run(self._drain_op)
                self._thread.join(0.01)
        except tf.errors.OpError:
            pass  # the session is failing: the close below cancels what is left

    def end(self, session):
        self._stop.set()
        self._drain(session)
        self._close(session, self._end_close_op)
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._errors_in_order and self._steps_taken < self._steps_queued:
            self._error = None  # the caller stopped before the failing step
        self._raise_if_failed()


class _Source(object):
    """One `input_fn` invocation's output: a dataset iterator or a queue of tensors."""

    def __init__(
        self, result: Any, device: str, allow_tensors: bool, sleep_secs: Optional[int], position_index: Optional[int]
    ):
        self.hook = None
        self.initializer = None
        self.position = None
        with tf.device(device):
            if _is_dataset(result):
                _check_not_ragged(*split_features_and_labels(result.element_spec))
                # No idle autotuner thread to wait for when the session closes (dataset_autotune.py).
                result = dataset_autotune.without_idle_autotune(result)
                self._iterator = tf.compat.v1.data.make_initializable_iterator(result)
                self.initializer = self._iterator.initializer
                self._queue = None
                if position_index is not None:
                    self.position = input_position.InputPosition(result, self._iterator, device, position_index)
            elif not allow_tensors:
                raise TypeError("`input_fn` must return a `Dataset` for this mode.")
            else:
                features, labels = split_features_and_labels(result)
                _check_not_ragged(features, labels)
                self._queued = QueuedStructure((features, labels))
                if not self._queued.tensors:
                    raise ValueError("input_fn returned no tensors.")
                # No queue shapes: unknown dense shapes get the static-shape error after the dequeue.
                self._queue = tf.queue.FIFOQueue(capacity=2, dtypes=self._queued.dtypes)
                # Not drained at the end: with embeddings its reader is the embedding infeed thread, still running then.
                self.hook = TensorInfeedHook(
                    self._queue.enqueue(self._queued.tensors),
                    self._queue.close(cancel_pending_enqueues=True),
                    sleep_secs,
                )
                self._iterator = None
        self._device = device

    def get_next_or_empty(self, fallback: Any = None) -> Tuple[Any, tf.Tensor, Callable[[], tf.Tensor]]:
        """The next element or, at the end, `fallback` (an element read before) or else an empty (0-row) one.

        Returns:
          `(element, has_value, raise_end)`: the element as the dataset yields it, whether it is a new one, and a
          function building an op that raises OutOfRange (reads the exhausted iterator).
        """
        with tf.device(self._device):
            optional = self._iterator.get_next_as_optional()
            spec = self._iterator.element_spec
            otherwise = (
                (lambda: fallback) if fallback is not None else (lambda: tf.nest.map_structure(_empty_batch, spec))
            )
            element = tf.cond(optional.has_value(), optional.get_value, otherwise)
            element = tf.nest.map_structure(_with_unknown_batch, element, spec)
            return element, optional.has_value(), self._read_past_end

    def _read_past_end(self) -> tf.Tensor:
        """An op that reads the exhausted iterator (OutOfRange) and otherwise yields False.

        The read is a control input, not data: Grappler folds `size(next) < 0` to a constant when the dataset's
        batch is static (`drop_remainder=True`) and prunes the read, and the step then never ends.
        """
        next_element = self._iterator.get_next()
        with tf.control_dependencies(tf.nest.flatten(next_element, expand_composites=True)):
            return tf.identity(tf.constant(False))

    def get_next(self) -> Tuple[Any, Any]:
        with tf.device(self._device):
            if self._iterator is not None:
                if self.position is not None:
                    return split_features_and_labels(self.position.read(self._iterator.get_next))
                return split_features_and_labels(self._iterator.get_next())
            return self._queued.unpack(self._queue.dequeue())


def drain(queues: Sequence[tf.queue.QueueBase]) -> tf.Operation:
    """Takes one element from each of `queues` that holds one, without blocking (for queues with one consumer:
    nothing takes the element between the size and the dequeue)."""

    def take(queue: tf.queue.QueueBase) -> tf.Tensor:
        return tf.cond(
            queue.size() > 0,
            lambda: _after(queue.dequeue(), tf.constant(True)),
            lambda: tf.constant(False),
        )

    return tf.group(*[take(queue) for queue in queues], name="drain")


def _after(values: Any, result: tf.Tensor) -> tf.Tensor:
    with tf.control_dependencies(tf.nest.flatten(values)):
        return tf.identity(result)


def _empty_batch(spec: tf.TypeSpec) -> Any:
    """A 0-row value of a batched element spec (dense or sparse)."""
    if isinstance(spec, tf.SparseTensorSpec):
        dense_shape = [0] + [0 if d is None else d for d in spec.shape.as_list()[1:]]
        return tf.SparseTensor(
            tf.zeros([0, len(dense_shape)], tf.int64), tf.zeros([0], spec.dtype), tf.constant(dense_shape, tf.int64)
        )
    return tf.zeros([0] + spec.shape.as_list()[1:], spec.dtype)


def _with_unknown_batch(value: Any, spec: tf.TypeSpec) -> Any:
    """`value` with the static shape of `spec` and an unknown batch dimension (sparse values pass unchanged)."""
    if isinstance(value, tf.SparseTensor):
        return value
    return tf.ensure_shape(value, [None] + spec.shape.as_list()[1:])


def _leaves_with_paths(value: Any, path: str) -> List[Tuple[str, Any]]:
    """`(key path, leaf)` of a nest of dicts, lists and tuples, e.g. `("features['a']", tensor)`."""
    if isinstance(value, dict):
        return [pair for key in sorted(value) for pair in _leaves_with_paths(value[key], "{}[{!r}]".format(path, key))]
    if isinstance(value, (list, tuple)):
        return [pair for i, item in enumerate(value) for pair in _leaves_with_paths(item, "{}[{}]".format(path, i))]
    return [(path, value)]


def _check_not_ragged(features: Any, labels: Any) -> None:
    """Raises for RaggedTensors (or their specs): no TPUEstimator input path carries them (their row lengths vary).

    Raises:
      ValueError: naming the key path of the first ragged feature or label.
    """
    for what, value in (("features", features), ("labels", labels)):
        for path, tensor in _leaves_with_paths(value, what):
            if isinstance(tensor, (tf.RaggedTensor, tf.RaggedTensorSpec)):
                raise ValueError(
                    "The {} to the model returned by input_fn must have static shape. {} is a RaggedTensor; convert "
                    "ragged features in input_fn, e.g. with `.to_sparse()` (a SparseTensor) or `.to_tensor()` "
                    "(padded dense).".format(what, path)
                )


def _check_static_shapes(features: Any, labels: Any) -> None:
    _check_not_ragged(features, labels)
    for what, value in (("features", features), ("labels", labels)):
        for path, tensor in _leaves_with_paths(value, what):
            if tensor is None or isinstance(tensor, tf.SparseTensor):
                continue
            if not tensor.shape.is_fully_defined():
                raise ValueError(
                    "The {} to the model returned by input_fn must have static shape. {}: {}".format(what, path, tensor)
                )


def _split(tensor, num: int, axis: int, name: str):
    if isinstance(tensor, tf.SparseTensor):
        if axis != 0:
            raise ValueError("SparseTensor input {} can only be split on axis 0, got batch_axis {}.".format(name, axis))
        return tf.sparse.split(sp_input=tensor, num_split=num, axis=0)
    size = tensor.shape[axis]
    if size is not None:
        check_divisible(size, "the batch dimension of {} (axis {})".format(name, axis), num, "number of replicas")
    return tf.split(tensor, num, axis=axis)


class WholeHostBatch(NamedTuple):
    """A feature handed unsplit to every replica of its host (PER_HOST_V1, embedding inputs only).

    The embedding host stage joins the ids of a host's replicas before it deduplicates them, so it reads the host
    batch as it came from `input_fn` instead of a split that it would concatenate again.
    """

    tensor: Any


class StepInput(NamedTuple):
    """One step's input: `(features, labels)` per replica and, in PREDICT, each replica's real-row mask."""

    per_replica: List[Tuple[Any, Any]]
    padding_masks: Optional[List[tf.Tensor]] = None


class InputReader(Protocol):
    """How one input mode reads a step from the sources its `input_fn` calls returned (one reader per mode:
    `_PerHostV2Reader`, `_PerShardReader`, `_HostBatchReader`)."""

    def read(self) -> StepInput:
        """Builds one step's reads: `(features, labels)` per replica (and, in PREDICT, the padding masks)."""
        ...


class _PerHostV2Reader(InputReader):
    """PER_HOST_V2: one dataset of per-replica batches, read once per replica.

    The reads are chained (replica r reads after replica r-1) unless
    `experimental_allow_per_host_v2_parallel_get_next`. In PREDICT, replicas past the end of the input get an
    all-padding batch (upstream's stopping signals); the step fails with OutOfRange only when no replica got data.
    """

    def __init__(self, sources: List["_Source"], ctx: ShardingContext):
        self._sources = sources  # one per host this process builds
        self._ctx = ctx

    def read(self) -> StepInput:
        ctx = self._ctx
        predict = ctx.mode == ModeKeys.PREDICT
        chained = not ctx.config.tpu_config.experimental_allow_per_host_v2_parallel_get_next
        per_replica, elements, has_values = [], [], []
        previous = None
        raise_end = None
        for replica in ctx.built_replicas:
            host = ctx.host_of_replica(replica)
            source = self._sources[ctx.built_hosts.index(host)]
            if replica % ctx.num_of_replicas_per_host == 0:
                previous = None  # each host reads its own dataset
            with tf.control_dependencies([previous] if chained and previous is not None else []):
                if predict:
                    # A replica past the end of the input gets a copy of replica 0's batch, all padding.
                    element, has_value, host_raise_end = source.get_next_or_empty(elements[0] if elements else None)
                    raise_end = raise_end or host_raise_end
                    elements.append(element)
                    has_values.append(has_value)
                    features, labels = split_features_and_labels(element)
                else:
                    features, labels = source.get_next()
            # Composites are expanded: a SparseTensor cannot be a control input, its component tensors can.
            previous = tf.nest.flatten((features, labels), expand_composites=True)[0]
            per_replica.append((features, labels))
        if not predict:
            return StepInput(per_replica)
        with tf.device(ctx.host_work_device):
            any_value = tf.reduce_any(tf.stack(has_values))
            # At the end of the input (no replica got data) this reads the exhausted iterator: OutOfRange, raised
            # before the padded inputs (and so the model) are computed.
            guard = tf.cond(any_value, lambda: tf.constant(True), raise_end)
        padded, masks = [], []
        with tf.control_dependencies([guard]):
            for replica, structure, has_value in zip(ctx.built_replicas, per_replica, has_values):
                host_device = ctx.host_devices[ctx.host_of_replica(replica)]
                structure, mask = _pad(structure, ctx.global_batch_size // ctx.num_replicas, host_device)
                padded.append(structure)
                with tf.device(host_device):
                    masks.append(tf.logical_and(mask, has_value))
        return StepInput(padded, masks)


class _PerShardReader(InputReader):
    """PER_SHARD_V1: one `input_fn` call per replica; each replica reads its own."""

    def __init__(self, sources: List["_Source"]):
        self._sources = sources

    def read(self) -> StepInput:
        return StepInput([source.get_next() for source in self._sources])


class _HostBatchReader(InputReader):
    """PER_HOST_V1 and SLICED: one host batch split over the replicas on `batch_axis`; BROADCAST: every replica
    gets the whole batch (in PREDICT only replica 0's rows are real)."""

    def __init__(
        self,
        sources: List["_Source"],
        ctx: ShardingContext,
        batch_axis: Optional[Sequence[int]],
        broadcast: bool,
        whole_host_keys: Sequence[str] = (),
    ):
        # PER_HOST_V1: one per host this process builds, each split over its host's replicas; else one on host 0.
        self._sources = sources
        self._ctx = ctx
        self._batch_axis = batch_axis
        self._broadcast = broadcast
        # With a batch_axis per flattened tensor the features cannot be split by key: every feature is split.
        self._whole_host_keys = frozenset(whole_host_keys) if batch_axis is None else frozenset()

    def read(self) -> StepInput:
        ctx = self._ctx
        if ctx.input_mode != InputPipelineConfig.PER_HOST_V1:
            return self._read_host(self._sources[0], ctx.num_replicas, ctx.global_batch_size, 0)
        per_replica, masks = [], []
        per_host = ctx.num_of_replicas_per_host
        host_batch = None if ctx.global_batch_size is None else ctx.global_batch_size // ctx.num_hosts
        for host, source in zip(ctx.built_hosts, self._sources):
            step = self._read_host(source, per_host, host_batch, host)
            per_replica += step.per_replica
            masks += step.padding_masks or []
        return StepInput(per_replica, masks or None)

    def _read_host(self, source: "_Source", num: int, batch_size: Optional[int], host: int) -> StepInput:
        ctx = self._ctx
        host_device = ctx.host_devices[host]
        features, labels = source.get_next()
        mask = None
        if ctx.mode == ModeKeys.PREDICT:
            (features, labels), mask = _pad((features, labels), batch_size, host_device)
        else:
            _check_static_shapes(features, labels)
        if self._broadcast:
            masks = None if mask is None else [mask] + [tf.zeros_like(mask)] * (num - 1)
            return StepInput([(features, labels)] * num, masks)
        with tf.device(host_device) if ctx.on_cluster else contextlib.nullcontext():
            masks = None if mask is None else (tf.split(mask, num) if num > 1 else [mask])
        return StepInput(self._split(features, labels, num, host_device), masks)

    def _split(self, features: Any, labels: Any, num: int, host_device: str) -> List[Tuple[Any, Any]]:
        if num == 1:
            return [(features, labels)]
        whole = {}
        if isinstance(features, dict) and self._whole_host_keys:
            whole = {k: WholeHostBatch(v) for k, v in features.items() if k in self._whole_host_keys}
            features = {k: v for k, v in features.items() if k not in whole}
        split = self._split_all(features, labels, num, host_device)
        if not whole:
            return split
        return [(dict(replica_features, **whole), replica_labels) for replica_features, replica_labels in split]

    def _split_all(self, features: Any, labels: Any, num: int, host_device: str) -> List[Tuple[Any, Any]]:
        structure = (features, labels)
        flat = tf.nest.flatten(structure, expand_composites=False)
        names = ["input {}".format(i) for i in range(len(flat))]
        axes = list(self._batch_axis) if self._batch_axis is not None else [0] * len(flat)
        if len(axes) != len(flat):
            raise ValueError("batch_axis has {} entries but input_fn returned {} tensors.".format(len(axes), len(flat)))
        with tf.device(host_device):
            pieces = [
                [None] * num if t is None else _split(t, num, axis, name) for t, axis, name in zip(flat, axes, names)
            ]
        return [tf.nest.pack_sequence_as(structure, [p[r] for p in pieces]) for r in range(num)]


def _pad(structure: Any, size: int, host_device: str) -> Tuple[Any, tf.Tensor]:
    """Pads every tensor of a (possibly partial) PREDICT batch to `size` rows; returns the real-row mask.

    Padded rows repeat the batch's last real row (zeros for an empty batch), so whatever `model_fn` or a feature
    column does with the real rows also works on the padding (e.g. weights that must be non-zero where ids are
    present, sparse lookups whose row count is the last non-empty row); their predictions are dropped.
    """
    flat = tf.nest.flatten(structure)
    if not flat:
        raise ValueError("input_fn returned no tensors.")
    if all(tensor is None or tensor.shape[:1].as_list() == [size] for tensor in flat):
        # Every batch is statically full (e.g. `drop_remainder=True`): nothing to pad. The identities keep the
        # control inputs of the caller's scope (PER_HOST_V2's end-of-input guard) on the path to the model.
        with tf.device(host_device):
            full = tf.nest.map_structure(
                lambda t: None if t is None else tf.identity(t), structure, expand_composites=True
            )
            return full, tf.ones([size], tf.bool)
    with tf.device(host_device):
        first = flat[0]
        rows = (
            tf.cast(first.dense_shape[0], tf.int32)
            if isinstance(first, tf.SparseTensor)
            else tf.shape(first, out_type=tf.int32)[0]
        )
        check = tf.debugging.assert_less_equal(
            rows, size, message="PREDICT input_fn returned a batch larger than predict_batch_size"
        )
        with tf.control_dependencies([check]):
            padded = [None if tensor is None else _pad_rows(tensor, rows, size) for tensor in flat]
        mask = tf.range(size) < rows
    return tf.nest.pack_sequence_as(structure, padded), mask


def _pad_rows(tensor: Any, rows: tf.Tensor, size: int) -> Any:
    """`tensor` (dense or sparse, `rows` rows) grown to `size` rows, each new row a copy of row `rows - 1`."""
    if isinstance(tensor, tf.SparseTensor):
        indices = tensor.indices
        last = tf.equal(indices[:, 0], tf.cast(rows - 1, tf.int64))
        last_indices, last_values = tf.boolean_mask(indices, last), tf.boolean_mask(tensor.values, last)
        copies = size - rows
        new_rows = tf.repeat(tf.range(tf.cast(rows, tf.int64), size, dtype=tf.int64), tf.shape(last_values)[0])
        new_indices = tf.concat([tf.expand_dims(new_rows, 1), tf.tile(last_indices[:, 1:], [copies, 1])], axis=1)
        dense_shape = tf.concat([tf.cast([size], tf.int64), tensor.dense_shape[1:]], axis=0)
        return tf.SparseTensor(
            tf.concat([indices, new_indices], axis=0),
            tf.concat([tensor.values, tf.tile(last_values, [copies])], axis=0),
            dense_shape,
        )
    # One zero row appended: the source of the copies when the batch is empty.
    extended = tf.pad(tensor, [[0, 1]] + [[0, 0]] * (tensor.shape.rank - 1))
    source_row = tf.where(rows > 0, rows - 1, rows)
    out = tf.gather(extended, tf.concat([tf.range(rows), tf.fill([size - rows], source_row)], axis=0))
    out.set_shape([size] + tensor.shape.as_list()[1:])
    return out


class InputPipeline(object):
    """Calls `input_fn` as the input mode says and yields per-replica `(features, labels)` each step.

    Args:
      call_input_fn: `call_input_fn(context)` calls the user's `input_fn` with `params['context']=context`.
      ctx: the `ShardingContext` of this mode.
      batch_axis: for PER_HOST_V1/SLICED: one axis per flattened `(features, labels)` tensor; None = axis 0.
      whole_host_keys: feature keys that PER_HOST_V1/SLICED hand unsplit to every replica of a host, as
        `WholeHostBatch` (the embedding inputs, which the embedding host stage joins per host anyway).
    """

    def __init__(
        self,
        call_input_fn: Callable[[TPUContext], Any],
        ctx: ShardingContext,
        batch_axis: Optional[Sequence[int]] = None,
        whole_host_keys: Sequence[str] = (),
    ):
        self._call_input_fn = call_input_fn
        self._ctx = ctx
        self._batch_axis = batch_axis
        self._whole_host_keys = tuple(whole_host_keys)
        self._reader: Optional[InputReader] = None

    def build(self) -> List[tf.compat.v1.train.SessionRunHook]:
        """Calls `input_fn` (outside any loop) and returns the hooks that start the input.

        Raises:
          TypeError: `input_fn` returned tensors where the mode needs a `Dataset` (PREDICT, PER_HOST_V2).
        """
        ctx = self._ctx
        input_mode = ctx.input_mode
        # As upstream: tensors (not a Dataset) are fed in every input mode but PER_HOST_V2, outside PREDICT.
        allow_tensors = ctx.mode != ModeKeys.PREDICT and input_mode != InputPipelineConfig.PER_HOST_V2
        sleep_secs = ctx.config.tpu_config.initial_infeed_sleep_secs
        sources = []
        for device, index, total, consumed in ctx.input_fn_invocations():
            context = TPUContext(
                ctx,
                input_device=device,
                invocation_index=index,
                call_from_input_fn=True,
                host_id=ctx.host_of_invocation(index),
                replicas_consumed=consumed,
                total_invocations=total,
            )
            with tf.device(device):
                result = self._call_input_fn(context)
            if ctx.mode == ModeKeys.PREDICT and not _is_dataset(result):
                raise TypeError(
                    "For mode PREDICT, `input_fn` must return `Dataset` instead of `features` and `labels`."
                )
            if input_mode == InputPipelineConfig.PER_HOST_V2 and not _is_dataset(result):
                raise TypeError("`input_fn` must return a `Dataset` for the PER_HOST_V2 input pipeline configuration.")
            # The position of a training dataset marked by `input_position.checkpoint_position` is checkpointed.
            position_index = None
            if ctx.mode == ModeKeys.TRAIN and input_position.is_marked(result):
                position_index = sum(source.position is not None for source in sources)
            sources.append(_Source(result, device, allow_tensors, sleep_secs, position_index))
        self._reader = self._reader_of_mode(input_mode, sources)
        initializers = [s.initializer for s in sources if s.initializer is not None]
        hooks = [s.hook for s in sources if s.hook is not None]
        if initializers:
            positions = [s.position for s in sources if s.position is not None]
            hooks.insert(0, DatasetInitializerHook(initializers, sleep_secs, positions))
        return hooks

    def _reader_of_mode(self, input_mode: InputPipelineConfig, sources: List[_Source]) -> InputReader:
        if input_mode == InputPipelineConfig.PER_HOST_V2:
            return _PerHostV2Reader(sources, self._ctx)
        if input_mode == InputPipelineConfig.PER_SHARD_V1:
            return _PerShardReader(sources)
        broadcast = input_mode == InputPipelineConfig.BROADCAST
        return _HostBatchReader(sources, self._ctx, self._batch_axis, broadcast, self._whole_host_keys)

    def next_step(self) -> StepInput:
        """Builds one step's reads: `(features, labels)` for every replica and, in PREDICT, the padding masks.

        In TRAIN the floating features and labels are checked to be finite (`checked_finite`).
        """
        step = self._reader.read()
        if self._ctx.mode != ModeKeys.PREDICT:
            for features, labels in step.per_replica:
                _check_static_shapes(features, labels)
        if self._ctx.mode == ModeKeys.TRAIN:
            step = step._replace(per_replica=checked_finite(step.per_replica))
        return step


def checked_finite(per_replica: List[Tuple[Any, Any]]) -> List[Tuple[Any, Any]]:
    """The replicas' `(features, labels)`, whose floating values are read only once all are checked to be finite.

    A NaN or Inf in the input would otherwise surface as a non-finite gradient (of an embedding table, a weight) or
    loss, blamed on the model; this check names the feature or label instead: InvalidArgumentError
    `Non-finite training input features['dense'] (from input_fn): Tensor had NaN values`. It is one sum per
    floating tensor and one conditional per step and host (`embedding.engine.check_all_finite`), on the host that read the
    input.
    """
    # One check per device the input was read on (each host's CPU on a cluster): no host's input crosses the
    # network to be checked.
    groups: dict = {}  # device -> path -> tensors
    seen = set()
    for features, labels in per_replica:
        if isinstance(features, dict):  # a host batch every replica of the host shares is named by its key
            features = {k: v.tensor if isinstance(v, WholeHostBatch) else v for k, v in features.items()}
        for path, value in _leaves_with_paths(features, "features") + _leaves_with_paths(labels, "labels"):
            tensor = value.values if isinstance(value, tf.SparseTensor) else value
            if isinstance(tensor, tf.Tensor) and tensor.dtype.is_floating and id(tensor) not in seen:
                seen.add(id(tensor))
                groups.setdefault(tensor.device, {}).setdefault(path, []).append(tensor)
    if not groups:
        return per_replica
    gates = {}
    for device, paths in groups.items():
        with tf.device(device or None):
            gates[device] = engine.check_all_finite(
                [
                    (tensors, "Non-finite training input {} (from input_fn)".format(path))
                    for path, tensors in paths.items()
                ]
            )

    gated: dict = {}  # id(object) -> gated object: one gated copy of a value that replicas share

    def gate_leaf(value):
        if id(value) in gated:
            return gated[id(value)]
        result = value
        if isinstance(value, tf.SparseTensor) and value.values.dtype.is_floating:
            with tf.device(value.values.device or None), tf.control_dependencies([gates[value.values.device]]):
                result = tf.SparseTensor(value.indices, tf.identity(value.values), value.dense_shape)
        elif isinstance(value, tf.Tensor) and value.dtype.is_floating:
            with tf.device(value.device or None), tf.control_dependencies([gates[value.device]]):
                result = tf.identity(value)
        elif isinstance(value, WholeHostBatch):
            inner = gate_leaf(value.tensor)
            result = value if inner is value.tensor else WholeHostBatch(inner)
        gated[id(value)] = result
        return result

    def gate_nest(value):
        if isinstance(value, dict):
            return type(value)((key, gate_nest(item)) for key, item in value.items())
        if isinstance(value, list):
            return [gate_nest(item) for item in value]
        if isinstance(value, tuple) and not isinstance(value, WholeHostBatch):
            items = [gate_nest(item) for item in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return gate_leaf(value)

    return [(gate_nest(features), gate_nest(labels)) for features, labels in per_replica]
