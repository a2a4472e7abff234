"""The `tf.estimator`-shaped namespaces the tests run a model on: always ours; upstream's where it imports."""

import types

from tpu_estimator import estimator_core

# The names each namespace takes from its `tf.estimator`-shaped module, and `export` its export module.
NAMES = (
    "Estimator",
    "EstimatorSpec",
    "ModeKeys",
    "RunConfig",
    "WarmStartSettings",
    "TrainSpec",
    "EvalSpec",
    "train_and_evaluate",
    "FinalExporter",
    "LatestExporter",
    "BestExporter",
)


def _namespace(name: str, module, export) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, export=export, **{n: getattr(module, n) for n in NAMES})


OURS = _namespace("ours", estimator_core, estimator_core.export_lib)


def upstream():
    """Upstream's `tf.estimator` (TensorFlow 2.15 with tensorflow-estimator); tests calling this are marked
    `upstream`."""
    import tensorflow_estimator.python.estimator.api._v2.estimator as upstream_estimator

    return _namespace("upstream", upstream_estimator, upstream_estimator.export)
