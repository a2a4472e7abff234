"""TRAIN, EVAL and PREDICT on shards: the graphs `TPUEstimator` builds when `use_tpu=True`.

TRAIN: an in-graph loop of `iterations_per_loop` steps per `Session.run`; each step reads the input, builds the
replicas (`replication.run_replicated`) and runs replica 0's `train_op` (whose gradients were summed over all
replicas). `host_call` tensors of every replica are concatenated and pushed to a host queue every
`experimental_host_call_every_n_steps` steps; `host_fn` runs on the host after the loop, once per queued entry.
EVAL and PREDICT run one step per `Session.run`: metrics and predictions are computed over the rows of all
replicas on the host.
"""

import weakref
from typing import Any, List

import tensorflow as tf

from tpu_estimator import _estimator_lib, _tf_internal, replication
from tpu_estimator import hooks as hooks_lib
from tpu_estimator import host_calls as host_calls_lib
from tpu_estimator.context import ShardingContext, TPUContext
from tpu_estimator.embedding_bridge import EmbeddingBridge
from tpu_estimator.input_pipeline import InputPipeline, TensorInfeedHook
from tpu_estimator.spec import TPUEstimatorSpec, call_scaffold_fn

ModeKeys = _estimator_lib.ModeKeys
# How many preprocessed steps the embedding infeed thread may run ahead of the training loop.
_EMBEDDING_INFEED_DEPTH = 4
# How many steps the embedding infeed thread prepares per Session.run.
_EMBEDDING_INFEED_STEPS_PER_RUN = 8
# The loop-length tensor of each training graph (the stop hook is created before the graph).
_ITERATIONS_BY_GRAPH = weakref.WeakKeyDictionary()


class LoopStopHookFromGraph(hooks_lib.LoopStopHook):
    """`LoopStopHook` whose loop-length tensor is found in the graph when the session starts.

    (`Estimator.train` creates the stop hooks before it builds the graph.)
    """

    def __init__(self, iterations_per_loop, num_steps, last_step):
        super(LoopStopHookFromGraph, self).__init__(None, iterations_per_loop, num_steps=num_steps, last_step=last_step)

    def begin(self):
        super(LoopStopHookFromGraph, self).begin()
        graph = tf.compat.v1.get_default_graph()
        if graph not in _ITERATIONS_BY_GRAPH:
            raise RuntimeError("The TPUEstimator training loop was not found in the graph.")
        self._iterations = _ITERATIONS_BY_GRAPH[graph]


class OutfeedHostCallHook(host_calls_lib.SummaryWritersHook):
    """After each loop, runs `host_fn` once per entry the loop queued."""

    def __init__(self, host_ops, queue_size: tf.Tensor):
        self._host_ops = host_ops
        self._queue_size = queue_size

    def _drain(self, session) -> None:
        for _ in range(int(session.run(self._queue_size))):
            session.run(self._host_ops)

    def after_run(self, run_context, run_values):
        self._drain(run_context.session)

    def end(self, session):
        self._drain(session)
        super(OutfeedHostCallHook, self).end(session)


def _verify_spec(spec: Any, mode: str) -> Any:
    """Upstream's checks on what `model_fn` returns on shards."""
    if isinstance(spec, TPUEstimatorSpec):
        return spec
    if mode != ModeKeys.TRAIN:
        raise RuntimeError(
            "estimator_spec used by TPU {} must have type `TPUEstimatorSpec`. Got {}".format(
                "evaluation" if mode == ModeKeys.EVAL else "prediction", type(spec)
            )
        )
    err = "{} returned by EstimatorSpec is not supported in TPUEstimator. "
    if spec.training_chief_hooks:
        raise ValueError(
            err.format("training_chief_hooks") + "If you want to pass training hooks, please pass via training_hooks."
        )
    if spec.scaffold:
        tf.compat.v1.logging.warning(
            "EstimatorSpec.Scaffold is ignored by TPU train/eval. Please use TPUEstimatorSpec."
        )
    return spec


