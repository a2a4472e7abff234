"""SparseCore table layouts: how a TPU's `TPUEmbeddingV2` stores tables in its checkpoints, and the way back.

On a TPU with SparseCores, `TPUEmbeddingV2` keeps several tables in one variable (a *stack*) and shuffles their rows
over the SparseCores. Its checkpoints hold the stacked variables (and slots, laid out alike) under the stack's
name, plus a `SparseCoreTableLayouts` proto (a string under `_sparse_core_table_layouts`) with one layout per table:

- `num_sparse_cores` N (chips x SparseCores per chip) and `total_rows_per_sparse_core_shard` R: the stacked
  variable has `N * R` rows, SparseCore `s` holding rows `[s * R, (s + 1) * R)`;
- `unsharded_shape` (the table's `[rows, dim]`) and `unsharded_padded_shape` (rows padded to a multiple of 8N,
  width to a multiple of 8; the stack's width);
- `sparse_core_shard_row_offset` o: where the table's rows start inside each SparseCore's rows, and
  `sparse_core_shard_rotation` t: the SparseCore of row 0.

Row `r` of the padded table is on SparseCore `(r mod N + t) mod N`, at row `o + r div N` of that SparseCore's rows:
stacked row `((r mod N + t) mod N) * R + o + r div N`; its first `dim` columns are the table's row.

This module reads and writes the proto (its wire format, so it needs no TensorFlow proto module), maps stacked
values to tables, and lays out one table alone for a described TPU (`SparseCoreTopology`) as TensorFlow does with
table stacking disabled. `embedding.sparsecore_checkpoint` uses it to restore and write such checkpoints.
"""

import dataclasses
from typing import Dict, List, Sequence, Tuple

import numpy as np

__all__ = [
    "LAYOUTS_CHECKPOINT_KEY",
    "SparseCoreTopology",
    "TableLayout",
    "parse_layouts",
    "serialize_layouts",
    "stacked_row_indices",
    "table_layout",
    "unshuffled_layout",
    "unstack_table",
]

#: The child name under which a SparseCore `TPUEmbeddingV2` saves its `SparseCoreTableLayouts` proto.
LAYOUTS_CHECKPOINT_KEY = "_sparse_core_table_layouts"


@dataclasses.dataclass(frozen=True)
class TableLayout:
    """One table's place in a stacked SparseCore variable (a `tensorflow.tpu.SparseCoreTableLayout`)."""

    table_name: str
    stacked_table_name: str
    num_sparse_cores: int
    num_partitions: int
    total_rows_per_sparse_core_shard: int
    unsharded_shape: Tuple[int, ...]
    unsharded_padded_shape: Tuple[int, ...]
    sparse_core_shard_row_offset: int = 0
    sparse_core_shard_rotation: int = 0

    @property
    def stacked_shape(self) -> Tuple[int, int]:
        """Shape of the stacked variable holding this table: `[N * R, padded width]`."""
        return (self.num_sparse_cores * self.total_rows_per_sparse_core_shard, self.unsharded_padded_shape[1])


@dataclasses.dataclass(frozen=True)
class SparseCoreTopology:
    """The TPU a checkpoint is written for: `num_chips` chips with `sparse_cores_per_chip` SparseCores each.

    Raises:
      ValueError: a count that is not a positive int.
    """

    num_chips: int
    sparse_cores_per_chip: int = 4

    def __post_init__(self):
        for field in ("num_chips", "sparse_cores_per_chip"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"SparseCoreTopology.{field} must be a positive int, got {value!r}.")

    @property
    def num_sparse_cores(self) -> int:
        """N: the SparseCores of all chips."""
        return int(self.num_chips) * int(self.sparse_cores_per_chip)


