"""TensorFlow's start-up noise is dropped, other lines are kept; Python log levels follow --verbose."""

import logging

from tpu_estimator.app import quiet

NOISE = [
    "2026-11-23 11:23:46.104333: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on. You may see",
    "2026-11-23 11:23:46.149754: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] Unable to register "
    "cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered",
    "2026-11-23 11:23:46.155658: I external/local_tsl/tsl/cuda/cudart_stub.cc:31] Could not find cuda drivers on your "
    "machine, GPU will not be used.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.",
    "2026-11-23 11:23:46.897274: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT Warning: Could not "
    "find TensorRT",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795433041.138296   12209 port.cc:153] oneDNN custom operations are on.",
]
KEPT = [
    "2026-11-23 11:34:33.351055: W tensorflow/core/framework/op_kernel.cc:1839] OP_REQUIRES failed at "
    "save_restore_v2_ops.cc:233 : NOT_FOUND: Key deep_cat_0/Adagrad not found in checkpoint",
    "tpu-estimator train: error: train.steps: must be positive, got 0",
]


def test_noise_lines_are_recognised_and_others_kept():
    assert all(quiet.is_noise(line) for line in NOISE)
    assert not any(quiet.is_noise(line) for line in KEPT)


def test_python_log_levels_follow_verbose():
    tf = quiet.import_tensorflow()
    logger = tf.get_logger()
    quiet.configure_logging(verbose=True)
    assert logger.level == logging.INFO and logger.propagate == (not logger.handlers)
    quiet.configure_logging(verbose=False)
    assert logger.level == logging.WARNING
    record = logging.LogRecord("tensorflow", logging.WARNING, "/x/deprecation.py", 1, "deprecated", (), None)
    assert not logger.filter(record)  # API deprecation notices are dropped by default
    quiet.configure_logging(verbosity=-2)
    assert logger.level == logging.ERROR
    quiet.configure_logging(verbose=False)
