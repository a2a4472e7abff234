"""Writing evaluation results as summaries to the `eval`/`eval_<name>` directory."""

from typing import Any, Dict

import numpy as np
import tensorflow as tf
from google.protobuf import message
from tensorflow.core.framework import summary_pb2


def dict_to_str(dictionary: Dict[str, Any]) -> str:
    return ", ".join("%s = %s" % (k, v) for k, v in sorted(dictionary.items()) if not isinstance(v, bytes))


def write_dict_to_summary(output_dir: str, dictionary: Dict[str, Any], current_global_step: int) -> None:
    """Writes each scalar, array or serialized `Summary` of `dictionary` (except `global_step`) at the step."""
    tf.compat.v1.logging.info("Saving dict for global step %d: %s", current_global_step, dict_to_str(dictionary))
    writer = tf.compat.v1.summary.FileWriterCache.get(output_dir)
    proto = summary_pb2.Summary()
    for key, value in dictionary.items():
        if value is None or key == "global_step":
            continue
        if isinstance(value, (np.float32, float)):
            proto.value.add(tag=key, simple_value=float(value))
        elif isinstance(value, (np.int64, np.int32, int)):
            proto.value.add(tag=key, simple_value=int(value))
        elif isinstance(value, bytes):
            try:
                summ = summary_pb2.Summary.FromString(value)
            except message.DecodeError:
                tf.compat.v1.logging.warn("Skipping summary for %s, cannot parse string to Summary.", key)
                continue
            for i in range(len(summ.value)):
                summ.value[i].tag = "%s/%d" % (key, i)
            proto.value.extend(summ.value)
        elif isinstance(value, np.ndarray):
            entry = proto.value.add()
            entry.tag = key
            entry.node_name = key
            entry.tensor.CopyFrom(tf.make_tensor_proto(value))
        else:
            tf.compat.v1.logging.warn(
                "Skipping summary for %s, must be a float, np.float32, np.int64, np.int32 or int or np.ndarray or a "
                "serialized string of Summary.",
                key,
            )
    writer.add_summary(proto, current_global_step)
    writer.flush()


def write_checkpoint_path_to_summary(output_dir: str, checkpoint_path: str, current_global_step: int) -> None:
    """Records which checkpoint was evaluated, as a string summary `checkpoint_path`."""
    proto = summary_pb2.Summary()
    proto.value.add(tag="checkpoint_path", tensor=tf.make_tensor_proto(checkpoint_path, dtype=tf.dtypes.string))
    writer = tf.compat.v1.summary.FileWriterCache.get(output_dir)
    writer.add_summary(proto, current_global_step)
    writer.flush()
