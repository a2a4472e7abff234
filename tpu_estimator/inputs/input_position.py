"""The training input's position in the model's checkpoints: `checkpoint_position(dataset)`.

A training `input_fn` may mark the dataset it returns with `checkpoint_position`; every checkpoint of the run then
holds where that dataset's iterator stands, and a run resumed from the checkpoint reads on from exactly there (with
a deterministic dataset, kill -9 + resume trains on the same batches as an uninterrupted run). Unmarked datasets
start again from their beginning, as upstream's `TPUEstimator` does without a `CheckpointInputPipelineHook`.

The position is saved with TensorFlow's iterator checkpointing (`SerializeIterator`, as upstream's
`CheckpointInputPipelineHook` and `tf.data.experimental.make_saveable_from_iterator`), but in the model's checkpoint
(one file set, one writer: the chief's `CheckpointSaverHook`), so model and input can never disagree. The
iterator is not saved as it stands when the checkpoint is written: the embedding infeed thread
(`embedding_infeed.py`) reads several steps ahead of the step, so at a save the iterator is past the batches the
model has trained on. Instead:

* the reader takes a snapshot of the iterator (a copy into a second iterator, `pending`) at its first read after
  each save asked for one, and counts its reads;
* a save promotes the snapshot to the `base` iterator when the model has consumed every batch read before it (else
  it keeps the older base), and writes the base's state with `skip`, the batches the model consumed since the base;
* a resumed run restores the base into the training iterator and reads and drops `skip` batches before the first
  step.

So `skip` is at most the batches of one checkpoint interval plus the read-ahead, read once at a resume, and a
snapshot costs one iterator copy per checkpoint. The iterators hold their buffers (shuffle, prefetch) three times.
State outside `tf.data` (the Python state of a `py_function`) is not saved.

Checkpoint keys: `input_position/{i}/iterator` (the base's state, bytes: a serialized TensorProto) and `input_position/{i}/skip`, for the i-th
marked dataset of the graph (one per `input_fn` call).
"""

import weakref
from typing import Any, Callable, List

import tensorflow as tf

from tpu_estimator import _tf_internal

# Per graph: the marked datasets (not a graph collection, which a MetaGraph would try to serialize; not on the
# dataset, which `checkpoint_position` returns as it is).
_MARKED: "weakref.WeakKeyDictionary[tf.Graph, list]" = weakref.WeakKeyDictionary()
KEY_PREFIX = "input_position"
_IGNORE_EXTERNAL_STATE = 1  # `SerializeIterator`'s external_state_policy: 0 warn, 1 ignore, 2 fail.


