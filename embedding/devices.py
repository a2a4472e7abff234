"""Device names: the host CPU of a device, and device strings that compare equal when they name one device."""

from typing import Optional, Union

import tensorflow as tf

DeviceLike = Optional[Union[str, tf.DeviceSpec]]


def host_device(device: DeviceLike) -> str:
    """CPU:0 of the task holding `device`, where host-side work for it runs ('' when `device` is unplaced).

    Args:
      device: a device string or `tf.DeviceSpec`, or None.

    Returns:
      A device string, or '' (no placement) for None, '' or a spec without device type, job and task.
    """
    if not device:
        return ""
    spec = tf.DeviceSpec.from_string(device) if isinstance(device, str) else device
    if spec.device_type is None and spec.job is None and spec.task is None:
        return ""
    return spec.replace(device_type="CPU", device_index=0).to_string()


def canonical_device(device: DeviceLike) -> str:
    """A comparable device string ('/job:localhost/replica:0/task:0/device:CPU:0' style where known)."""
    spec = tf.DeviceSpec.from_string(device) if isinstance(device, str) else device
    full = tf.DeviceSpec(job="localhost", replica=0, task=0)
    return full.make_merged_spec(spec).to_string()
