"""Where shards live: GPUs when visible, otherwise logical CPU devices of the session."""

import functools
import os
from typing import List, Optional

import tensorflow as tf

NUM_SHARDS_ENV = "TPU_ESTIMATOR_NUM_SHARDS"
HOST_DEVICE = "/device:CPU:0"


@functools.lru_cache(maxsize=None)
def num_gpus() -> int:
    """Number of GPUs TensorFlow sees in this process."""
    return len(tf.config.list_physical_devices("GPU"))


def configured_num_shards(configured: Optional[int]) -> Optional[int]:
    """The shard count asked for: `$TPU_ESTIMATOR_NUM_SHARDS`, else `configured`, else None (use the devices).

    Raises:
      ValueError: the environment variable is not a positive integer.
    """
    override = os.environ.get(NUM_SHARDS_ENV)
    if override:
        try:
            value = int(override)
        except ValueError:
            value = 0
        if value <= 0:
            raise ValueError("{} must be a positive integer, got {!r}".format(NUM_SHARDS_ENV, override))
        return value
    if configured:
        return int(configured)
    return None


def resolve_num_shards(configured: Optional[int]) -> int:
    """The shard count: `$TPU_ESTIMATOR_NUM_SHARDS`, else `configured`, else the GPU count, else 1.

    Raises:
      ValueError: the environment variable is not a positive integer.
    """
    return configured_num_shards(configured) or max(num_gpus(), 1)


def shard_devices(num_shards: int) -> List[str]:
    """Device names of the shards: GPU i when there are enough GPUs, else logical CPU i."""
    if num_gpus() >= num_shards and num_gpus() > 0:
        return ["/device:GPU:%d" % i for i in range(num_shards)]
    return ["/device:CPU:%d" % i for i in range(num_shards)]


def session_config_for_shards(base: tf.compat.v1.ConfigProto, num_shards: int) -> tf.compat.v1.ConfigProto:
    """A copy of `base` that gives the session one logical CPU device per shard when shards run on CPUs."""
    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(base)
    config.allow_soft_placement = True
    if shard_devices(num_shards)[0].startswith("/device:CPU") and num_shards > 1:
        config.device_count["CPU"] = max(config.device_count.get("CPU", 1), num_shards)
    return config