def checkpoint_position(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Marks the dataset a training `input_fn` returns: its position is saved in every checkpoint.

    Call it in `input_fn` (graph mode, as `TPUEstimator` calls it) on the dataset it returns. It has effect in
    TRAIN only; evaluation and prediction read their input from the start as always.

    Args:
      dataset: the dataset `input_fn` returns.

    Returns:
      `dataset` itself.

    Raises:
      RuntimeError: called eagerly (outside an `input_fn`).
    """
    if tf.executing_eagerly():
        raise RuntimeError("checkpoint_position(dataset) is called in input_fn, while TPUEstimator builds its graph.")
    _MARKED.setdefault(tf.compat.v1.get_default_graph(), []).append(dataset)
    return dataset


def is_marked(dataset: Any) -> bool:
    """Whether `checkpoint_position` marked `dataset` in the default graph."""
    return any(marked is dataset for marked in _MARKED.get(tf.compat.v1.get_default_graph(), []))


def _serialize(iterator) -> tf.Tensor:
    return tf.raw_ops.SerializeIterator(
        resource_handle=_tf_internal.iterator_resource(iterator), external_state_policy=_IGNORE_EXTERNAL_STATE
    )


def _copy(destination, source) -> tf.Operation:
    """Sets `destination` (an initialized iterator of the same dataset) to where `source` stands."""
    return tf.raw_ops.DeserializeIterator(
        resource_handle=_tf_internal.iterator_resource(destination), serialized=_serialize(source)
    )


def _local_variable(name: str, value) -> tf.Variable:
    # In no collection: neither initialized by the session's init ops nor saved by the Saver (the saveable below
    # saves what it needs), so a restored `skip` is not overwritten and an unrestored one is uninitialized.
    return tf.compat.v1.Variable(value, name=name, trainable=False, collections=[], use_resource=True)


class _PositionSaveable(_tf_internal.SaveableObject):
    """Saves the base iterator's state and `skip`; restoring initializes the base iterator and restores both."""

    def __init__(self, position: "InputPosition"):
        self._position = position
        name = position.key
        specs = [
            _tf_internal.SaveSpec(
                lambda: position.save_tensors()[0], "", name + "/iterator", dtype=tf.string, device=position.device
            ),
            _tf_internal.SaveSpec(
                lambda: position.save_tensors()[1], "", name + "/skip", dtype=tf.int64, device=position.device
            ),
        ]
        super().__init__(_tf_internal.iterator_resource(position.base), specs, name)

    def restore(self, restored_tensors, restored_shapes):
        del restored_shapes
        state, skip = restored_tensors
        position = self._position
        with tf.device(position.device):
            with tf.control_dependencies([position.base.initializer]):
                restore_base = tf.raw_ops.DeserializeIterator(
                    resource_handle=_tf_internal.iterator_resource(position.base),
                    serialized=tf.io.parse_tensor(state, tf.variant),
                )
            return tf.group(restore_base, position.skip.assign(skip))


class InputPosition(object):
    """The checkpointed position of one training iterator (see the module docstring).

    Args:
      dataset: the marked dataset.
      iterator: the training iterator made of it (initialized by the input pipeline's hook).
      device: where the iterator lives.
      index: its index among the positions of the graph (one per `input_fn` call), in its checkpoint keys.
    """

    def __init__(self, dataset: tf.data.Dataset, iterator, device: str, index: int):
        graph = tf.compat.v1.get_default_graph()
        self.key = "{}/{}".format(KEY_PREFIX, index)
        self.device = device
        self.main = iterator
        self.reads_per_step = 0  # reads built into the step (PER_HOST_V2: one per replica of the host)
        with tf.device(device), _tf_internal.outside_control_flow(graph), tf.name_scope(self.key):
            self.pending = tf.compat.v1.data.make_initializable_iterator(dataset)
            self.base = tf.compat.v1.data.make_initializable_iterator(dataset)
            self.want_snapshot = _local_variable("want_snapshot", True)
            self.pending_index = _local_variable("pending_index", tf.constant(-1, tf.int64))
            self.read_count = _local_variable("read_count", tf.constant(0, tf.int64))
            self.base_index = _local_variable("base_index", tf.constant(0, tf.int64))
            self.start_step = _local_variable("start_step", tf.constant(0, tf.int64))
            self.skip = _local_variable("skip", tf.constant(0, tf.int64))
        self._save_tensors = None
        graph.add_to_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS, _PositionSaveable(self))

    def read(self, get_next: Callable[[], Any]) -> Any:
        """`get_next()` of the training iterator, with the snapshot asked for and the read counted."""
        self.reads_per_step += 1
        with tf.device(self.device):

            def snapshot():
                copied = _copy(self.pending, self.main)
                with tf.control_dependencies([copied]):
                    noted = self.pending_index.assign(self.read_count.read_value())
                with tf.control_dependencies([noted]):
                    done = self.want_snapshot.assign(False)
                with tf.control_dependencies([done]):
                    return tf.constant(True)

            taken = tf.cond(self.want_snapshot.read_value(), snapshot, lambda: tf.constant(False))
            with tf.control_dependencies([taken]):
                element = get_next()
            with tf.control_dependencies(tf.nest.flatten(element, expand_composites=True)):
                counted = self.read_count.assign_add(1)
            with tf.control_dependencies([counted]):
                return tf.nest.map_structure(tf.identity, element, expand_composites=True)

    def _consumed(self) -> tf.Tensor:
        """Reads of the training iterator whose batches the model has consumed (from the global step)."""
        global_step = tf.compat.v1.train.get_global_step()
        if global_step is None:
            raise ValueError("checkpoint_position needs the global step (create it before the input is built).")
        steps = tf.cast(global_step, tf.int64) - self.start_step.read_value()
        return self.reads_per_step * steps

    def save_tensors(self) -> List[tf.Tensor]:
        """`[base iterator state, skip]` as a save writes them.

        The chief's saver writes the checkpoint of the start step when the session starts, before the input
        pipeline's hook has initialized the iterators: that save writes the position the session restored (or the
        dataset's start). Later saves promote the snapshot where they can (see the module docstring).
        """
        if self._save_tensors is None:
            with tf.device(self.device), tf.name_scope(self.key + "/save"):

                def promote_and_skip():
                    consumed = self._consumed()
                    pending = self.pending_index.read_value()

                    def promote():
                        copied = _copy(self.base, self.pending)
                        with tf.control_dependencies([copied]):
                            noted = tf.group(self.base_index.assign(pending), self.pending_index.assign(-1))
                        with tf.control_dependencies([noted]):
                            asked = self.want_snapshot.assign(True)
                        with tf.control_dependencies([asked]):
                            return tf.constant(True)

                    usable = tf.logical_and(pending >= 0, pending <= consumed)
                    promoted = tf.cond(usable, promote, lambda: tf.constant(False))
                    with tf.control_dependencies([promoted]):
                        return consumed - self.base_index.read_value()

                def before_start():
                    return tf.cond(self._restored_tensor(), self.skip.read_value, self._initialize_base)

                started = tf.compat.v1.is_variable_initialized(self.start_step)
                skip = tf.cond(started, promote_and_skip, before_start)
                with tf.control_dependencies([skip]):
                    # Saved as bytes (a serialized TensorProto of the iterator state), so that every value of the
                    # checkpoint reads as NumPy (a variant does not: `CheckpointReader.get_tensor` fails on it).
                    state = tf.io.serialize_tensor(_serialize(self.base))
            self._save_tensors = [state, skip]
        return self._save_tensors

    def _restored_tensor(self) -> tf.Tensor:
        # `skip` is assigned only by a restore (the saveable's) until the session has started.
        return tf.compat.v1.is_variable_initialized(self.skip)

    def _initialize_base(self) -> tf.Tensor:
        """The base iterator at the dataset's start (a new run's first checkpoint); 0 batches to skip."""
        # Built here, in the branch: a control input on the iterator's own initializer (built outside) would run
        # it whichever branch is taken.
        dataset = self.base.initializer.inputs[0]
        initialized = tf.raw_ops.MakeIterator(dataset=dataset, iterator=_tf_internal.iterator_resource(self.base))
        with tf.control_dependencies([initialized]):
            return tf.constant(0, tf.int64)

    def build_start_ops(self) -> None:
        """Builds what `start` runs (before the graph is finalized)."""
        with tf.device(self.device), tf.name_scope(self.key + "/start"):
            self._restored = self._restored_tensor()
            self._skip_value = self.skip.read_value()
            self._restore_main = _copy(self.main, self.base)

            def drop(i):
                element = self.main.get_next()
                with tf.control_dependencies(tf.nest.flatten(element, expand_composites=True)):
                    return i + 1

            self._drop = tf.compat.v1.while_loop(lambda i: i < self._skip_value, drop, [tf.constant(0, tf.int64)])
            global_step = tf.compat.v1.train.get_global_step()
            with tf.control_dependencies([self.base.initializer]):
                based = _copy(self.base, self.main)
            self._start = tf.group(
                based,
                self.pending.initializer,
                self.want_snapshot.initializer,
                self.pending_index.initializer,
                self.read_count.initializer,
                self.base_index.initializer,
                self.start_step.assign(tf.cast(global_step, tf.int64)),
            )
            with tf.control_dependencies([self._start]):
                self._zero_skip = self.skip.assign(0)

    def start(self, session: tf.compat.v1.Session) -> int:
        """After the training iterator is initialized: moves it to the restored position; returns the batches it
        skipped (0 without a restored position)."""
        skipped = 0
        if session.run(self._restored):
            skipped = int(session.run(self._skip_value))
            session.run(self._restore_main)
            if session.run(self._drop) != skipped:
                raise AssertionError("the input position's skip loop read {} batches".format(skipped))
        session.run(self._zero_skip)
        return skipped
