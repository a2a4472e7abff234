"""Test-wide settings: Keras 2 (tf-keras), quiet TensorFlow logs; 4 logical CPU devices for the eager tests."""

import os

# Must precede the first TensorFlow import: on TF >= 2.16 `tf.keras` is then tf-keras (Keras 2, with DenseFeatures).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tests.helpers import devices

devices.logical_cpus()
