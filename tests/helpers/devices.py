"""Logical CPU devices for the eager (TF2) tests: 4, configured once before TensorFlow's context starts."""

import tensorflow as tf

NUM_LOGICAL_CPUS = 4


def logical_cpus(n: int = NUM_LOGICAL_CPUS) -> list:
    """Configures n logical CPUs (if TF is not initialised yet) and returns the CPU device names."""
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError:
        pass  # Already configured (tests/conftest.py does it first).
    return [d.name for d in tf.config.list_logical_devices("CPU")]
