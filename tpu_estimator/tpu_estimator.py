"""`TPUEstimator`: dispatches each mode to upstream's CPU path or to the shards."""

import dataclasses
import enum
import functools
import os
import sys
import tempfile
from typing import Any, Callable, Optional

import tensorflow as tf

from tpu_estimator import _estimator_lib
from tpu_estimator.checkpoints import checkpoint_state, train_guard
from tpu_estimator.hosts import cluster as cluster_lib
from tpu_estimator.hosts import collectives, host_report, host_train_and_evaluate
from tpu_estimator.inputs import data_errors
from tpu_estimator.inputs.deferred_input import DeferredInput
from tpu_estimator.modes import cpu_path, host_agreement, predict_step, shared_stages
from tpu_estimator.modes import hooks as hooks_lib
from tpu_estimator.modes.eval_loop import EvalLoop
from tpu_estimator.modes.train_loop import TrainLoop, TrainLoopSettings
from tpu_estimator.specs.context import ShardingContext
from tpu_estimator.tpu_config import (
    InputPipelineConfig,
    RunConfig,
    check_positive_integer,
    check_training_input_configuration,
    input_pipeline_config_name,
    parse_iterations_per_loop,
)

ModeKeys = _estimator_lib.ModeKeys
_RESERVED_PARAMS_KEYS = ["batch_size", "context"]


def _check_int32(value: int, name: str) -> None:
    """Raises ValueError naming `name` unless the batch size fits TensorFlow's int32 shapes and counters (a batch of
    2**31 rows otherwise ends in an `OverflowError` deep in graph construction)."""
    if value >= 2**31:
        raise ValueError("{} must be less than 2**31 (TensorFlow's int32 batch dimension), got {}".format(name, value))


# The mode of the {serve, tpu} export metagraph (upstream's name).
INFERENCE_ON_TPU_MODE = "_inference_on_tpu"


# With one process per host, how long the other hosts wait for the chief's export (it restores whole tables).
EXPORT_WAIT_SECS = 3600.0


class ExportSavedModelApiVersion(enum.Enum):
    V1 = 1
    V2 = 2


_HOOKS_OF_MODE = {
    ModeKeys.TRAIN: ("training_hooks", "train()"),
    ModeKeys.EVAL: ("evaluation_hooks", "evaluate()"),
    ModeKeys.PREDICT: ("prediction_hooks", "predict()"),
}


def _with_host_checks(spec: Any, cluster: cluster_lib.Cluster, config: RunConfig, fields_of: Callable) -> Any:
    """`spec` whose session is created only once every host answers (after the first session, `EveryHostAnswers`)
    and the hosts agree on the call's settings and graph (`host_agreement.HostsAgree`)."""
    field, what = _HOOKS_OF_MODE[spec.mode]
    hooks = list(getattr(spec, field) or [])
    checks = [
        cluster_lib.EveryHostAnswers(cluster, what),
        host_agreement.HostsAgree(cluster, config.session_config, what, fields_of(what)),
    ]
    return spec._replace(**{field: hooks + checks})


@dataclasses.dataclass(frozen=True)
class _InputFnOfCall:
    """`train()`'s or `evaluate()`'s `input_fn` with what the call tells the loop on shards, handed by the Estimator
    to `_call_input_fn` unopened (the Estimator's only channel from `train()`/`evaluate()` to `model_fn` on both
    cores): the steps that size and stop the loops, whether `train()` was given a `CheckpointSaverHook`."""

    input_fn: Callable[..., Any]
    steps: Optional[int] = None
    max_steps: Optional[int] = None
    hooks_save_checkpoints: bool = False


@dataclasses.dataclass(frozen=True)
class _ExportFeatures:
    """A serving input receiver's features: the Estimator calls `model_fn` with them (not with `input_fn`'s) when it
    exports, and `model_fn` then builds the serving graph."""

    features: Any


