"""Keras 2 (tf-keras), which TPUEstimator programs and feature columns need: `tf.compat.v1.layers`,
`DenseFeatures`, `SequenceFeatures`, TPU embedding columns.

From TensorFlow 2.16 on, `tf.keras` (and `tf.compat.v1.layers`, which is Keras' legacy layers) is Keras 3 unless
`TF_USE_LEGACY_KERAS=1` is set, in which case it is the `tf-keras` package. TensorFlow reads the variable when
`tf.keras` is first used (its lazy loader), not when TensorFlow is imported. `select_keras2()` sets it for the user
when tf-keras is installed: `import tpu_estimator` calls it, so a program that imports tpu_estimator before it
first touches `tf.keras` gets Keras 2 without exporting anything. This module imports TensorFlow only in
`require_keras2()`.
"""

import importlib.util
import os
import sys
from typing import Optional, Tuple

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
_TRUE = ("true", "True", "1")  # What TensorFlow accepts.


class Keras2RequiredError(RuntimeError):
    """Keras 2 is needed but `tf.keras` is Keras 3 (or tf-keras is missing)."""


def tensorflow_version() -> Optional[Tuple[int, int]]:
    """(major, minor) of the installed TensorFlow, read without importing it when it is not imported yet."""
    version = getattr(sys.modules.get("tensorflow"), "__version__", None)
    if version is None:
        from importlib import metadata

        for distribution in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tensorflow-macos"):
            try:
                version = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except (AttributeError, ValueError):
        return None


def _loader_keras(loader: object) -> Optional[str]:
    """`"keras2"`/`"keras3"` for a resolved `tf.keras`-like attribute (a module, or TensorFlow's KerasLazyLoader once
    used), None while it is an unused loader."""
    if type(loader).__name__ == "KerasLazyLoader":
        if not vars(loader).get("_tfll_initialized", False):
            return None
        return "keras2" if vars(loader).get("_tfll_keras_version") in ("tf_keras", "keras_2") else "keras3"
    name = getattr(loader, "__name__", "")  # The module a loader put in its place once used.
    if name.startswith(("tf_keras", "keras.api")):
        return "keras2"
    return "keras3" if name.startswith("keras") else None  # TensorFlow 2.15's own `layers` module: not Keras


def _keras_in_use() -> Optional[str]:
    """`"keras2"`/`"keras3"` when an imported TensorFlow has resolved `tf.keras` or `tf.compat.v1.layers` (each is
    resolved on its first use), else None: the choice is still open."""
    tf = sys.modules.get("tensorflow")
    version = tensorflow_version()
    if tf is None or (version is not None and version < (2, 16)):  # before 2.16 tf.keras is always Keras 2
        return None
    candidates = [vars(tf).get("keras")]
    v1 = sys.modules.get("tensorflow.compat.v1") or getattr(vars(tf).get("compat"), "v1", None)
    v1 = getattr(v1, "_tfmw_wrapped_module", v1)  # TensorFlow's module wrapper: its module's own attributes
    if v1 is not None:
        candidates.append(vars(v1).get("layers"))
    for loader in candidates:
        state = None if loader is None else _loader_keras(loader)
        if state is not None:
            return state
    return None


def select_keras2() -> bool:
    """Makes `tf.keras` Keras 2 on TensorFlow 2.16+ when tf-keras is installed and the user chose nothing.

    Sets `TF_USE_LEGACY_KERAS=1` unless the variable is set already (the user's choice stands), tf-keras is not
    installed, TensorFlow is older than 2.16 (its `tf.keras` is Keras 2), or TensorFlow has already resolved
    `tf.keras` to Keras 3 (too late: `require_keras2()` then says what to do).

    Returns:
      Whether the variable was set by this call.
    """
    if LEGACY_KERAS_ENV in os.environ or importlib.util.find_spec("tf_keras") is None:
        return False
    version = tensorflow_version()
    if version is not None and version < (2, 16):
        return False
    if _keras_in_use() is not None:
        return False
    os.environ[LEGACY_KERAS_ENV] = "1"
    return True


def keras3_locked_in() -> bool:
    """Whether an imported TensorFlow's `tf.keras` is already Keras 3 (setting the variable can no longer help)."""
    return _keras_in_use() == "keras3"


def message(what: str, found: str) -> str:
    """The error text: `what` needs Keras 2 but `found`; what to do."""
    import tensorflow as tf

    legacy = os.environ.get(LEGACY_KERAS_ENV) in _TRUE
    if legacy:  # Set, yet Keras 3: TensorFlow resolved tf.keras before the variable was set.
        how = (
            "TF_USE_LEGACY_KERAS=1 is set, but tf.keras was first used before it was (TensorFlow reads it then): "
            "import tpu_estimator before anything uses tf.keras, or export TF_USE_LEGACY_KERAS=1 before starting "
            "Python"
        )
    else:
        how = (
            "Import tpu_estimator before your program first uses tf.keras (it selects Keras 2), or set the "
            "environment variable TF_USE_LEGACY_KERAS=1 before TensorFlow is imported "
            "(`export TF_USE_LEGACY_KERAS=1`)"
        )
    return (
        f"{what} needs Keras 2 (tf-keras), but {found}. {how}; install tf-keras matching your TensorFlow "
        f"(pip install 'tf-keras=={tf.__version__.rsplit('.', 1)[0]}.*') if it is missing. The tpu-estimator-run "
        "launcher does all this for you."
    )


def require_keras2(what: str) -> None:
    """Raises a clear error unless `tf.keras` is Keras 2.

    Args:
      what: the thing that needs Keras 2, named for the message (e.g. "EmbeddingConfigSpec(feature_columns=...)").

    Raises:
      Keras2RequiredError: `tf.keras` is Keras 3, or it cannot be imported (tf-keras not installed).
    """
    import tensorflow as tf

    try:
        layers = tf.keras.layers
    except ImportError as error:
        raise Keras2RequiredError(message(what, f"tf.keras cannot be imported ({error})")) from None
    except RecursionError:  # TensorFlow's lazy `tf.keras` loader recurses when asked again after a failed import.
        raise Keras2RequiredError(message(what, "tf.keras cannot be imported")) from None
    if not hasattr(layers, "DenseFeatures"):
        version = getattr(tf.keras, "__version__", "3")
        raise Keras2RequiredError(message(what, f"tf.keras is Keras {version}"))


def is_keras3_layers_error(error: BaseException) -> bool:
    """Whether `error` is TensorFlow's refusal of a Keras 2 API under Keras 3 (`tf.compat.v1.layers.dense`)."""
    return isinstance(error, AttributeError) and "is not available with Keras 3" in str(error)
