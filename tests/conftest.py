"""Test-wide settings: quiet TensorFlow logs; 4 logical CPU devices for the eager multi-device tests."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tests.helpers import devices

devices.logical_cpus()