class ShardedModeBuilder(object):
    """Builds the graph of one mode on shards.

    Args:
      estimator: the `TPUEstimator` (for model_dir, logging settings, iterations per loop).
      model_fn: the user's `model_fn`.
      ctx: the `ShardingContext` of the mode.
      config: the `RunConfig` to pass to `model_fn`.
      params: the params dict to pass (without batch_size/context, which are added per replica).
      batch_axis: the estimator's `batch_axis`.
    """

    def __init__(self, estimator, model_fn, ctx: ShardingContext, config, params, batch_axis):
        self._estimator = estimator
        self._model_fn = model_fn
        self._ctx = ctx
        self._config = config
        self._params = params
        self._batch_axis = batch_axis

    def build(self, deferred_input, mode: str) -> _estimator_lib.EstimatorSpec:
        pipeline = InputPipeline(deferred_input.call, self._ctx, self._batch_axis)
        input_hooks = pipeline.build()
        self._bridge = None
        spec = self._estimator._embedding_config_spec
        if spec is not None:
            self._bridge = EmbeddingBridge(
                spec, self._ctx.num_replicas, self._ctx.replica_devices, mode, self._ctx.batch_size_for_model_fn
            )
        if mode == ModeKeys.TRAIN:
            return self._train(pipeline, input_hooks)
        if mode == ModeKeys.EVAL:
            return self._evaluate(pipeline, input_hooks)
        return self._predict(pipeline, input_hooks)

    # ---- one replica ----------------------------------------------------------------------------------------

    def _replica_params(self) -> dict:
        params = dict(self._params)
        params["batch_size"] = self._ctx.batch_size_for_model_fn
        params["use_tpu"] = True
        params["context"] = TPUContext(self._ctx, call_from_input_fn=False)
        return params

    def _build_replicas(self, per_replica_inputs: List[Any], mode: str) -> List[Any]:
        from tpu_estimator.tpu_estimator import call_user_model_fn

        def replica_fn(replica_id: int):
            features, labels = per_replica_inputs[replica_id]
            if self._bridge is not None:
                features = self._bridge.tap_activations(features)
            spec = call_user_model_fn(self._model_fn, features, labels, mode, self._config, self._replica_params())
            return _verify_spec(spec, mode)

        graph = tf.compat.v1.get_default_graph()
        first_op = len(graph.get_operations())
        self._replication_stats = {}
        specs = replication.run_replicated(replica_fn, self._ctx.replica_devices, self._replication_stats)
        if self._ctx.config.xla_compile_shards:
            _tf_internal.mark_for_xla_compilation(graph.get_operations()[first_op:])
        if self._bridge is not None and mode != ModeKeys.TRAIN:
            self._bridge.register_checkpoint_names(tf.compat.v1.get_default_graph())
        return specs

    def _next_inputs(self, pipeline: InputPipeline):
        """This step's per-replica inputs (with embedding activations) and the engine batches (or None)."""
        per_replica = pipeline.next_step()
        if self._bridge is None:
            return per_replica, None
        return self._bridge.prepare(per_replica, self._ctx.host_device)

    def _embedding_infeed(self, pipeline: InputPipeline):
        """Host-side enqueue of preprocessed embedding inputs, run by an infeed thread ahead of the loop.

        Returns:
          `(dequeue, hook)`: `dequeue()` builds, inside the loop, the step's per-replica inputs and engine batches;
          `hook` runs the enqueue op in its thread while the shards compute.
        """
        ctx = self._ctx
        built = {}

        def enqueue_step(index):
            per_replica, batches = self._bridge.preprocess(pipeline.next_step(), ctx.host_device)
            structure = (per_replica, batches)
            # Absent parts (labels=None of a features-only input_fn) stay in the structure, not in the queue.
            flat = [t for t in tf.nest.flatten(structure, expand_composites=True) if t is not None]
            if "queue" not in built:
                graph = tf.compat.v1.get_default_graph()
                flow = graph._get_control_flow_context()
                graph._set_control_flow_context(None)
                try:  # The queue lives outside the enqueue loop.
                    with tf.device(ctx.host_device):
                        built["queue"] = tf.queue.FIFOQueue(
                            capacity=_EMBEDDING_INFEED_DEPTH, dtypes=[t.dtype for t in flat], name="embedding_infeed"
                        )
                finally:
                    graph._set_control_flow_context(flow)
                built["structure"], built["flat"] = structure, flat
            with tf.device(ctx.host_device), tf.control_dependencies([built["queue"].enqueue(flat)]):
                return index + 1

        # Each Session.run of the infeed thread prepares several steps (a per-step run would bound small models).
        with _tf_internal.v1_control_flow():
            enqueue_op = tf.compat.v1.while_loop(
                lambda index: index < _EMBEDDING_INFEED_STEPS_PER_RUN,
                enqueue_step,
                [tf.constant(0)],
                parallel_iterations=1,
                name="embedding_infeed_loop",
            )
        queue, structure, flat = built["queue"], built["structure"], built["flat"]
        hook = TensorInfeedHook(
            enqueue_op.op, queue.close(cancel_pending_enqueues=True), ctx.config.tpu_config.initial_infeed_sleep_secs
        )

        def dequeue():
            with tf.device(ctx.host_device):
                values = queue.dequeue()
                values = list(values) if isinstance(values, (list, tuple)) else [values]
                for value, original in zip(values, flat):
                    value.set_shape(original.shape)
                values = iter(values)
                leaves = [
                    None if t is None else next(values) for t in tf.nest.flatten(structure, expand_composites=True)
                ]
                step_inputs, step_batches = tf.nest.pack_sequence_as(structure, leaves, expand_composites=True)
            return self._bridge.attach_activations(step_inputs, step_batches, ctx.host_device), step_batches

        return dequeue, hook

    # ---- TRAIN ----------------------------------------------------------------------------------------------

    def _train(self, pipeline: InputPipeline, input_hooks) -> _estimator_lib.EstimatorSpec:
        ctx = self._ctx
        estimator = self._estimator
        ipl = estimator._iterations_per_training_loop
        default_iterations = ipl.value if ipl.unit == "count" else 1
        iterations = tf.compat.v1.placeholder_with_default(
            tf.constant(default_iterations, tf.int32), [], name="iterations_per_loop"
        )
        _ITERATIONS_BY_GRAPH[tf.compat.v1.get_default_graph()] = iterations
        every_n = ctx.config.tpu_config.experimental_host_call_every_n_steps
        captured = {}
        next_inputs = lambda: self._next_inputs(pipeline)
        if self._bridge is not None:
            next_inputs, infeed_hook = self._embedding_infeed(pipeline)
            input_hooks = list(input_hooks) + [infeed_hook]

        pipelined = self._bridge is not None and self._bridge.pipelined

        def body(step, unused_loss, *pending):
            graph = tf.compat.v1.get_default_graph()
            first_op = len(graph.get_operations())
            per_replica, batches = next_inputs()
            specs = self._build_replicas(per_replica, ModeKeys.TRAIN)
            replica_ops = graph.get_operations()[first_op:]
            if ctx.num_replicas > 1 and self._replication_stats["num_reductions"] == 0:
                raise ValueError("CrossShardOptimizer must be used for model training on TPUs.")
            spec = specs[0]
            if spec.loss is None or spec.train_op is None:
                raise ValueError("model_fn must return loss and train_op in TRAIN mode.")
            captured["spec"] = spec
            side_effects = [spec.train_op]
            next_pending = []
            if pipelined:
                # The previous step's update runs after this step's lookups: activations are one update stale.
                with tf.control_dependencies(tf.nest.flatten(per_replica)):
                    update = self._bridge.apply_pending(list(pending), ctx.host_device)
                next_pending = self._bridge.step_pending(batches, ctx.host_device)
            elif self._bridge is not None:
                update = self._bridge.apply_gradients(batches, ctx.host_device)
            if self._bridge is not None:
                # As on a TPU, the step's reads (learning_rate_fn(global_step)) see the values from before the step.
                _tf_internal.order_variable_writes_after([update], replica_ops)
                side_effects.append(update)
            host_call = getattr(spec, "host_call", None)
            if host_call is not None:
                enqueue, host_tensors = self._enqueue_host_call(
                    host_call, [s.host_call for s in specs], step, every_n, captured
                )
                _tf_internal.order_variable_writes_after(host_tensors, replica_ops)
                side_effects.append(enqueue)
            with tf.control_dependencies(side_effects):
                loss = tf.identity(tf.cast(spec.loss, tf.float32))
            return [step + 1, loss] + next_pending

        initial = [tf.constant(0, tf.int32), tf.constant(0.0, tf.float32)]
        invariants = [tf.TensorShape([]), tf.TensorShape([])]
        if pipelined:
            initial += self._bridge.empty_pending()
            invariants += self._bridge.pending_shape_invariants()
        with _tf_internal.v1_control_flow():
            outputs = tf.compat.v1.while_loop(
                lambda step, *_: step < iterations,
                body,
                initial,
                shape_invariants=invariants,
                parallel_iterations=1,
                name="training_loop",
            )
        loss = outputs[1]
        if pipelined:
            # The last step's update is applied when the loop ends, so every step's update lands in this Session.run.
            with tf.control_dependencies([loss]):
                final_update = self._bridge.apply_pending(list(outputs[2:]), ctx.host_device)
            with tf.control_dependencies([final_update]):
                loss = tf.identity(loss)
        spec = captured["spec"]
        if self._bridge is not None:
            # Outside the loop: registration builds initialisation checks that must not live in the loop frame.
            self._bridge.register_checkpoint_names(tf.compat.v1.get_default_graph())
        scaffold = call_scaffold_fn(getattr(spec, "scaffold_fn", None))
        hooks = list(input_hooks) + list(spec.training_hooks or [])
        if "host_queue" in captured:
            queue, template = captured["host_queue"]
            with tf.device(ctx.host_device):
                flat = queue.dequeue()
                flat = list(flat) if isinstance(flat, (list, tuple)) else [flat]
                host_ops = host_calls_lib.call(spec.host_call, host_calls_lib.pack_tensors(spec.host_call, flat))
            hooks.append(OutfeedHostCallHook(host_ops, queue.size()))
        every_n_runs = None
        if estimator._log_every_n_steps is not None:
            every_n_runs = hooks_lib.logging_every_n_runs(estimator._log_every_n_steps, ipl)
        hooks.extend(estimator._progress_hooks(ctx, loss, every_n_runs))
        hooks.append(hooks_lib.InstallSignalHandlerHook())
        return _estimator_lib.EstimatorSpec(
            mode=ModeKeys.TRAIN, loss=loss, train_op=loss.op, training_hooks=hooks, scaffold=scaffold
        )

    def _enqueue_host_call(self, host_call, per_replica_calls, step, every_n: int, captured) -> tf.Operation:
        flat = host_calls_lib.concat_over_replicas("host_call", per_replica_calls, self._ctx.host_device)
        with tf.device(self._ctx.host_device):
            if "host_queue" not in captured:
                # The queue must live outside the loop: it is created in the graph's root control-flow context.
                graph = tf.compat.v1.get_default_graph()
                flow = graph._get_control_flow_context()
                graph._set_control_flow_context(None)
                try:
                    queue = tf.queue.FIFOQueue(
                        capacity=-1,
                        dtypes=[t.dtype for t in flat],
                        shapes=[t.shape for t in flat],
                        name="host_call_queue",
                    )
                finally:
                    graph._set_control_flow_context(flow)
                captured["host_queue"] = (queue, flat)
            queue = captured["host_queue"][0]
            if every_n == 1:
                return queue.enqueue(flat), flat
            return tf.compat.v1.cond(
                tf.equal(tf.math.floormod(step, every_n), 0), lambda: queue.enqueue(flat), tf.no_op
            ), flat

    # ---- EVAL -----------------------------------------------------------------------------------------------

    def _evaluate(self, pipeline: InputPipeline, input_hooks) -> _estimator_lib.EstimatorSpec:
        specs = self._build_replicas(self._next_inputs(pipeline)[0], ModeKeys.EVAL)
        spec = specs[0]
        eval_metric_ops = None
        if spec.eval_metrics is not None:
            flat = host_calls_lib.concat_over_replicas(
                "eval_metrics", [s.eval_metrics for s in specs], self._ctx.host_device
            )
            with tf.device(self._ctx.host_device):
                eval_metric_ops = host_calls_lib.call(
                    spec.eval_metrics, host_calls_lib.pack_tensors(spec.eval_metrics, flat)
                )
        scaffold = call_scaffold_fn(spec.scaffold_fn)
        return _estimator_lib.EstimatorSpec(
            mode=ModeKeys.EVAL,
            loss=spec.loss,
            eval_metric_ops=eval_metric_ops,
            evaluation_hooks=list(input_hooks) + list(spec.evaluation_hooks),
            scaffold=scaffold,
        )

    # ---- PREDICT --------------------------------------------------------------------------------------------

    def _predict(self, pipeline: InputPipeline, input_hooks) -> _estimator_lib.EstimatorSpec:
        specs = self._build_replicas(self._next_inputs(pipeline)[0], ModeKeys.PREDICT)
        spec = specs[0]
        if spec.predictions is None:
            raise ValueError("model_fn must return predictions in PREDICT mode.")
        masks = pipeline.padding_masks
        with tf.device(self._ctx.host_device):
            mask = tf.concat(masks, axis=0) if len(masks) > 1 else masks[0]

            def gather(*per_replica):
                for tensor in per_replica:
                    if tensor.shape.rank == 0 or tensor.shape[0] is None:
                        raise ValueError(
                            "Predictions must have a static batch dimension on shards; got {}.".format(tensor)
                        )
                joined = tf.concat(per_replica, axis=0) if len(per_replica) > 1 else per_replica[0]
                return tf.boolean_mask(joined, mask)

            predictions = tf.nest.map_structure(gather, *[s.predictions for s in specs])
        scaffold = call_scaffold_fn(spec.scaffold_fn)
        return _estimator_lib.EstimatorSpec(
            mode=ModeKeys.PREDICT,
            predictions=predictions,
            prediction_hooks=list(input_hooks) + list(spec.prediction_hooks),
            scaffold=scaffold,
        )
