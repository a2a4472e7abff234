"""Duck-typed stand-ins for TableConfig/FeatureConfig: preprocessing reads only their attributes."""

import dataclasses
from typing import Any, List, Optional


@dataclasses.dataclass(eq=False)
class Table:
    vocabulary_size: int
    dim: int = 2
    combiner: str = "mean"
    name: Optional[str] = None
    quantization_config: Any = None


@dataclasses.dataclass(eq=False)
class Feature:
    table: Table
    max_sequence_length: int = 0
    validate_weights_and_indices: bool = True
    output_shape: Optional[List[int]] = None
    name: Optional[str] = None
