"""The check that a batch splits evenly over the replicas or shards that share it, with one message wherever a batch
size is checked: the estimator's global batch per mode (`context.py`), a feature's batch dimension when the input
pipeline splits it (`input_pipeline.py`), the YAML config (`app/config_file.py`) and the setup benchmark's programs
(`app/setup_benchmark.py`). Imports no TensorFlow: the command line checks its config before importing it.
"""


def check_divisible(batch_size: int, what: str, parts: int, parts_name: str) -> None:
    """Raises unless `batch_size` splits into `parts` equal parts.

    Args:
      batch_size: the batch size (rows).
      what: what holds the batch, as the user names it (e.g. "train batch size", "train.batch_size").
      parts: how many parts it is split into.
      parts_name: what the parts are (e.g. "number of replicas", "tpu.num_shards").

    Raises:
      ValueError: `batch_size` is not a multiple of `parts`, naming both.
    """
    if batch_size % parts:
        raise ValueError("{} {} must be divisible by {} {}".format(what, batch_size, parts_name, parts))
