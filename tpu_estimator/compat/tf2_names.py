"""The TF2 TPU names (`tf.distribute.TPUStrategy`, `tf.tpu.experimental.*`, `tf.tpu.experimental.embedding.*`,
`tf.config.experimental_connect_to_cluster`) mapped to our objects, for `install()` (patching.py).

Each name is replaced only in the API roots where TensorFlow has it, except `tf.tpu.experimental.embedding`'s
`TPUEmbeddingV2` and `RowIdInitializer`, which are added where the TensorFlow release lacks them (2.15), so that one
program runs on every release we support. TPU-only names we do not map raise a one-line error naming them.
"""

from typing import Any, Dict, List, Sequence, Tuple

import embedding
from tpu_estimator.compat import tpu_strategy

# `tf.tpu.experimental.embedding` names that are our `embedding` module's objects.
EMBEDDING_NAMES = (
    "TPUEmbedding",
    "TPUEmbeddingV2",
    "TPUEmbeddingForServing",
    "TableConfig",
    "FeatureConfig",
    "RowIdInitializer",
    "QuantizationConfig",
    "SGD",
    "Adagrad",
    "AdagradMomentum",
    "Adam",
    "FTRL",
    "serving_embedding_lookup",
)
# Added to `tf.tpu.experimental.embedding` where TensorFlow lacks them.
ADDED_EMBEDDING_NAMES = ("TPUEmbeddingV2", "RowIdInitializer")


def embedding_names() -> Dict[str, Any]:
    """`tf.tpu.experimental.embedding` names: ours, and a one-line error for the TPU-only `TPUEmbeddingV0`."""
    names = {name: getattr(embedding, name) for name in EMBEDDING_NAMES}
    names["TPUEmbeddingV0"] = tpu_strategy.tpu_only(
        "tf.tpu.experimental.embedding.TPUEmbeddingV0",
        "it runs embeddings on TPUs without embedding hardware; use tf.tpu.experimental.embedding.TPUEmbedding "
        "(or TPUEmbeddingV2), which runs on the shards here.",
    )
    return names


def _is_v1(root: str) -> bool:
    return root.endswith("v1")


def _join(root: str, path: str) -> str:
    return f"{root}.{path}" if root else path


def targets(roots: Sequence[str], resolve: Any) -> List[Tuple[str, Dict[str, Any]]]:
    """`[(namespace path, {name: our object})]` for every API root in `roots` that has the namespace.

    Args:
      roots: the API roots (`''`, `'compat.v1'`, ...; see patching.py).
      resolve: `patching._resolve`, to look a namespace up.

    Returns:
      The targets; a name is listed only where TensorFlow defines it (except the added embedding names).
    """

    def existing(path: str) -> Any:
        try:
            return resolve(path)
        except (AttributeError, ImportError):
            return None

    out = []
    embedding_members = embedding_names()
    for root in roots:
        v1 = _is_v1(root)
        wanted = {
            "distribute": {"TPUStrategy": tpu_strategy.MirroredTPUStrategy},
            "distribute.experimental": {
                "TPUStrategy": tpu_strategy.tpu_only(
                    "tf.compat.v1.distribute.experimental.TPUStrategy",
                    "TF1's TPUStrategy (steps_per_run) is not provided; use tf.distribute.TPUStrategy in a TF2 "
                    "program, or TPUEstimator.",
                )
                if v1
                else tpu_strategy.ExperimentalTPUStrategy
            },
            "config": {"experimental_connect_to_cluster": tpu_strategy.experimental_connect_to_cluster},
            "tpu.experimental": {
                "initialize_tpu_system": tpu_strategy.initialize_tpu_system,
                "shutdown_tpu_system": tpu_strategy.shutdown_tpu_system,
            },
        }
        for path, members in wanted.items():
            namespace = existing(_join(root, path))
            if namespace is None:
                continue
            present = {name: value for name, value in members.items() if hasattr(namespace, name)}
            if present:
                out.append((_join(root, path), present))
        namespace = existing(_join(root, "tpu.experimental.embedding"))
        if namespace is not None:
            present = {
                name: value
                for name, value in embedding_members.items()
                if hasattr(namespace, name) or name in ADDED_EMBEDDING_NAMES
            }
            out.append((_join(root, "tpu.experimental.embedding"), present))
    return out
