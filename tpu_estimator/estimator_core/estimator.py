"""`Estimator`: trains, evaluates, predicts with and exports a `model_fn`, in TF1 graph mode.

Behaviour follows upstream's `tf.estimator.Estimator` (same checkpoints, event files, eval results, SavedModels)
and is built from TensorFlow core pieces: `MonitoredTrainingSession`, `Scaffold`, the session hooks, `evaluation`,
`saved_model.Builder` and `model_utils`. Subclasses (TPUEstimator) customise it through the protected methods
`_call_input_fn`, `_validate_features_in_predict_input`, `_convert_train_steps_to_hooks`,
`_convert_eval_steps_to_hooks` and `_add_meta_graph_for_mode`, called at the same points as upstream's.
"""

import copy
import os
from typing import Any, Callable, Dict, Iterator, List, Optional

import tensorflow as tf

from tpu_estimator.estimator_core import (
    _tf_internal,
    checkpoint_saver,
    checkpoint_step,
    estimator_config,
    eval_metrics,
    eval_summaries,
    saved_model_export,
    warm_starting,
)
from tpu_estimator.estimator_core import predictions as predictions_lib
from tpu_estimator.estimator_core.cluster import TaskType
from tpu_estimator.estimator_core.inputs import fn_args, has_dataset_or_queue_runner, parse_input_fn_result
from tpu_estimator.estimator_core.mode_keys import ModeKeys
from tpu_estimator.estimator_core.model_fn import EstimatorSpec, instances_of, verify_model_fn_args

# Members a subclass may override (as upstream allows); TPUEstimator may override anything.
_ALLOWED_OVERRIDES = frozenset(
    ["model_fn", "_create_and_assert_global_step", "_export_all_saved_models", "latest_checkpoint"]
)


