"""Test-wide settings: quiet TensorFlow logs."""
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
