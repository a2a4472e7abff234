"""The Criteo click-log schema: feature names, TFRecord keys and cardinalities (no TensorFlow import).

`criteo` (the readers) re-exports these names; the config loader uses this module so that a config can be
validated without importing TensorFlow.
"""

from typing import List, Optional, Tuple

NUM_DENSE_FEATURES = 13
NUM_CATEGORICAL_FEATURES = 26
TSV_NUM_FIELDS = 1 + NUM_DENSE_FEATURES + NUM_CATEGORICAL_FEATURES

DENSE_FEATURE_NAME = "dense"
CATEGORICAL_FEATURE_NAMES: Tuple[str, ...] = tuple(f"cat_{i}" for i in range(NUM_CATEGORICAL_FEATURES))

TFRECORD_LABEL_KEY = "label"
TFRECORD_DENSE_KEYS: Tuple[str, ...] = tuple(f"I{i + 1}" for i in range(NUM_DENSE_FEATURES))
TFRECORD_CATEGORICAL_KEYS: Tuple[str, ...] = tuple(f"C{i + 1}" for i in range(NUM_CATEGORICAL_FEATURES))

# Distinct values per categorical feature C1..C26 in the public Criteo Kaggle (Display Advertising Challenge)
# training set, as used by the DLRM reference implementation.
CRITEO_KAGGLE_CARDINALITIES: Tuple[int, ...] = (
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
)


def criteo_cardinalities(max_vocab: Optional[int] = None, scale: float = 1.0) -> List[int]:
    """Returns the 26 Criteo Kaggle cardinalities, optionally scaled down.

    Args:
      max_vocab: if set, every cardinality is capped at this value.
      scale: every cardinality is multiplied by this factor (rounded, at least 1) before capping.

    Returns:
      A list of 26 positive ints.
    """
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    if max_vocab is not None and max_vocab < 1:
        raise ValueError(f"max_vocab must be positive, got {max_vocab}")
    sizes = [max(1, int(round(c * scale))) for c in CRITEO_KAGGLE_CARDINALITIES]
    if max_vocab is not None:
        sizes = [min(s, max_vocab) for s in sizes]
    return sizes
