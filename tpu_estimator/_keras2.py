"""Keras 2 (tf-keras), which feature columns need: `DenseFeatures`, `SequenceFeatures`, TPU embedding columns.

From TensorFlow 2.16 on, `tf.keras` is Keras 3 unless `TF_USE_LEGACY_KERAS=1` was set before TensorFlow was
imported (then it is the `tf-keras` package). Keras 3 has no `DenseFeatures`/`SequenceFeatures`, through which
models consume TPU embedding columns. The check is on what `tf.keras` provides, not on version numbers.
"""

import tensorflow as tf


class Keras2RequiredError(RuntimeError):
    """Keras 2 is needed but `tf.keras` is Keras 3 (or tf-keras is missing)."""


def _message(what: str, found: str) -> str:
    return (
        f"{what} needs Keras 2 (tf.keras.layers.DenseFeatures), but {found}. Set the environment variable "
        "TF_USE_LEGACY_KERAS=1 before TensorFlow is first imported (e.g. `export TF_USE_LEGACY_KERAS=1`, or "
        "os.environ['TF_USE_LEGACY_KERAS'] = '1' at the top of your program), and install tf-keras matching your "
        f"TensorFlow (pip install 'tf-keras=={tf.__version__.rsplit('.', 1)[0]}.*'). The tpu-estimator-run launcher "
        "sets the variable for you."
    )


def require_keras2(what: str) -> None:
    """Raises a clear error unless `tf.keras` is Keras 2.

    Args:
      what: the thing that needs Keras 2, named for the message (e.g. "EmbeddingConfigSpec(feature_columns=...)").

    Raises:
      Keras2RequiredError: `tf.keras` is Keras 3, or it cannot be imported (tf-keras not installed).
    """
    try:
        layers = tf.keras.layers
    except ImportError as error:
        raise Keras2RequiredError(_message(what, f"tf.keras cannot be imported ({error})")) from None
    except RecursionError:  # TensorFlow's lazy `tf.keras` loader recurses when asked again after a failed import.
        raise Keras2RequiredError(_message(what, "tf.keras cannot be imported")) from None
    if not hasattr(layers, "DenseFeatures"):
        version = getattr(tf.keras, "__version__", "3")
        raise Keras2RequiredError(_message(what, f"tf.keras is Keras {version}"))