class Estimator(object):
    """Trains, evaluates, predicts with and exports the model built by `model_fn`.

    Args:
      model_fn: `model_fn(features, labels, mode, params, config)` returning an `EstimatorSpec`; `labels`,
        `mode`, `params` and `config` are optional arguments.
      model_dir: directory for checkpoints, `graph.pbtxt` and event files; also `config.model_dir`. Both set
        must agree; neither: a temporary directory.
      config: a `RunConfig`; default `RunConfig()`.
      params: dict of hyper-parameters passed to `model_fn` (and to `input_fn` if it takes `params`).
      warm_start_from: a checkpoint or SavedModel path (all variables), or `WarmStartSettings`.

    Raises:
      ValueError: no `model_fn`, `model_fn` arguments that do not match `params`, a `config` that is not a
        `RunConfig`, two different model dirs, or a subclass overriding `Estimator` members.
    """

    def __init__(self, model_fn, model_dir=None, config=None, params=None, warm_start_from=None):
        self.__class__._assert_members_are_not_overridden(self)
        self._config = estimator_config.config_with_model_dir_and_session_config(config, model_dir)
        self._train_distribution = self._config.train_distribute
        self._eval_distribution = self._config.eval_distribute
        self._model_dir = self._config.model_dir
        self._session_config = self._config.session_config
        tf.compat.v1.logging.info("Using config: %s", str(vars(self._config)))
        self._device_fn = self._config.device_fn or estimator_config.replica_device_setter(self._config)
        if model_fn is None:
            raise ValueError("model_fn must be provided to Estimator.")
        verify_model_fn_args(model_fn, params)
        self._model_fn = model_fn
        self._params = copy.deepcopy(params or {})
        self._warm_start_settings = warm_starting.default_warm_start_settings(warm_start_from)

    # ---- properties -------------------------------------------------------------------------------------------

    @property
    def model_dir(self) -> str:
        return self._model_dir

    @property
    def config(self):
        """A copy of the `RunConfig`."""
        return copy.deepcopy(self._config)

    @property
    def params(self) -> Dict[str, Any]:
        """A copy of the hyper-parameters."""
        return copy.deepcopy(self._params)

    @property
    def model_fn(self) -> Callable:
        """`model_fn(features, labels, mode, config)` bound to this Estimator's `params`."""

        def public_model_fn(features, labels, mode, config):
            return self._call_model_fn(features, labels, mode, config)

        return public_model_fn

    # ---- checkpoint queries -----------------------------------------------------------------------------------

    def get_variable_value(self, name: str):
        """The value of variable `name` in the latest checkpoint.

        Raises:
          ValueError: `model_dir` has no checkpoint yet.
        """
        _check_checkpoint_available(self.model_dir)
        with _tf_internal.graph_mode():
            return tf.train.load_variable(self.model_dir, name)

    def get_variable_names(self) -> List[str]:
        """The names of the variables in the latest checkpoint.

        Raises:
          ValueError: `model_dir` has no checkpoint yet.
        """
        _check_checkpoint_available(self.model_dir)
        with _tf_internal.graph_mode():
            return [name for name, _ in tf.train.list_variables(self.model_dir)]

    def latest_checkpoint(self) -> Optional[str]:
        """The path of the latest checkpoint in `model_dir`, or None."""
        with _tf_internal.graph_mode():
            return tf.train.latest_checkpoint(self.model_dir)

    def eval_dir(self, name: Optional[str] = None) -> str:
        """The directory evaluation summaries go to: `<model_dir>/eval` or `<model_dir>/eval_<name>`."""
        return os.path.join(self._model_dir, "eval" if not name else "eval_" + name)

    # ---- train ------------------------------------------------------------------------------------------------

    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        """Trains on batches from `input_fn`.

        Args:
          input_fn: returns a `tf.data.Dataset` of `(features, labels)` or a `(features, labels)` tuple.
          hooks: `SessionRunHook`s for the training loop.
          steps: train this many more steps (or until the input ends).
          max_steps: train until the global step reaches this; nothing happens if a checkpoint already has it.
          saving_listeners: `CheckpointSaverListener`s called around each checkpoint save.

        Returns:
          `self`.

        Raises:
          ValueError: both `steps` and `max_steps`, a non-positive one, the task is an evaluator or ps, or
            `saving_listeners` without checkpointing.
        """
        if self.config.task_type in (TaskType.EVALUATOR, TaskType.PS):
            raise ValueError(
                "Train has been called wrong configuration. Please use tf.estimator.train_and_evaluate which calls "
                "proper API according to given configuration. Current configuration: {}.".format(self.config)
            )
        with _tf_internal.graph_mode():
            if steps is not None and max_steps is not None:
                raise ValueError("Can not provide both steps and max_steps.")
            if steps is not None and steps <= 0:
                raise ValueError("Must specify steps > 0, given: {}".format(steps))
            if max_steps is not None and max_steps <= 0:
                raise ValueError("Must specify max_steps > 0, given: {}".format(max_steps))
            if checkpoint_step.reached_max_steps(self._model_dir, steps, max_steps) is not None:
                tf.compat.v1.logging.info("Skipping training since max_steps has already saved.")
                return self
            hooks = _check_hooks_type(hooks)
            hooks.extend(self._convert_train_steps_to_hooks(steps, max_steps))
            saving_listeners = _check_listeners_type(saving_listeners)
            loss = self._train_model(input_fn, hooks, saving_listeners)
            tf.compat.v1.logging.info("Loss for final step: %s.", loss)
            return self

    def _convert_train_steps_to_hooks(self, steps, max_steps):
        """The hooks that stop training after `steps` more steps or at `max_steps`."""
        if steps is not None or max_steps is not None:
            return [tf.compat.v1.train.StopAtStepHook(steps, max_steps)]
        return []

    def _train_model(self, input_fn, hooks, saving_listeners):
        worker_hooks = []
        with tf.Graph().as_default() as g, g.device(self._device_fn):
            tf.compat.v1.random.set_random_seed(self._config.tf_random_seed)
            global_step_tensor = self._create_and_assert_global_step(g)
            if global_step_tensor is not None:
                # The cached read of the global step that hooks and the optimizer share.
                _tf_internal.get_or_create_global_step_read(g)
            features, labels, input_hooks = self._get_features_and_labels_from_input_fn(input_fn, ModeKeys.TRAIN)
            worker_hooks.extend(input_hooks)
            estimator_spec = self._call_model_fn(features, labels, ModeKeys.TRAIN, self.config)
            global_step_tensor = tf.compat.v1.train.get_global_step(g)
            return self._train_with_estimator_spec(
                estimator_spec, worker_hooks, hooks, global_step_tensor, saving_listeners
            )

    def _train_with_estimator_spec(self, estimator_spec, worker_hooks, hooks, global_step_tensor, saving_listeners):
        if self._warm_start_settings and not tf.train.latest_checkpoint(self._model_dir):
            warm_starting.warm_start(self._warm_start_settings)
        summaries = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)
        if not any(x.op.name == "loss" for x in summaries):
            tf.compat.v1.summary.scalar("loss", estimator_spec.loss)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.LOSSES, estimator_spec.loss)
        worker_hooks.extend(hooks)
        worker_hooks.append(tf.compat.v1.train.NanTensorHook(estimator_spec.loss))
        if self._config.log_step_count_steps is not None:
            worker_hooks.append(
                tf.compat.v1.train.LoggingTensorHook(
                    {"loss": estimator_spec.loss, "step": global_step_tensor},
                    every_n_iter=self._config.log_step_count_steps,
                )
            )
        worker_hooks.extend(estimator_spec.training_hooks)
        if not (estimator_spec.scaffold.saver or tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS)):
            tf.compat.v1.add_to_collection(
                tf.compat.v1.GraphKeys.SAVERS,
                tf.compat.v1.train.Saver(
                    sharded=True,
                    max_to_keep=self._config.keep_checkpoint_max,
                    keep_checkpoint_every_n_hours=self._config.keep_checkpoint_every_n_hours,
                    defer_build=True,
                    save_relative_paths=True,
                ),
            )
        chief_hooks = self._checkpoint_saver_hooks(estimator_spec, worker_hooks, saving_listeners)
        save_summary_steps, log_step_count_steps = self._summary_cadence(estimator_spec, worker_hooks)
        with tf.compat.v1.train.MonitoredTrainingSession(
            master=self._config.master,
            is_chief=self._config.is_chief,
            checkpoint_dir=self._model_dir,
            scaffold=estimator_spec.scaffold,
            hooks=worker_hooks,
            chief_only_hooks=tuple(chief_hooks) + tuple(estimator_spec.training_chief_hooks),
            save_checkpoint_secs=0,  # Checkpoints are saved by the CheckpointSaverHook above.
            save_summaries_steps=save_summary_steps,
            config=self._session_config,
            max_wait_secs=self._config.session_creation_timeout_secs,
            log_step_count_steps=log_step_count_steps,
            save_graph_def=self._config.checkpoint_save_graph_def,
        ) as mon_sess:
            loss = None
            current_step = 0
            while not mon_sess.should_stop():
                current_step += 1
                _, loss = mon_sess.run([estimator_spec.train_op, estimator_spec.loss])
            if current_step == 0:
                tf.compat.v1.logging.warn(
                    "Training with estimator made no steps. Perhaps input is empty or misspecified."
                )
        return loss

    def _checkpoint_saver_hooks(self, estimator_spec, worker_hooks, saving_listeners):
        """The chief's `CheckpointSaverHook` (unless the model brings one), with `saving_listeners` attached.

        Raises:
          ValueError: `saving_listeners` but no checkpoint saving configured.
        """
        chief_hooks = []
        all_hooks = worker_hooks + list(estimator_spec.training_chief_hooks)
        saver_hooks = [h for h in all_hooks if isinstance(h, tf.compat.v1.train.CheckpointSaverHook)]
        if (self._config.save_checkpoints_secs or self._config.save_checkpoints_steps) and not saver_hooks:
            chief_hooks = [
                checkpoint_saver.CheckpointSaverHook(
                    self._model_dir,
                    save_secs=self._config.save_checkpoints_secs,
                    save_steps=self._config.save_checkpoints_steps,
                    scaffold=estimator_spec.scaffold,
                    save_graph_def=self._config.checkpoint_save_graph_def,
                )
            ]
            saver_hooks = [chief_hooks[0]]
        if saving_listeners:
            if not saver_hooks:
                raise ValueError(
                    "There should be a CheckpointSaverHook to use saving_listeners. Please set one of the "
                    "RunConfig.save_checkpoints_steps or RunConfig.save_checkpoints_secs."
                )
            _tf_internal.add_checkpoint_listeners(saver_hooks[0], saving_listeners)
        return chief_hooks

    def _summary_cadence(self, estimator_spec, worker_hooks):
        """`(save_summary_steps, log_step_count_steps)` for the session; with a TF1 `master` + `worker` cluster,
        worker 0 writes the summaries and step counts instead of the master (as upstream)."""
        save_summary_steps = self._config.save_summary_steps
        log_step_count_steps = self._config.log_step_count_steps
        cluster_spec = self._config.cluster_spec
        if (
            cluster_spec
            and cluster_spec.jobs
            and TaskType.WORKER in cluster_spec.jobs
            and TaskType.MASTER in cluster_spec.jobs
        ):
            save_summary_steps = 0
            log_step_count_steps = None
            if self._config.task_type == TaskType.WORKER and self._config.task_id == 0:
                if self._config.save_summary_steps and self._config.save_summary_steps > 0:
                    worker_hooks.append(
                        tf.compat.v1.train.SummarySaverHook(
                            save_steps=self._config.save_summary_steps,
                            output_dir=self._config.model_dir,
                            scaffold=estimator_spec.scaffold,
                        )
                    )
                if self._config.log_step_count_steps and self._config.log_step_count_steps > 0:
                    worker_hooks.append(
                        tf.compat.v1.train.StepCounterHook(
                            every_n_steps=self._config.log_step_count_steps, output_dir=self._config.model_dir
                        )
                    )
        return save_summary_steps, log_step_count_steps

    # ---- evaluate ---------------------------------------------------------------------------------------------

    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None) -> Dict[str, Any]:
        """Evaluates the model on `input_fn` for `steps` batches (or until the input ends).

        Args:
          input_fn: returns a `tf.data.Dataset` of `(features, labels)` or a `(features, labels)` tuple.
          steps: number of batches; None: until the input ends.
          hooks: `SessionRunHook`s for the evaluation.
          checkpoint_path: the checkpoint to evaluate; default the latest (none: freshly initialised variables).
          name: evaluation name; summaries go to `eval_<name>`.

        Returns:
          The metrics of `model_fn`, `loss` (mean loss per batch) and `global_step`.

        Raises:
          ValueError: `steps <= 0`, or a metric named `loss` or `global_step` in `model_fn`'s.
        """
        with _tf_internal.graph_mode():
            hooks = _check_hooks_type(hooks)
            hooks.extend(self._convert_eval_steps_to_hooks(steps))
            checkpoint_path = self._checkpoint_to_read(checkpoint_path, "evaluate")
            with tf.Graph().as_default():
                scaffold, update_op, eval_dict, all_hooks = self._evaluate_build_graph(input_fn, hooks, checkpoint_path)
                return self._evaluate_run(
                    checkpoint_path=checkpoint_path,
                    scaffold=scaffold,
                    update_op=update_op,
                    eval_dict=eval_dict,
                    all_hooks=all_hooks,
                    output_dir=self.eval_dir(name),
                )

    def _checkpoint_to_read(self, checkpoint_path: Optional[str], action: str) -> Optional[str]:
        """`checkpoint_path`, else the latest checkpoint in `model_dir`; None (logged: the variables are initialised
        instead) without one."""
        checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(self._model_dir)
        if not checkpoint_path:
            tf.compat.v1.logging.info(
                "Could not find trained model in model_dir: {}, running initialization to {}.".format(
                    self._model_dir, action
                )
            )
        return checkpoint_path

    def _convert_eval_steps_to_hooks(self, steps):
        """The hook that stops evaluation after `steps` batches.

        Raises:
          ValueError: `steps <= 0`.
        """
        if steps is None:
            return []
        if steps <= 0:
            raise ValueError("Must specify steps > 0, given: {}".format(steps))
        return [_tf_internal.stop_after_n_evals_hook(steps)]

    def _evaluate_build_graph(self, input_fn, hooks, checkpoint_path):
        tf.compat.v1.random.set_random_seed(self._config.tf_random_seed)
        graph = tf.compat.v1.get_default_graph()
        self._create_and_assert_global_step(graph)
        features, labels, input_hooks = self._get_features_and_labels_from_input_fn(input_fn, ModeKeys.EVAL)
        estimator_spec = self._call_model_fn(features, labels, ModeKeys.EVAL, self.config)
        eval_metric_ops = eval_metrics.add_loss_metric(estimator_spec.eval_metric_ops, estimator_spec.loss)
        update_op, eval_dict = eval_metrics.split_update_ops(eval_metric_ops)
        scaffold = estimator_spec.scaffold
        global_step_tensor = tf.compat.v1.train.get_global_step(graph)
        self._maybe_warm_start(checkpoint_path)
        if tf.compat.v1.GraphKeys.GLOBAL_STEP in eval_dict:
            raise ValueError(
                "Metric with name `global_step` is not allowed, because Estimator already defines a default metric "
                "with the same name."
            )
        eval_dict[tf.compat.v1.GraphKeys.GLOBAL_STEP] = global_step_tensor
        all_hooks = list(input_hooks)
        all_hooks.extend(hooks)
        all_hooks.extend(list(estimator_spec.evaluation_hooks or []))
        if scaffold and scaffold.local_init_op:
            # The user's local_init_op replaces the default one, which would initialise the eval step counter.
            _tf_internal.get_or_create_eval_step()
            scaffold = tf.compat.v1.train.Scaffold(
                local_init_op=tf.group(scaffold.local_init_op, tf.compat.v1.train.Scaffold.default_local_init_op()),
                copy_from_scaffold=scaffold,
            )
        return scaffold, update_op, eval_dict, all_hooks

    def _evaluate_run(self, checkpoint_path, scaffold, update_op, eval_dict, all_hooks, output_dir):
        eval_results = _tf_internal.evaluate_once(
            checkpoint_path=checkpoint_path,
            master=self._config.evaluation_master,
            scaffold=scaffold,
            eval_ops=update_op,
            final_ops=eval_dict,
            hooks=all_hooks,
            config=self._session_config,
        )
        current_global_step = eval_results[tf.compat.v1.GraphKeys.GLOBAL_STEP]
        eval_summaries.write_dict_to_summary(output_dir, eval_results, current_global_step)
        if checkpoint_path:
            eval_summaries.write_checkpoint_path_to_summary(output_dir, checkpoint_path, current_global_step)
        return eval_results

    def _maybe_warm_start(self, checkpoint_path):
        if not checkpoint_path and self._warm_start_settings:
            warm_starting.warm_start(self._warm_start_settings)

    # ---- predict ----------------------------------------------------------------------------------------------

    def predict(
        self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None, yield_single_examples=True
    ) -> Iterator[Any]:
        """Yields predictions for the features of `input_fn` until the input ends.

        Args:
          input_fn: returns a `tf.data.Dataset` of features (or `(features, labels)`), or features.
          predict_keys: keep only these keys of dict predictions.
          hooks: `SessionRunHook`s for prediction.
          checkpoint_path: the checkpoint to use; default the latest (none: freshly initialised variables).
          yield_single_examples: yield one example at a time (True) or whole batches.

        Yields:
          Evaluated predictions.

        Raises:
          ValueError: `predict_keys` with non-dict predictions or matching none, or predictions of different
            batch lengths with `yield_single_examples`.
        """
        with _tf_internal.graph_mode():
            hooks = _check_hooks_type(hooks)
            checkpoint_path = self._checkpoint_to_read(checkpoint_path, "predict")
            with tf.Graph().as_default() as g:
                tf.compat.v1.random.set_random_seed(self._config.tf_random_seed)
                self._create_and_assert_global_step(g)
                features, input_hooks = self._get_features_from_input_fn(input_fn, ModeKeys.PREDICT)
                estimator_spec = self._call_model_fn(features, None, ModeKeys.PREDICT, self.config)
                self._maybe_warm_start(checkpoint_path)
                predictions = predictions_lib.extract_keys(estimator_spec.predictions, predict_keys)
                all_hooks = list(input_hooks) + list(hooks) + list(estimator_spec.prediction_hooks or [])
                with tf.compat.v1.train.MonitoredSession(
                    session_creator=tf.compat.v1.train.ChiefSessionCreator(
                        checkpoint_filename_with_path=checkpoint_path,
                        master=self._config.master,
                        scaffold=estimator_spec.scaffold,
                        config=self._session_config,
                    ),
                    hooks=all_hooks,
                ) as mon_sess:
                    while not mon_sess.should_stop():
                        preds_evaluated = mon_sess.run(predictions)
                        if not yield_single_examples:
                            yield preds_evaluated
                        elif not isinstance(predictions, dict):
                            for pred in preds_evaluated:
                                yield pred
                        else:
                            for i in range(predictions_lib.batch_length(preds_evaluated)):
                                yield {key: value[i] for key, value in preds_evaluated.items()}

    def _get_features_from_input_fn(self, input_fn, mode):
        result = self._call_input_fn(input_fn, mode)
        result, _, hooks = parse_input_fn_result(result)
        self._validate_features_in_predict_input(result)
        return result, hooks

    def _validate_features_in_predict_input(self, result):
        if not has_dataset_or_queue_runner(result):
            tf.compat.v1.logging.warning(
                "Input graph does not use tf.data.Dataset or contain a QueueRunner. That means predict yields "
                "forever. This is probably a mistake."
            )

    # ---- export -----------------------------------------------------------------------------------------------

    def export_saved_model(
        self,
        export_dir_base,
        serving_input_receiver_fn,
        assets_extra=None,
        as_text=False,
        checkpoint_path=None,
        experimental_mode=ModeKeys.PREDICT,
    ) -> bytes:
        """Exports the `experimental_mode` graph (default PREDICT, tags `serve`) as a SavedModel.

        Args:
          export_dir_base: the export goes to a new timestamped directory under it.
          serving_input_receiver_fn: returns a `ServingInputReceiver` (or `TensorServingInputReceiver`).
          assets_extra: dict of destination (relative to `assets.extra`) to source file.
          as_text: write `saved_model.pbtxt` instead of `saved_model.pb`.
          checkpoint_path: the checkpoint to export; default the latest.
          experimental_mode: the mode whose graph is exported.

        Returns:
          The export directory (bytes).

        Raises:
          ValueError: no `serving_input_receiver_fn`, or no checkpoint to export.
        """
        if not serving_input_receiver_fn:
            raise ValueError("An input_receiver_fn must be defined.")
        return self._export_all_saved_models(
            export_dir_base,
            {experimental_mode: serving_input_receiver_fn},
            assets_extra=assets_extra,
            as_text=as_text,
            checkpoint_path=checkpoint_path,
            strip_default_attrs=True,
        )

    def export_savedmodel(
        self,
        export_dir_base,
        serving_input_receiver_fn,
        assets_extra=None,
        as_text=False,
        checkpoint_path=None,
        strip_default_attrs=False,
    ) -> bytes:
        """The deprecated name of `export_saved_model` (PREDICT only; keeps default-valued attrs by default).

        Raises:
          ValueError: no `serving_input_receiver_fn`, or no checkpoint to export.
        """
        tf.compat.v1.logging.warning("export_savedmodel is deprecated: use export_saved_model instead.")
        if not serving_input_receiver_fn:
            raise ValueError("An input_receiver_fn must be defined.")
        return self._export_all_saved_models(
            export_dir_base,
            {ModeKeys.PREDICT: serving_input_receiver_fn},
            assets_extra=assets_extra,
            as_text=as_text,
            checkpoint_path=checkpoint_path,
            strip_default_attrs=strip_default_attrs,
        )

    def experimental_export_all_saved_models(
        self, export_dir_base, input_receiver_fn_map, assets_extra=None, as_text=False, checkpoint_path=None
    ) -> bytes:
        """Exports one SavedModel with a metagraph per mode of `input_receiver_fn_map` (`{mode: receiver_fn}`).

        TRAIN and EVAL receivers return `SupervisedInputReceiver`s; their metagraphs are tagged `train` and `eval`.

        Raises:
          ValueError: no valid mode in the map, or no checkpoint to export.
        """
        return self._export_all_saved_models(
            export_dir_base,
            input_receiver_fn_map,
            assets_extra=assets_extra,
            as_text=as_text,
            checkpoint_path=checkpoint_path,
            strip_default_attrs=True,
        )

    def _export_all_saved_models(
        self,
        export_dir_base,
        input_receiver_fn_map,
        assets_extra=None,
        as_text=False,
        checkpoint_path=None,
        strip_default_attrs=True,
    ):
        with _tf_internal.graph_mode():
            if not checkpoint_path:
                checkpoint_path = self.latest_checkpoint()
            if not checkpoint_path:
                if not self._warm_start_settings:
                    raise ValueError("Couldn't find trained model at {}.".format(self._model_dir))
                checkpoint_path = self._warm_start_settings.ckpt_to_initialize_from
                if tf.compat.v1.gfile.IsDirectory(checkpoint_path):
                    checkpoint_path = tf.train.latest_checkpoint(checkpoint_path)
            export_dir = _tf_internal.get_timestamped_export_dir(export_dir_base)
            temp_export_dir = _tf_internal.get_temp_export_dir(export_dir)
            builder = tf.compat.v1.saved_model.Builder(temp_export_dir)
            save_variables = True
            # The first metagraph added saves the variables; TRAIN, EVAL, PREDICT is upstream's order.
            for mode in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT):
                if input_receiver_fn_map.get(mode):
                    self._add_meta_graph_for_mode(
                        builder,
                        input_receiver_fn_map,
                        checkpoint_path,
                        save_variables,
                        mode=mode,
                        strip_default_attrs=strip_default_attrs,
                    )
                    save_variables = False
            if save_variables:
                raise ValueError("No valid modes for exporting found. Got {}.".format(input_receiver_fn_map.keys()))
            builder.save(as_text)
            if assets_extra:
                saved_model_export.copy_assets_extra(temp_export_dir, assets_extra)
            tf.compat.v1.gfile.Rename(temp_export_dir, export_dir)
            return export_dir

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
        """Builds `mode`'s graph from its receiver function and adds it to `builder`.

        Args:
          builder: the `tf.compat.v1.saved_model.Builder`.
          input_receiver_fn_map: `{mode: receiver_fn}`; `input_receiver_fn_map[mode]` is used.
          checkpoint_path: the checkpoint whose variables are restored (and saved if `save_variables`).
          save_variables: save the variables with this metagraph (the first one added).
          mode: the mode `model_fn` is called with.
          export_tags: the metagraph's tags; default `EXPORT_TAG_MAP[mode]`.
          check_variables: restore the checkpoint into the graph, failing if variables are missing.
          strip_default_attrs: strip default-valued attributes from the graph's nodes.

        Raises:
          ValueError: `save_variables` without `check_variables`, or variables missing from the checkpoint.
        """
        if export_tags is None:
            export_tags = _tf_internal.EXPORT_TAG_MAP[mode]
        input_receiver_fn = input_receiver_fn_map[mode]
        with tf.Graph().as_default() as g:
            self._create_and_assert_global_step(g)
            tf.compat.v1.random.set_random_seed(self._config.tf_random_seed)
            input_receiver = input_receiver_fn()
            estimator_spec = self._call_model_fn(
                features=input_receiver.features,
                labels=getattr(input_receiver, "labels", None),
                mode=mode,
                config=self.config,
            )
            saved_model_export.add_meta_graph(
                builder,
                input_receiver,
                estimator_spec,
                checkpoint_path,
                self._session_config,
                mode,
                export_tags,
                save_variables=save_variables,
                check_variables=check_variables,
                strip_default_attrs=strip_default_attrs,
            )

    # ---- input_fn and model_fn --------------------------------------------------------------------------------

    def _get_features_and_labels_from_input_fn(self, input_fn, mode):
        return parse_input_fn_result(self._call_input_fn(input_fn, mode))

    def _call_input_fn(self, input_fn, mode, input_context=None):
        """Calls `input_fn` on the CPU with the arguments it declares (`mode`, `params`, `config`,
        `input_context`)."""
        input_fn_args = fn_args(input_fn)
        kwargs = {}
        if "mode" in input_fn_args:
            kwargs["mode"] = mode
        if "params" in input_fn_args:
            kwargs["params"] = self.params
        if "config" in input_fn_args:
            kwargs["config"] = self.config
        if input_context and "input_context" in input_fn_args:
            kwargs["input_context"] = input_context
        with tf.compat.v1.device("/cpu:0"):
            return input_fn(**kwargs)

    def _call_model_fn(self, features, labels, mode, config):
        """Calls `model_fn` with the arguments it declares.

        Raises:
          ValueError: `model_fn` does not take labels but there are some, or does not return an `EstimatorSpec`.
        """
        model_fn_args = fn_args(self._model_fn)
        kwargs = {}
        if "labels" in model_fn_args:
            kwargs["labels"] = labels
        elif labels is not None:
            raise ValueError("model_fn does not take labels, but input_fn returns labels.")
        if "mode" in model_fn_args:
            kwargs["mode"] = mode
        if "params" in model_fn_args:
            kwargs["params"] = self.params
        if "config" in model_fn_args:
            kwargs["config"] = config
        tf.compat.v1.logging.info("Calling model_fn.")
        result = self._model_fn(features=features, **kwargs)
        tf.compat.v1.logging.info("Done calling model_fn.")
        if not isinstance(result, EstimatorSpec):
            raise ValueError("model_fn should return an EstimatorSpec.")
        return result

    def _create_global_step(self, graph):
        return tf.compat.v1.train.create_global_step(graph)

    def _create_and_assert_global_step(self, graph):
        step = self._create_global_step(graph)
        assert step is tf.compat.v1.train.get_global_step()
        assert step.dtype.is_integer
        return step

    def _assert_members_are_not_overridden(self):
        _assert_members_are_not_overridden(Estimator, self)


