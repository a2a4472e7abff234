"""The names legacy programs look up, mapped to our implementations.

Each table maps a TensorFlow namespace (an attribute path from the `tensorflow` module) to the names we put
there. `contrib_modules()` builds the TF1 `tensorflow.contrib.{tpu,cluster_resolver,summary}` modules.
"""

import types
from typing import Any, Callable, Dict

import tensorflow as tf

import tpu_estimator
from tpu_estimator import _tf_internal
from tpu_estimator.compat import cluster_resolver as cluster_resolver_lib
from tpu_estimator.compat import tpu_ops

ESTIMATOR_NAMES = ("TPUEstimator", "TPUEstimatorSpec", "RunConfig", "TPUConfig", "InputPipelineConfig")
EMBEDDING_PARAMETER_NAMES = (
    "AdagradParameters",
    "AdamParameters",
    "FtrlParameters",
    "StochasticGradientDescentParameters",
)


class Namespace(types.ModuleType):
    """A module of compatibility names; unknown names raise an AttributeError that says what is provided."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            "{}.{} is not provided by tpu_estimator.compat (it offers: {}). Use the tf.compat.v1 equivalent, or "
            "file an issue if a TPUEstimator program needs it.".format(
                self.__name__, name, ", ".join(sorted(n for n in vars(self) if not n.startswith("_")))
            )
        )


def make_namespace(name: str, members: Dict[str, Any], doc: str = "") -> Namespace:
    module = Namespace(name, doc)
    for key, value in members.items():
        setattr(module, key, value)
    return module


def _unavailable(name: str, reason: str) -> Callable[..., Any]:
    """A stand-in that raises a clear error when a program uses a name we cannot provide yet."""

    def unavailable(*args, **kwargs):
        del args, kwargs
        raise NotImplementedError("{} is not available in tpu_estimator.compat: {}".format(name, reason))

    unavailable.__name__ = name
    return unavailable


def embedding_config_spec() -> Any:
    """Our `EmbeddingConfigSpec` (from `tpu_estimator.experimental`), or a stand-in that explains why not."""
    try:
        from tpu_estimator import experimental
    except ImportError as e:
        return _unavailable("EmbeddingConfigSpec", "tpu_estimator.experimental does not import ({})".format(e))
    return experimental.EmbeddingConfigSpec


def estimator_names() -> Dict[str, Any]:
    """`tf.compat.v1.estimator.tpu` names."""
    return {name: getattr(tpu_estimator, name) for name in ESTIMATOR_NAMES}


def estimator_experimental_names() -> Dict[str, Any]:
    """`tf.compat.v1.estimator.tpu.experimental` names."""
    return {"EmbeddingConfigSpec": embedding_config_spec()}


def tpu_names() -> Dict[str, Any]:
    """`tf.compat.v1.tpu` names."""
    return {
        "CrossShardOptimizer": tpu_estimator.CrossShardOptimizer,
        "cross_replica_sum": tpu_estimator.cross_replica_sum,
        "outside_compilation": tpu_estimator.outside_compilation,
        "rewrite": tpu_estimator.rewrite,
        "shard": tpu_ops.shard,
        "replicate": tpu_ops.replicate,
        "batch_parallel": tpu_ops.batch_parallel,
        "initialize_system": tpu_ops.initialize_system,
        "shutdown_system": tpu_ops.shutdown_system,
        "bfloat16_scope": tpu_ops.bfloat16_scope,
    }


def embedding_parameter_names() -> Dict[str, Any]:
    """`tf.compat.v1.tpu.experimental` optimizer parameter classes, from our `embedding` package."""
    import embedding

    return {name: getattr(embedding, name) for name in EMBEDDING_PARAMETER_NAMES}


def cluster_resolver_names() -> Dict[str, Any]:
    return {"TPUClusterResolver": cluster_resolver_lib.TPUClusterResolver}


def _contrib_summary_members() -> Dict[str, Any]:
    """TF1 `tf.contrib.summary`: the graph-mode summary API that TensorFlow keeps as `summary_ops_v2`."""
    summary_ops_v2 = _tf_internal.summary_ops_v2()
    names = (
        "always_record_summaries",
        "never_record_summaries",
        "record_summaries_every_n_global_steps",
        "should_record_summaries",
        "create_file_writer",
        "scalar",
        "histogram",
        "image",
        "audio",
        "generic",
        "summary_writer_initializer_op",
        "flush",
        "initialize",
        "import_event",
        "graph",
        "eval_dir",
        "create_summary_file_writer",
        "SummaryWriter",
        "record_if",
    )
    members = {name: getattr(summary_ops_v2, name) for name in names if hasattr(summary_ops_v2, name)}
    members["all_summary_ops"] = tf.compat.v1.summary.all_v2_summary_ops
    return members


def contrib_modules() -> Dict[str, Namespace]:
    """`{module name: module}` for `tensorflow.contrib` and its `tpu`, `cluster_resolver`, `summary` modules."""
    experimental = make_namespace(
        "tensorflow.contrib.tpu.experimental",
        dict(
            estimator_experimental_names(),
            **embedding_parameter_names(),
            embedding_column=tf.compat.v1.tpu.experimental.embedding_column,
            shared_embedding_columns=tf.compat.v1.tpu.experimental.shared_embedding_columns,
        ),
    )
    tpu_members = dict(
        estimator_names(),
        **tpu_names(),
        **embedding_parameter_names(),
        TPUContext=tpu_estimator.TPUContext,
        experimental=experimental,
    )
    tpu = make_namespace("tensorflow.contrib.tpu", tpu_members, "TF1 tf.contrib.tpu, from tpu_estimator.compat.")
    resolvers = {
        name: getattr(tf.distribute.cluster_resolver, name)
        for name in dir(tf.distribute.cluster_resolver)
        if name.endswith("Resolver")
    }
    resolvers.update(cluster_resolver_names())
    cluster_resolver = make_namespace(
        "tensorflow.contrib.cluster_resolver", resolvers, "TF1 tf.contrib.cluster_resolver, from tpu_estimator.compat."
    )
    summary = make_namespace(
        "tensorflow.contrib.summary",
        _contrib_summary_members(),
        "TF1 tf.contrib.summary (graph-mode summary ops), from tpu_estimator.compat.",
    )
    contrib = make_namespace(
        "tensorflow.contrib",
        {"tpu": tpu, "cluster_resolver": cluster_resolver, "summary": summary},
        "The parts of TF1 tf.contrib that TPUEstimator programs use.",
    )
    return {module.__name__: module for module in (contrib, tpu, experimental, cluster_resolver, summary)}


def estimator_tpu_module() -> Namespace:
    """`tf.estimator.tpu` for programs written against TF1's `tf.estimator.tpu` (TF2 has no such module)."""
    experimental = make_namespace("tensorflow.estimator.tpu.experimental", estimator_experimental_names())
    return make_namespace("tensorflow.estimator.tpu", dict(estimator_names(), experimental=experimental))


def estimator_modules() -> Dict[str, Namespace]:
    """`{module name: module}` for a whole `tensorflow.estimator` and its `export`, `tpu`, `tpu.experimental`.

    For TensorFlow releases without `tf.estimator` (2.16+): the names of `tpu_estimator.estimator` (the active
    Estimator core), `export` from `tpu_estimator.estimator.export`, and `tpu` with our TPUEstimator names.
    """
    from tpu_estimator import estimator as estimator_lib

    export = make_namespace(
        "tensorflow.estimator.export",
        {name: getattr(estimator_lib.export, name) for name in estimator_lib.export.__all__},
        "tf.estimator.export, from tpu_estimator.estimator.export.",
    )
    tpu = estimator_tpu_module()
    members = {name: getattr(estimator_lib, name) for name in estimator_lib.__all__ if name != "export"}
    estimator = make_namespace(
        "tensorflow.estimator",
        dict(members, export=export, tpu=tpu),
        "tf.estimator, from tpu_estimator.estimator (TensorFlow 2.16+ has none).",
    )
    return {module.__name__: module for module in (estimator, export, tpu, tpu.experimental)}