class _ExportReceiver(object):
    """A serving input receiver whose `features` come as `_ExportFeatures`; otherwise the receiver itself."""

    def __init__(self, receiver: Any):
        self._receiver = receiver

    @property
    def features(self) -> _ExportFeatures:
        return _ExportFeatures(self._receiver.features)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._receiver, name)


def _marking_export_features(receiver_fn: Callable[[], Any]) -> Callable[[], _ExportReceiver]:
    return lambda: _ExportReceiver(receiver_fn())


class TPUEstimator(_estimator_lib.Estimator):
    """Estimator with TPU semantics, run on the devices that exist (GPUs, else logical CPU devices).

    With `use_tpu=True`, `model_fn` is replicated over `config.tpu_config.num_shards` shards with per-shard batches,
    gradients are reduced across shards by `CrossShardOptimizer`, and training runs `iterations_per_loop` steps per
    `Session.run`. With `use_tpu=False` it behaves as upstream's CPU path.

    Args:
      model_fn: `model_fn(features, labels, mode, config, params)` returning a `TPUEstimatorSpec`; must accept
        `params`.
      model_dir: directory for checkpoints and summaries.
      config: our `RunConfig`.
      params: hyper-parameters passed to `input_fn` and `model_fn`; keys `batch_size` and `context` are reserved.
      use_tpu: run on shards (True) or on upstream's CPU path (False).
      train_batch_size: global training batch size; required when `use_tpu`.
      eval_batch_size: global evaluation batch size.
      predict_batch_size: global prediction batch size.
      batch_axis: for PER_HOST_V1, the axis to split each flattened `(features, labels)` tensor on (default 0).
      eval_on_tpu: evaluate on shards (True) or on the CPU path.
      export_to_tpu: add a `{serve, tpu}` metagraph to exports.
      export_to_cpu: add a `{serve}` metagraph to exports.
      warm_start_from: checkpoint path or `tf.estimator.WarmStartSettings`.
      embedding_config_spec: an `EmbeddingConfigSpec` for TPU embedding tables.
      export_saved_model_api_version: `ExportSavedModelApiVersion.V1` or `V2`.

    Raises:
      ValueError: `config` is not our `RunConfig`, reserved params keys, missing/invalid batch sizes.
      TypeError: batch sizes that are not integers.
    """

    # One client builds the graph over every host (docs/DISTRIBUTED.md): `train_and_evaluate` of our Estimator core
    # runs its local loop in that client instead of giving each TF_CONFIG task a between-graph role.
    _REPLICATES_IN_GRAPH = True

    def __init__(
        self,
        model_fn=None,
        model_dir=None,
        config=None,
        params=None,
        use_tpu=True,
        train_batch_size=None,
        eval_batch_size=None,
        predict_batch_size=None,
        batch_axis=None,
        eval_on_tpu=True,
        export_to_tpu=True,
        export_to_cpu=True,
        warm_start_from=None,
        embedding_config_spec=None,
        export_saved_model_api_version=ExportSavedModelApiVersion.V1,
    ):
        if config is None or not isinstance(config, RunConfig):
            raise ValueError("`config` must be provided with type `tpu_config.RunConfig`")
        if params is not None and any(k in params for k in _RESERVED_PARAMS_KEYS):
            raise ValueError("{} are reserved keys but existed in params {}.".format(_RESERVED_PARAMS_KEYS, params))
        if use_tpu:
            if train_batch_size is None:
                raise ValueError("`train_batch_size` cannot be `None`")
            check_positive_integer(train_batch_size, "train_batch_size")
            _check_int32(train_batch_size, "train_batch_size")
            if (
                config.tpu_config.per_host_input_for_training == InputPipelineConfig.PER_SHARD_V1
                and config.tpu_config.num_cores_per_replica
            ):
                raise ValueError(
                    "Model parallelism only supports per host input for training. "
                    "Please adjust TPURunconfig.per_host_input_for_training."
                )
            if eval_batch_size is not None:
                check_positive_integer(eval_batch_size, "eval_batch_size")
                _check_int32(eval_batch_size, "eval_batch_size")
            if predict_batch_size is not None:
                check_positive_integer(predict_batch_size, "predict_batch_size")
                _check_int32(predict_batch_size, "predict_batch_size")
            if embedding_config_spec and config.tpu_config.per_host_input_for_training not in (
                InputPipelineConfig.PER_HOST_V1,
                InputPipelineConfig.PER_HOST_V2,
            ):
                raise ValueError(
                    "Only PER_HOST_V1 and PER_HOST_V2 is supported when using TPU Embedding; got {}. Set "
                    "TPUConfig(per_host_input_for_training=InputPipelineConfig.PER_HOST_V2) (or PER_HOST_V1).".format(
                        input_pipeline_config_name(config.tpu_config.per_host_input_for_training)
                    )
                )
        if not export_to_cpu and not export_to_tpu:
            raise ValueError("One of export_to_cpu and export_to_tpu must be true.")
        if export_saved_model_api_version not in (ExportSavedModelApiVersion.V1, ExportSavedModelApiVersion.V2, 1, 2):
            raise ValueError(
                "export_saved_model_api_version should be V1 or V2; got {}.".format(export_saved_model_api_version)
            )
        # TPUEstimator always passes params (params["batch_size"]), so the core's warning that a model_fn taking
        # `params` gets none would be wrong (upstream logs it for every such program with params=None).
        takes_params = "params" in _estimator_lib.fn_args(model_fn)
        _estimator_lib.verify_model_fn_args(model_fn, {} if params is None and takes_params else params)
        self._user_model_fn = model_fn
        self._use_tpu = use_tpu
        self._eval_on_tpu = eval_on_tpu
        self._train_batch_size = train_batch_size
        self._eval_batch_size = eval_batch_size
        self._predict_batch_size = predict_batch_size
        self._batch_axis = batch_axis
        self._export_to_tpu = export_to_tpu
        self._export_to_cpu = export_to_cpu
        self._export_saved_model_api_version = export_saved_model_api_version
        self._embedding_config_spec = embedding_config_spec
        self._host_eval_root = None  # with one process per host, a non-chief host's evaluation summaries
        self._iterations_per_training_loop = parse_iterations_per_loop(config.tpu_config.iterations_per_loop)
        self._log_every_n_steps = config.log_step_count_steps
        self._log_every_n_secs = None
        if self._iterations_per_training_loop.unit == "seconds":
            cluster = config.tpu_cluster
            if cluster is not None and cluster.process_per_host:
                raise ValueError(
                    "With one process per host, TPUConfig.iterations_per_loop must be a number of steps, not {!r}: "
                    "each host would time its own loops, and the hosts' runs must end at the same steps.".format(
                        config.tpu_config.iterations_per_loop
                    )
                )
            self._log_every_n_secs = self._iterations_per_training_loop.value
            self._log_every_n_steps = None
        config = config.replace(log_step_count_steps=None)
        super(TPUEstimator, self).__init__(
            model_fn=self._augment_model_fn(model_fn),
            model_dir=model_dir,
            config=config,
            params=params or {},
            warm_start_from=warm_start_from,
        )
        launcher = sys.modules.get("tpu_estimator.compat.launcher")
        if launcher is not None and use_tpu:  # Under tpu-estimator-run: say how many shards, and why.
            launcher.announce_shards(self._config)

    # ---- contexts -------------------------------------------------------------------------------------------

    def _sharding_context(self, mode: str) -> ShardingContext:
        return ShardingContext(
            self._config,
            self._use_tpu,
            self._eval_on_tpu,
            self._train_batch_size,
            self._eval_batch_size,
            self._predict_batch_size,
            mode,
        )

    # ---- Estimator overrides --------------------------------------------------------------------------------

    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        """The Estimator's `train` as the only writer of `model_dir`, never checkpointing NaN/Inf (`train_guard`).

        Raises:
          tpu_estimator.checkpoints.model_dir_lock.ModelDirLockedError: another process trains into `model_dir`.
          tpu_estimator.checkpoints.finite_checkpoints.NonFiniteCheckpointError: a checkpoint would hold NaN or Inf.
          tpu_estimator.checkpoints.checkpoint_state.DamagedCheckpointStateError: the `checkpoint` state file of `model_dir` is
            damaged, missing beside checkpoints, or older than an intact checkpoint (nothing is written).
          tpu_estimator.checkpoints.train_guard.EmptyTrainingInputError: `input_fn`'s input ended before the first step (upstream
            returns having trained nothing).
          ValueError: `per_host_input_for_training` is SLICED (an evaluation/prediction configuration).
          tpu_estimator.hosts.cluster.ClusterError: on a cluster, a host is lost or cannot write `model_dir`.
          tf.errors.InvalidArgumentError: a check on the data failed (an embedding id out of range, a negative
            weight): the first line of its message names the feature, the table, the values and the valid range.
        """
        check_training_input_configuration(self.config.tpu_config)
        with (
            cluster_lib.reporting_faults(self._config.tpu_cluster, "train()"),
            train_guard.guard_training(self, steps, max_steps, saving_listeners) as guarded,
        ):
            if guarded.already_done:
                host_report.record_trained_step(self._model_dir)
                return self
            cluster = self._config.tpu_cluster
            if cluster is not None and cluster.is_chief:
                # With one process per host, the chief checks for every host (the hosts' own checks would race).
                cluster_lib.check_model_dir(cluster, self._model_dir, self._config.session_config)
            train_input_fn = _InputFnOfCall(
                input_fn,
                steps,
                max_steps,
                any(isinstance(h, tf.compat.v1.train.CheckpointSaverHook) for h in hooks or ()),
            )
            hooks = list(hooks or []) + guarded.hooks
            with data_errors.named_in_first_line():
                super(TPUEstimator, self).train(train_input_fn, hooks, steps, max_steps, guarded.saving_listeners)
            if cluster is not None and cluster.process_per_host:
                # The chief's train() returns after its last checkpoint: no host reads model_dir (evaluate, predict,
                # the next train) before it is there.
                collectives.wait_for_every_host(
                    cluster.num_hosts,
                    cluster.this_host,
                    cluster.host_device(cluster.this_host),
                    cluster.target,
                    self._config.session_config,
                )
            guarded.check_trained(steps, max_steps)
            host_report.record_trained_step(self._model_dir)  # for tpu-estimator-hosts' last lines
            return self

    @property
    def _trains_and_evaluates_on_hosts(self) -> bool:
        """Whether `train_and_evaluate` (the one of `tpu_estimator.estimator`) calls `_train_and_evaluate_on_hosts`:
        with one process per host, every host runs the loop."""
        cluster = self._config.tpu_cluster
        return cluster is not None and cluster.process_per_host

    def _train_and_evaluate_on_hosts(self, train_spec, eval_spec):
        """`train_and_evaluate` on this host of a job of one process per host (`host_train_and_evaluate`).

        Returns:
          `(metrics of the last evaluation, export results of the last evaluation)`, the same on every host.

        Raises:
          TypeError: `train_spec` or `eval_spec` is not a `TrainSpec` / `EvalSpec`.
          tpu_estimator.hosts.cluster.ClusterError: a host is lost.
        """
        if not isinstance(train_spec, _estimator_lib.TrainSpec):
            raise TypeError("`train_spec` must have type `tf.estimator.TrainSpec`. Got: {}".format(type(train_spec)))
        if not isinstance(eval_spec, _estimator_lib.EvalSpec):
            raise TypeError("`eval_spec` must have type `tf.estimator.EvalSpec`. Got: {}".format(type(eval_spec)))
        with cluster_lib.reporting_faults(self._config.tpu_cluster, "train_and_evaluate()"):
            return host_train_and_evaluate.train_and_evaluate_on_hosts(self, train_spec, eval_spec)

    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None):
        """The Estimator's `evaluate`; on a cluster a lost host raises `cluster.ClusterError` naming it; a failed check
        on the data raises TensorFlow's error with what failed as its first line (`data_errors`).

        Raises:
          tpu_estimator.checkpoints.checkpoint_state.DamagedCheckpointStateError: without `checkpoint_path`, the `checkpoint`
            state file of `model_dir` is damaged (upstream would evaluate freshly initialised weights).
        """
        if checkpoint_path is None:
            checkpoint_state.verify_checkpoint_state(self._model_dir, for_training=False)
        with cluster_lib.reporting_faults(self._config.tpu_cluster, "evaluate()"), data_errors.named_in_first_line():
            return super(TPUEstimator, self).evaluate(
                _InputFnOfCall(input_fn, steps), steps, hooks, checkpoint_path, name
            )

    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None, yield_single_examples=True):
        """The Estimator's `predict`; on a cluster a lost host raises `cluster.ClusterError` naming it; a failed check
        on the data raises TensorFlow's error with what failed as its first line (`data_errors`).

        Raises:
          tpu_estimator.checkpoints.checkpoint_state.DamagedCheckpointStateError: as `evaluate`.
        """
        if checkpoint_path is None:
            checkpoint_state.verify_checkpoint_state(self._model_dir, for_training=False)
        with cluster_lib.reporting_faults(self._config.tpu_cluster, "predict()"), data_errors.named_in_first_line():
            yield from super(TPUEstimator, self).predict(
                input_fn, predict_keys, hooks, checkpoint_path, yield_single_examples
            )

    def _export_all_saved_models(self, export_dir_base, *args, **kwargs):
        """What every export method of the Estimator calls; with one process per host only the chief writes, and
        every host returns the directory the chief wrote, once it is written (a program that exports on every host
        writes one SavedModel).

        Raises:
          RuntimeError: with one process per host, on a host other than the chief: the chief's export failed (the
            chief raises its own error).
          tpu_estimator.hosts.cluster.ClusterError: with one process per host, the chief did not answer within
            `EXPORT_WAIT_SECS` (it is lost).
        """
        cluster = self._config.tpu_cluster
        if cluster is None or not cluster.process_per_host:
            return super(TPUEstimator, self)._export_all_saved_models(export_dir_base, *args, **kwargs)
        written, stamp = None, -1
        try:
            if cluster.is_chief:
                written = super(TPUEstimator, self)._export_all_saved_models(export_dir_base, *args, **kwargs)
                # The directory's name is the export's timestamp (an integer).
                stamp = int(os.path.basename(tf.compat.as_str(written)))
        finally:
            # Every host takes part, the chief also when its export failed (-1), so that no host waits for nothing
            # and every process draws the same collective keys.
            with cluster_lib.reporting_faults(cluster, "export_saved_model()"):
                stamp = collectives.int_from_chief(
                    stamp,
                    cluster.num_hosts,
                    cluster.this_host,
                    cluster.host_device(cluster.this_host),
                    cluster.target,
                    self._config.session_config,
                    EXPORT_WAIT_SECS,
                )
        if written is not None:
            return written
        if stamp < 0:
            raise RuntimeError("The chief's (host 0's) export failed: its own error says why.")
        return os.path.join(tf.compat.as_bytes(export_dir_base), tf.compat.as_bytes(str(stamp)))

    def eval_dir(self, name: Optional[str] = None) -> str:
        """Where `evaluate` writes its summaries: `model_dir/eval[_name]`, or with one process per host, on a host
        other than the chief (which writes them into `model_dir`), a directory of that process's own."""
        cluster = self._config.tpu_cluster
        if cluster is None or cluster.is_chief:
            return super(TPUEstimator, self).eval_dir(name)
        if self._host_eval_root is None:
            self._host_eval_root = tempfile.mkdtemp(prefix="tpu_estimator_host{}_eval_".format(cluster.this_host))
        return os.path.join(self._host_eval_root, "eval" if not name else "eval_" + name)

    def _call_input_fn(self, input_fn, mode, input_context=None):
        """Calls `input_fn` on the CPU path; on shards returns it deferred, to be called inside `model_fn`."""
        call = input_fn if isinstance(input_fn, _InputFnOfCall) else _InputFnOfCall(input_fn)
        input_fn = call.input_fn
        input_fn_args = _estimator_lib.fn_args(input_fn)
        kwargs = {}
        if "params" not in input_fn_args:
            raise ValueError(
                "input_fn ({}) does not include params argument, required by TPUEstimator to pass batch "
                'size as params["batch_size"]'.format(input_fn)
            )
        kwargs["params"] = self.params
        if "config" in input_fn_args:
            kwargs["config"] = self.config
        if "mode" in input_fn_args:
            kwargs["mode"] = mode
        if "input_context" in input_fn_args:
            kwargs["input_context"] = input_context
        ctx = self._sharding_context(mode)
        if not ctx.is_running_on_shards and ctx.input_mode == InputPipelineConfig.SLICED:
            raise ValueError(
                "Invalid TPUConfig `eval_training_input_configuration` value. SLICED mode only works on use_tpu = True."
            )
        if ctx.batch_size_for_input_fn is not None:
            kwargs["params"]["batch_size"] = ctx.batch_size_for_input_fn
        if not ctx.is_running_on_shards:
            with tf.compat.v1.device("/device:CPU:0"):
                return input_fn(**kwargs)

        return DeferredInput(input_fn, kwargs, call.steps, call.max_steps, call.hooks_save_checkpoints)

    def _validate_features_in_predict_input(self, result):
        # The input pipeline checks PREDICT inputs itself (a Dataset is required on shards).
        pass

    def _convert_train_steps_to_hooks(self, steps, max_steps):
        ctx = self._sharding_context(ModeKeys.TRAIN)
        if not ctx.is_running_on_shards:
            return super(TPUEstimator, self)._convert_train_steps_to_hooks(steps, max_steps)
        if steps is None and max_steps is None:
            raise ValueError("For TPU training, one of `steps` or `max_steps` must be set. Cannot be both `None`.")
        if steps is not None:
            check_positive_integer(steps, "Train steps")
        if max_steps is not None:
            check_positive_integer(max_steps, "Train max_steps")
        # The training loop brings its `LoopStopHook` (handed its loop-length tensor; `train()`'s steps reach it
        # with `input_fn`, `_InputFnOfCall`).
        return []

    def _convert_eval_steps_to_hooks(self, steps):
        ctx = self._sharding_context(ModeKeys.EVAL)
        if ctx.is_running_on_shards:
            if steps is None:
                raise ValueError("Evaluate `steps` must be set on TPU. Cannot be `None`.")
            check_positive_integer(steps, "Eval steps")
            # As upstream on a TPU: the N steps run in one loop (one Session.run), whose length the evaluation loop
            # gets with `input_fn` (`_InputFnOfCall`).
            return super(TPUEstimator, self)._convert_eval_steps_to_hooks(steps)
        return super(TPUEstimator, self)._convert_eval_steps_to_hooks(steps)

    # ---- model_fn wrapping ----------------------------------------------------------------------------------

    def _augment_model_fn(self, model_fn):
        """The Estimator-facing `model_fn`: CPU path, export path, or the sharded modes."""

        def _model_fn(features, labels, mode, config, params):
            is_export_mode = isinstance(features, _ExportFeatures)
            if is_export_mode:
                features = features.features
            if mode == INFERENCE_ON_TPU_MODE:
                wrap_in_rewrite = self._export_saved_model_api_version in (ExportSavedModelApiVersion.V1, 1)
                settings = self._cpu_settings(model_fn, config, params)
                return cpu_path.call_for_tpu_export(settings, features, labels, wrap_in_rewrite)
            ctx = self._sharding_context(mode)
            if isinstance(features, DeferredInput):
                ctx.validate()
                return self._call_on_shards(model_fn, features, mode, config, params, ctx)
            settings = self._cpu_settings(model_fn, config, params)
            return cpu_path.call_on_cpu(settings, features, labels, mode, ctx, is_export_mode)

        return _model_fn

    def _call_on_shards(self, model_fn, deferred_input: DeferredInput, mode, config, params, ctx):
        settings = shared_stages.ShardedSettings(
            model_fn=model_fn,
            config=config,
            params=params,
            batch_axis=self._batch_axis,
            embedding_config_spec=self._embedding_config_spec,
        )
        if mode == ModeKeys.TRAIN:
            loop = TrainLoopSettings(
                iterations_per_loop=self._iterations_per_training_loop,
                host_call_every_n_steps=self._config.tpu_config.experimental_host_call_every_n_steps,
                progress=self._progress_settings(),
                saves_checkpoints=bool(config.save_checkpoints_secs or config.save_checkpoints_steps)
                and not deferred_input.hooks_save_checkpoints,
                steps=deferred_input.steps,
                max_steps=deferred_input.max_steps,
            )
            spec = TrainLoop(settings, loop, ctx).build(deferred_input.call)
        elif mode == ModeKeys.EVAL:
            spec = EvalLoop(settings, ctx, deferred_input.steps).build(deferred_input.call)
        else:
            spec = predict_step.PredictStep(settings, ctx).build(deferred_input.call)
        if ctx.process_per_host:
            batch_sizes = {
                "train_batch_size": self._train_batch_size,
                "eval_batch_size": self._eval_batch_size,
                "predict_batch_size": self._predict_batch_size,
            }
            fields_of = functools.partial(
                host_agreement.fields_of_call,
                config=config,
                num_shards=ctx.num_replicas,
                batch_sizes=batch_sizes,
                embedding_config_spec=self._embedding_config_spec,
            )
            spec = _with_host_checks(spec, ctx.config.tpu_cluster, config, fields_of)
        return spec

    def _cpu_settings(self, model_fn, config, params) -> cpu_path.CpuSettings:
        return cpu_path.CpuSettings(
            model_fn=model_fn,
            config=config,
            params=params,
            embedding_config_spec=self._embedding_config_spec,
            progress=self._progress_settings(),
        )

    def _progress_settings(self) -> hooks_lib.ProgressSettings:
        return hooks_lib.ProgressSettings(
            every_n_steps=self._log_every_n_steps,
            every_n_secs=self._log_every_n_secs,
            # Only the chief writes summaries (one process per host: host 0).
            output_dir=self.model_dir if self._config.save_summary_steps and self._config.is_chief else None,
        )

    def _add_meta_graph_for_mode(
        self,
        builder,
        input_receiver_fn_map,
        checkpoint_path,
        save_variables=True,
        mode=ModeKeys.PREDICT,
        export_tags=None,
        check_variables=True,
        strip_default_attrs=True,
    ):
        """Adds the {serve} metagraph (export_to_cpu) and/or the {serve, tpu} one (export_to_tpu); `model_fn` gets
        the receiver's features as `_ExportFeatures`."""
        input_receiver_fn_map = {m: _marking_export_features(fn) for m, fn in input_receiver_fn_map.items()}
        if self._export_to_tpu and mode != ModeKeys.PREDICT:
            raise NotImplementedError(
                "TPUEstimator only handles mode PREDICT for exporting when `export_to_tpu` is `True`; got {}.".format(
                    mode
                )
            )
        if self._export_to_cpu:
            super(TPUEstimator, self)._add_meta_graph_for_mode(
                builder,
                input_receiver_fn_map,
                checkpoint_path,
                save_variables,
                mode=mode,
                export_tags=export_tags,
                check_variables=check_variables,
                strip_default_attrs=strip_default_attrs,
            )
        if self._export_to_tpu:
            first = not self._export_to_cpu
            super(TPUEstimator, self)._add_meta_graph_for_mode(
                builder,
                {INFERENCE_ON_TPU_MODE: input_receiver_fn_map[mode]},
                checkpoint_path,
                save_variables=first and save_variables,
                mode=INFERENCE_ON_TPU_MODE,
                export_tags=[tf.saved_model.SERVING, tf.saved_model.TPU],
                check_variables=first,
                strip_default_attrs=strip_default_attrs,
            )
