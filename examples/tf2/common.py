"""What the programs of this folder share: their flags and their data (each connects to its TPU itself, as
TensorFlow's TPU guide writes it).

Each program trains on the .npz that `--data` names (its docstring lists the arrays) or, without `--data`, on random
data of the same form, made by its function here. The vocabulary sizes are those of the programs' tables.
"""

import numpy as np
from absl import flags

NUM_VIDEOS, NUM_USERS, NUM_WORDS, NUM_ITEMS = 32, 24, 40, 16


def define_flags(model_dir):
    """Defines the programs' flags; `model_dir` is the default of `--model_dir`."""
    flags.DEFINE_string("tpu", "", "The TPU to use.")
    flags.DEFINE_string("data", "", "Training data (.npz); random data when empty.")
    flags.DEFINE_string("model_dir", model_dir, "Where the checkpoints go.")
    flags.DEFINE_string("results", "", "Where to write the losses (JSON); nowhere when empty.")
    flags.DEFINE_integer("steps", 10, "Training steps.")
    flags.DEFINE_integer("global_batch_size", 16, "Examples per step over all replicas.")


def load_data(path, random_data):
    """The arrays of the .npz at `path` by name; `random_data()` when `path` is empty."""
    if path:
        with np.load(path) as data:
            return {name: data[name] for name in data.files}
    return random_data()


def mid_level_data(num_rows=256, seed=0):
    """tpu_embedding_mid_level.py's: `watched` and `user` ids, 3 `liked` ids (-1: none), `clicked` labels."""
    rng = np.random.RandomState(seed)
    liked = np.stack([rng.choice(NUM_VIDEOS, 3, replace=False) for _ in range(num_rows)])
    liked[rng.rand(num_rows, 3) < 0.4] = -1
    return {
        "watched": rng.randint(0, NUM_VIDEOS, num_rows),
        "liked": liked,
        "user": rng.randint(0, NUM_USERS, num_rows),
        "clicked": _labels(rng, num_rows),
    }


def v2_loop_data(num_rows=256, seed=0):
    """tpu_embedding_v2_loop.py's: queries of 0 to 3 word ids (`query_values` by `query_lengths`), `item` ids,
    `clicked` labels."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(0, 4, num_rows)
    return {
        "query_values": rng.randint(0, NUM_WORDS, lengths.sum()),
        "query_lengths": lengths,
        "item": rng.randint(0, NUM_ITEMS, num_rows),
        "clicked": _labels(rng, num_rows),
    }


def tfrs_data(num_rows=256, seed=0):
    """tfrs_keras_fit.py's: `user` and `item` ids, `clicked` labels."""
    rng = np.random.RandomState(seed)
    return {
        "user": rng.randint(0, NUM_USERS, num_rows),
        "item": rng.randint(0, NUM_ITEMS, num_rows),
        "clicked": _labels(rng, num_rows),
    }


def _labels(rng, num_rows):
    return (rng.rand(num_rows) < 0.5).astype(np.float32)