def _assert_members_are_not_overridden(cls, obj) -> None:
    """Raises ValueError if `obj`'s class overrides `Estimator` members other than the allowed ones.

    TPUEstimator is exempt, as upstream exempts its own.
    """
    if obj.__class__.__name__ == "TPUEstimator":
        return
    estimator_members = set(m for m in dir(cls) if not m.startswith("__"))
    subclass_members = set(obj.__class__.__dict__.keys())
    common = estimator_members & subclass_members - _ALLOWED_OVERRIDES
    overridden = [m for m in common if getattr(cls, m) != getattr(obj.__class__, m)]
    if overridden:
        raise ValueError(
            "Subclasses of Estimator cannot override members of Estimator. {} does override {}".format(
                obj.__class__, overridden
            )
        )


def _check_checkpoint_available(model_dir: str) -> None:
    if not tf.train.latest_checkpoint(model_dir):
        raise ValueError("Could not find trained model in model_dir: {}.".format(model_dir))


def _check_hooks_type(hooks) -> list:
    return instances_of(tf.compat.v1.train.SessionRunHook, hooks, "Hooks must be a SessionRunHook, given: {}")


def _check_listeners_type(saving_listeners) -> list:
    message = "saving_listeners must be a list of CheckpointSaverListener, given: {}"
    return instances_of(tf.compat.v1.train.CheckpointSaverListener, saving_listeners, message)
