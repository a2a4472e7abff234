"""SparseCore-layout checkpoints built with TensorFlow's own SparseCore code (TF 2.21+), as a TPU writes them.

TensorFlow's layout stacker (`_pywrap_sparse_core_layout.SparseCoreLayoutStacker`, the C++ code `TPUEmbeddingV2`
uses to stack, pad and rotate tables) and its CPU -> SparseCore shuffle (`tpu_embedding_v3_checkpoint_adapter.
_shard_from_cpu_to_sc`) both run on CPU. The checkpoint has the object graph of a TPU `TPUEmbeddingV2`: under the
embedding object, one variable per stack (`a_b`), one per stack and slot (`a_b/accumulators`), each saved in one
slice per chip by TF's own `TPUEmbeddingShardedSaveable`, then the layouts proto under `_sparse_core_table_layouts`
(TF's own `SparseCoreLayoutsTrackable`).
"""

import collections
from typing import Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

try:
    from tensorflow.core.tpu.kernels import sparse_core_layout_pb2  # noqa: F401 (the tests parse with it)
    from tensorflow.python.tpu import _pywrap_sparse_core_layout
    from tensorflow.python.tpu import tpu_embedding_v3 as tf_v3
    from tensorflow.python.tpu import tpu_embedding_v3_checkpoint_adapter as tf_adapter
    from tensorflow.python.tpu import tpu_embedding_v3_utils as tf_v3_utils
    from tensorflow.python.trackable import autotrackable
    from tensorflow.python.trackable import base as trackable_base

    HAVE_TF_SPARSECORE = True
except ImportError:  # TF 2.15: no SparseCore layout code.
    HAVE_TF_SPARSECORE = False

REASON = (
    "builds its fixture with TensorFlow's SparseCore layout code (sparse_core_layout_pb2, _pywrap_sparse_core_layout, "
    "tpu_embedding_v3_*), which TF 2.15 does not have: runs on the TF 2.21 leg"
)

#: name -> (rows, dim, stacking group). On 2 chips x 4 SparseCores, TF stacks 'a' and 'b' (same group; 'b' is
#: rotated onto the second chip, widths padded 4 -> 8, rows to multiples of 64); 'c' is alone and already
#: [64, 8], so its key and shape coincide with the table's.
TABLES = {"a": (50, 4, "g1"), "b": (70, 4, "g1"), "c": (64, 8, "g2")}
SLOTS = {"adagrad": ["accumulators"], "adam": ["momenta", "velocities"], "ftrl": ["accumulators", "linears"]}


def tf_layouts(tables=None, num_chips: int = 2, sparse_cores_per_chip: int = 4):
    """TensorFlow's `SparseCoreTableLayouts` for `tables` (name -> (rows, dim, group))."""
    tables = TABLES if tables is None else tables
    stacker = _pywrap_sparse_core_layout.SparseCoreLayoutStacker(
        num_partitions=num_chips, sparse_cores_per_partition=sparse_cores_per_chip, disable_table_stacking=False
    )
    for name in sorted(tables):
        rows, dim, group = tables[name]
        stacker.AddTable(
            table_name=name, table_height=rows, table_width=dim, group=group, output_samples=8, num_features=1
        )
    return stacker.GetLayouts()


def by_stack(layouts) -> "collections.OrderedDict[str, List]":
    """Stack name -> its tables' layouts, by row offset (as TensorFlow orders them)."""
    out = collections.OrderedDict()
    for layout in layouts.tables:
        out.setdefault(layout.stacked_table_name, []).append(layout)
    return collections.OrderedDict(
        (k, sorted(v, key=lambda lay: lay.sparse_core_shard_row_offset)) for k, v in out.items()
    )


def tf_stack(values: Dict[str, np.ndarray], stack_layouts: Sequence) -> np.ndarray:
    """TensorFlow's stacked SparseCore value of one stack from per-table values."""
    first = stack_layouts[0]
    shape = [first.total_rows_per_sparse_core_shard * first.num_sparse_cores, first.unsharded_padded_shape[1]]
    spec = tf_adapter._shard_info_str(shape, trackable_base.ShardInfo(offset=[0, 0], shape=shape))
    parts = [tf.constant(values[lay.table_name]) for lay in stack_layouts]
    return tf_adapter._shard_from_cpu_to_sc(parts, spec, stack_layouts).numpy()


def random_values(slots: Sequence[str], tables=None, seed: int = 0) -> Dict[Tuple[str, str], np.ndarray]:
    """(table, 'parameters' or slot) -> distinct float32 values (slots positive, as accumulators are)."""
    tables = TABLES if tables is None else tables
    rng = np.random.RandomState(seed)
    out = {}
    for name in sorted(tables):
        rows, dim, _ = tables[name]
        out[(name, "parameters")] = rng.standard_normal((rows, dim)).astype(np.float32)
        for slot in slots:
            out[(name, slot)] = rng.uniform(0.1, 2.0, (rows, dim)).astype(np.float32)
    return out


class _ShardedOnChips(trackable_base.Trackable if HAVE_TF_SPARSECORE else object):
    """A stacked variable split in rows over the chips, saved as a TPU saves it: one slice per chip (TensorFlow's
    `TPUEmbeddingShardedSaveable`), which readers see as one tensor."""

    def __init__(self, value: np.ndarray, num_chips: int, name: str):
        self._shards = [tf.Variable(part, name=name) for part in np.split(value, num_chips)]

    def _gather_saveables_for_checkpoint(self):
        def factory(name):
            n = len(self._shards)
            return [tf_v3.TPUEmbeddingShardedSaveable(v, k, n, 0, name) for k, v in enumerate(self._shards)]

        return {trackable_base.VARIABLE_VALUE_KEY: factory}


def write_checkpoint(path: str, values: Dict[Tuple[str, str], np.ndarray], slots: Sequence[str], layouts) -> str:
    """Writes a TPU `TPUEmbeddingV2`-style checkpoint `tf.train.Checkpoint(embedding=...)`; returns its path."""
    embedding = autotrackable.AutoTrackable()
    for stack, stack_layouts in by_stack(layouts).items():
        for kind in ["parameters"] + list(slots):
            per_table = {lay.table_name: values[(lay.table_name, kind)] for lay in stack_layouts}
            name = stack if kind == "parameters" else f"{stack}/{kind}"
            stacked = tf_stack(per_table, stack_layouts)
            embedding._track_trackable(_ShardedOnChips(stacked, stack_layouts[0].num_partitions, name), name)
    embedding._track_trackable(
        tf_v3_utils.SparseCoreLayoutsTrackable(tf.constant(layouts.SerializeToString())),
        tf_v3_utils.SPARSECORE_LAYOUTS_CHECKPOINT_KEY,
    )
    return tf.train.Checkpoint(embedding=embedding).save(path)