def _round_up(value: int, multiple: int) -> int:
    return -(-int(value) // multiple) * multiple


def table_layout(table_name: str, rows: int, dim: int, topology: SparseCoreTopology) -> TableLayout:
    """The layout of a table alone in its stack (named after it), as TensorFlow's stacker gives with stacking
    disabled: rows padded to a multiple of 8N, width to a multiple of 8, no offset, no rotation."""
    n = topology.num_sparse_cores
    padded_rows = _round_up(rows, 8 * n)
    return TableLayout(
        table_name=table_name,
        stacked_table_name=table_name,
        num_sparse_cores=n,
        num_partitions=int(topology.num_chips),
        total_rows_per_sparse_core_shard=padded_rows // n,
        unsharded_shape=(int(rows), int(dim)),
        unsharded_padded_shape=(padded_rows, _round_up(dim, 8)),
    )


# --------------------------------------------------------------------------------------- proto wire format
# Field numbers of tensorflow.tpu.SparseCoreTableLayout (tensorflow/core/tpu/kernels/sparse_core_layout.proto).
_STRING_FIELDS = {1: "table_name", 2: "stacked_table_name", 12: "fdo_key"}
_INT_FIELDS = {
    3: "num_sparse_cores",
    4: "num_partitions",
    5: "total_rows_per_sparse_core_shard",
    8: "sparse_core_shard_row_offset",
    9: "sparse_core_shard_rotation",
    10: "per_sparse_core_batch_size",
    11: "num_features",
}
_REPEATED_INT_FIELDS = {6: "unsharded_shape", 7: "unsharded_padded_shape"}


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if value >= 1 << 63:  # int32 / int64 negatives are ten-byte two's complement.
        value -= 1 << 64
    return value, pos


def _fields(data: bytes):
    """(field number, wire type, value) of a message: ints for varints, bytes for length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if size < 0 or pos + size > len(data):
                raise ValueError("truncated field")
            value, pos = data[pos : pos + size], pos + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = data[pos : pos + width], pos + width
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _parse_table(data: bytes) -> TableLayout:
    out: Dict[str, object] = {"unsharded_shape": [], "unsharded_padded_shape": []}
    for number, wire, value in _fields(data):
        if number in _STRING_FIELDS and wire == 2:
            out[_STRING_FIELDS[number]] = bytes(value).decode("utf-8")
        elif number in _INT_FIELDS and wire == 0:
            out[_INT_FIELDS[number]] = int(value)
        elif number in _REPEATED_INT_FIELDS:
            target = out[_REPEATED_INT_FIELDS[number]]
            if wire == 0:
                target.append(int(value))
            elif wire == 2:  # Packed.
                pos = 0
                while pos < len(value):
                    item, pos = _varint(value, pos)
                    target.append(item)
    names = [f.name for f in dataclasses.fields(TableLayout)]
    return TableLayout(
        **{
            name: tuple(out[name]) if name.startswith("unsharded") else out.get(name, "" if "name" in name else 0)
            for name in names
        }
    )


def _check(layout: TableLayout) -> None:
    n, r = layout.num_sparse_cores, layout.total_rows_per_sparse_core_shard
    shape, padded = layout.unsharded_shape, layout.unsharded_padded_shape
    problems = []
    if not layout.table_name or not layout.stacked_table_name:
        problems.append("no table or stacked table name")
    if n < 1 or r < 1:
        problems.append(f"num_sparse_cores {n} and total_rows_per_sparse_core_shard {r} must be >= 1")
    if len(shape) != 2 or len(padded) != 2 or any(a > b for a, b in zip(shape, padded)):
        problems.append(f"unsharded_shape {list(shape)} must be 2-D and within unsharded_padded_shape {list(padded)}")
    elif n >= 1 and (padded[0] % n or layout.sparse_core_shard_row_offset + padded[0] // n > r):
        problems.append(
            f"padded rows {padded[0]} must be a multiple of num_sparse_cores {n} and fit at row offset "
            f"{layout.sparse_core_shard_row_offset} in the {r} rows of each SparseCore"
        )
    if not 0 <= layout.sparse_core_shard_rotation < max(n, 1) or layout.sparse_core_shard_row_offset < 0:
        problems.append(
            f"row offset {layout.sparse_core_shard_row_offset} must be >= 0 and rotation "
            f"{layout.sparse_core_shard_rotation} in [0, {n})"
        )
    if problems:
        raise ValueError(f"Invalid SparseCore layout of table '{layout.table_name}': {'; '.join(problems)}.")


def parse_layouts(data: bytes) -> List[TableLayout]:
    """Parses a serialized `SparseCoreTableLayouts` proto.

    Args:
      data: The proto's bytes (the value saved under `_sparse_core_table_layouts`).

    Returns:
      One `TableLayout` per table, in the proto's order.

    Raises:
      ValueError: the bytes are not such a proto, or a layout is inconsistent (tables of one stack disagreeing on
        the SparseCores, rows or width; a table not fitting its SparseCore rows), naming the table.
    """
    try:
        layouts = [
            _parse_table(bytes(value)) for number, wire, value in _fields(bytes(data)) if number == 1 and wire == 2
        ]
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(
            f"The checkpoint's `{LAYOUTS_CHECKPOINT_KEY}` is not a SparseCoreTableLayouts proto: {e}."
        ) from e
    stacks: Dict[str, TableLayout] = {}
    for layout in layouts:
        _check(layout)
        first = stacks.setdefault(layout.stacked_table_name, layout)
        if first.stacked_shape != layout.stacked_shape or first.num_sparse_cores != layout.num_sparse_cores:
            raise ValueError(
                f"Invalid SparseCore layouts: tables '{first.table_name}' and '{layout.table_name}' of stack "
                f"'{layout.stacked_table_name}' disagree on its shape ({list(first.stacked_shape)} vs "
                f"{list(layout.stacked_shape)}) or SparseCores."
            )
    return layouts


def _encode_varint(value: int) -> bytes:
    value = int(value) & ((1 << 64) - 1)
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _encode_field(number: int, wire: int, payload: bytes) -> bytes:
    head = _encode_varint(number << 3 | wire)
    return head + (_encode_varint(len(payload)) + payload if wire == 2 else payload)


def serialize_layouts(layouts: Sequence[TableLayout]) -> bytes:
    """A serialized `SparseCoreTableLayouts` proto of `layouts` (fields at their defaults are left out)."""
    out = bytearray()
    for layout in layouts:
        table = bytearray()
        for number in sorted(set(_STRING_FIELDS) | set(_INT_FIELDS) | set(_REPEATED_INT_FIELDS)):
            name = {**_STRING_FIELDS, **_INT_FIELDS, **_REPEATED_INT_FIELDS}[number]
            value = getattr(layout, name, None)
            if not value:
                continue
            if number in _STRING_FIELDS:
                table += _encode_field(number, 2, value.encode("utf-8"))
            elif number in _INT_FIELDS:
                table += _encode_field(number, 0, _encode_varint(value))
            else:  # Packed.
                table += _encode_field(number, 2, b"".join(_encode_varint(v) for v in value))
        out += _encode_field(1, 2, bytes(table))
    return bytes(out)


# ------------------------------------------------------------------------------------------------ mapping
def stacked_row_indices(layout: TableLayout) -> np.ndarray:
    """The stacked variable's row of each row of the table (int64 `[rows]`).

    Row `r` is at `((r mod N + t) mod N) * R + o + r div N` (see the module docstring).
    """
    n = layout.num_sparse_cores
    rows = np.arange(layout.unsharded_shape[0], dtype=np.int64)
    core = (rows % n + layout.sparse_core_shard_rotation) % n
    return core * layout.total_rows_per_sparse_core_shard + layout.sparse_core_shard_row_offset + rows // n


def unstack_table(stacked: np.ndarray, layout: TableLayout, what: str = "") -> np.ndarray:
    """The table `[rows, dim]` held by a stacked variable (unstacked, unshuffled, unpadded).

    Args:
      stacked: The stacked variable's value `[N * R, padded width]` (parameters or one slot).
      layout: The table's layout.
      what: How to name the value in errors (default: the stacked table's name).

    Returns:
      float `[rows, dim]` (a new array).

    Raises:
      ValueError: `stacked` is not of the stack's shape.
    """
    stacked = np.asarray(stacked)
    if tuple(stacked.shape) != layout.stacked_shape:
        raise ValueError(
            f"Cannot read table '{layout.table_name}' from {what or repr(layout.stacked_table_name)}: the "
            f"checkpoint's value has shape {list(stacked.shape)}, its SparseCore layout says "
            f"{list(layout.stacked_shape)}."
        )
    return stacked[stacked_row_indices(layout), : layout.unsharded_shape[1]]


def unshuffled_layout(
    table_name: str, checkpoint_shape: Sequence[int], table_shape: Sequence[int], num_sparse_cores: int
) -> TableLayout:
    """The layout TF 2.15's `experimental_sparsecore_restore_info` assumes: one table per key, no rotation.

    Args:
      table_name: The table (its key holds it alone).
      checkpoint_shape: Shape of the checkpoint's value `[padded rows, padded width]`.
      table_shape: The table's `[rows, dim]`.
      num_sparse_cores: `num_tpu_devices * num_sc_chips_per_tpu`.

    Raises:
      ValueError: the checkpoint's rows are not a multiple of `num_sparse_cores`, or its value is smaller than the
        table, naming the table.
    """
    rows, width = (int(d) for d in checkpoint_shape)
    if rows % num_sparse_cores or rows < table_shape[0] or width < table_shape[1]:
        raise ValueError(
            f"Cannot restore '{table_name}' with experimental_sparsecore_restore_info ({num_sparse_cores} "
            f"SparseCores): the checkpoint's value has shape {[rows, width]}, which must have a multiple of "
            f"{num_sparse_cores} rows and hold the table's {list(table_shape)}."
        )
    return TableLayout(
        table_name=table_name,
        stacked_table_name=table_name,
        num_sparse_cores=num_sparse_cores,
        num_partitions=1,
        total_rows_per_sparse_core_shard=rows // num_sparse_cores,
        unsharded_shape=tuple(int(d) for d in table_shape),
        unsharded_padded_shape=(rows, width),
    )
