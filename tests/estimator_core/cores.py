"""The `tf.estimator`-shaped namespaces the tests run a model on: always ours; upstream's where it imports."""

import types

from tpu_estimator import estimator_core

OURS = types.SimpleNamespace(
    name="ours",
    Estimator=estimator_core.Estimator,
    EstimatorSpec=estimator_core.EstimatorSpec,
    ModeKeys=estimator_core.ModeKeys,
    RunConfig=estimator_core.RunConfig,
    WarmStartSettings=estimator_core.WarmStartSettings,
    TrainSpec=estimator_core.TrainSpec,
    EvalSpec=estimator_core.EvalSpec,
    train_and_evaluate=estimator_core.train_and_evaluate,
    FinalExporter=estimator_core.FinalExporter,
    LatestExporter=estimator_core.LatestExporter,
    BestExporter=estimator_core.BestExporter,
    export=estimator_core.export_lib,
)


def upstream():
    """Upstream's `tf.estimator` (TensorFlow 2.15 with tensorflow-estimator); tests calling this are marked
    `upstream`."""
    import tensorflow_estimator.python.estimator.api._v2.estimator as upstream_estimator

    return types.SimpleNamespace(
        name="upstream",
        Estimator=upstream_estimator.Estimator,
        EstimatorSpec=upstream_estimator.EstimatorSpec,
        ModeKeys=upstream_estimator.ModeKeys,
        RunConfig=upstream_estimator.RunConfig,
        WarmStartSettings=upstream_estimator.WarmStartSettings,
        TrainSpec=upstream_estimator.TrainSpec,
        EvalSpec=upstream_estimator.EvalSpec,
        train_and_evaluate=upstream_estimator.train_and_evaluate,
        FinalExporter=upstream_estimator.FinalExporter,
        LatestExporter=upstream_estimator.LatestExporter,
        BestExporter=upstream_estimator.BestExporter,
        export=upstream_estimator.export,
    )
