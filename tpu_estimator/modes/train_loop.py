"""TRAIN on shards: an in-graph loop of `iterations_per_loop` steps per `Session.run`.

One step, top to bottom (`TrainLoop._step`):

1. read inputs and look up the embeddings (`step_feed.StepFeed.for_training`): each replica's `(features,
   labels)`; with an `EmbeddingConfigSpec`, the ids were preprocessed ahead of the loop by the embedding infeed
   thread (`embedding_infeed.py`), and the step dequeues them and looks up the activations (`embedding_bridge.py`);
2. replicate `model_fn` (`shared_stages.replicate_model_fn`): replica 0 traced and copied (`stamping.py`) or one
   build per replica (`replication.py`); replica 0's `train_op` runs;
3. reduce and update: dense gradients are summed across replicas by `CrossShardOptimizer` inside the replicas
   (checked here); the embedding gradients tapped in every replica (`Replicas.tapped_gradients`) are joined and
   applied once per unique id by the engine, by the loop's `EmbeddingUpdate` (`embedding_update.py`): now, pipelined
   in the next step, or exchanged with the other hosts;
4. host calls: `host_call` tensors of every replica are concatenated and queued every
   `experimental_host_call_every_n_steps` steps; `host_fn` runs after the loop (`host_calls.HostCallOutfeed`).

Building the loop returns what it traced (`TracedTrainLoop`): the train op (the last step's loss) and replica 0's
spec, whose hooks join the ones that size and stop the loops, start the input, drain the host calls and report
progress (`hooks.py`).
"""

import dataclasses
from typing import Any, List, Optional, Tuple

import tensorflow as tf

from tpu_estimator import _estimator_lib, _tf_internal
from tpu_estimator.embedding_stage import embedding_update
from tpu_estimator.embedding_stage.embedding_bridge import EmbeddingBridge
from tpu_estimator.embedding_stage.embedding_update import EmbeddingUpdate
from tpu_estimator.estimator_core import checkpoint_saver
from tpu_estimator.hosts import mirrored_variables
from tpu_estimator.hosts.collectives import HostCollectives
from tpu_estimator.modes import hooks as hooks_lib
from tpu_estimator.modes import host_calls as host_calls_lib
from tpu_estimator.modes import shared_stages
from tpu_estimator.modes.step_feed import FedStep, FeedSources, StepFeed
from tpu_estimator.specs.context import ShardingContext
from tpu_estimator.specs.spec import call_scaffold_fn
from tpu_estimator.tpu_config import IterationsPerLoopCounter

ModeKeys = _estimator_lib.ModeKeys


@dataclasses.dataclass(frozen=True)
class TrainLoopSettings:
    """The loop's own settings.

    Attributes:
      iterations_per_loop: the parsed `TPUConfig.iterations_per_loop` (a count or a period).
      host_call_every_n_steps: `TPUConfig.experimental_host_call_every_n_steps`.
      progress: loss/step logging and examples/sec.
      saves_checkpoints: the loop brings the chief's checkpoint saver (`estimator_core.checkpoint_saver`, which
        writes `graph.pbtxt` natively), in place of the Estimator's default one: the `RunConfig` saves checkpoints
        and `train()` was given no `CheckpointSaverHook`.
      steps: `train()`'s `steps` (the loop's `LoopStopHook` stops after them).
      max_steps: `train()`'s `max_steps` (or stops at this global step).
    """

    iterations_per_loop: IterationsPerLoopCounter
    host_call_every_n_steps: int
    progress: hooks_lib.ProgressSettings
    saves_checkpoints: bool = False
    steps: Optional[int] = None
    max_steps: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class TracedTrainLoop:
    """What building the training loop returns.

    Attributes:
      loss: the last step's loss, after every step's updates of the `Session.run`.
      replica0_spec: what replica 0's `model_fn` returned (its hooks, scaffold and host call).
      iterations: the loop-length tensor (fed by the loop's `LoopStopHook`).
    """

    loss: tf.Tensor
    replica0_spec: Any
    iterations: tf.Tensor


class TrainLoop(shared_stages.ModeOnShards):
    """Builds the TRAIN graph on shards: the loop, its train op and its hooks.

    Args:
      settings: what every mode on shards needs (`model_fn`, params, embedding spec, ...).
      loop_settings: the loop's own settings.
      ctx: the `ShardingContext` of TRAIN.
    """

    def __init__(self, settings: shared_stages.ShardedSettings, loop_settings: TrainLoopSettings, ctx: ShardingContext):
        super(TrainLoop, self).__init__(settings, ctx)
        self._loop_settings = loop_settings
        self._host_calls = host_calls_lib.HostCallOutfeed(ctx.host_work_device, loop_settings.host_call_every_n_steps)

    def build(self, call_input_fn) -> _estimator_lib.EstimatorSpec:
        """Calls `input_fn`, builds the loop, and returns its `EstimatorSpec` (train op, loss, hooks, scaffold)."""
        collectives = shared_stages.host_collectives(self._ctx)
        bridge = shared_stages.build_embedding_bridge(self._settings, self._ctx, collectives)
        feed = StepFeed.for_training(FeedSources(call_input_fn, self._settings, self._ctx, bridge))
        update = embedding_update.for_training(bridge, feed.embedding_exchange)
        traced = self._build_loop(feed, bridge, update, collectives)
        if bridge is not None:
            # Outside the loop: registration builds initialisation checks that must not live in the loop frame.
            bridge.register_checkpoint_names(tf.compat.v1.get_default_graph())
        spec = traced.replica0_spec
        settings = self._loop_settings
        hooks = [
            hooks_lib.LoopStopHook(settings.iterations_per_loop, traced.iterations, settings.steps, settings.max_steps)
        ]
        hooks += feed.input_hooks + ([feed.infeed_hook] if feed.infeed_hook else [])
        if feed.embedding_exchange is not None:
            hooks.append(feed.embedding_exchange.hook)
        hooks += list(spec.training_hooks or [])
        if spec.host_call is not None and (collectives is None or collectives.is_chief):
            # With one process per host the chief's host call runs on every host's tensors; the others run none.
            hooks.append(self._host_calls.hook(spec.host_call))
        hooks.extend(self._progress_hooks(traced.loss))
        hooks.append(hooks_lib.InstallSignalHandlerHook())
        scaffold = call_scaffold_fn(spec.scaffold_fn)
        if collectives is not None:
            scaffold = mirrored_variables.mirror_from_chief(tf.compat.v1.get_default_graph(), collectives, scaffold)
        return _estimator_lib.EstimatorSpec(
            mode=ModeKeys.TRAIN,
            loss=traced.loss,
            train_op=traced.loss.op,
            training_hooks=hooks,
            training_chief_hooks=self._checkpoint_saver_hooks(hooks, scaffold),
            scaffold=scaffold,
        )

    def _checkpoint_saver_hooks(self, hooks, scaffold) -> List[tf.compat.v1.train.SessionRunHook]:
        """The chief's checkpoint saver, configured as the Estimator configures its default one (none if a hook of
        the model saves checkpoints)."""
        if not self._loop_settings.saves_checkpoints or any(
            isinstance(h, tf.compat.v1.train.CheckpointSaverHook) for h in hooks
        ):
            return []
        config = self._ctx.config
        return [
            checkpoint_saver.CheckpointSaverHook(
                config.model_dir,
                save_secs=config.save_checkpoints_secs,
                save_steps=config.save_checkpoints_steps,
                scaffold=scaffold,
                save_graph_def=getattr(config, "checkpoint_save_graph_def", True),
            )
        ]

    # ---- the loop ---------------------------------------------------------------------------------------------

    def _build_loop(
        self,
        feed: StepFeed,
        bridge: Optional[EmbeddingBridge],
        update: Optional[EmbeddingUpdate],
        collectives: Optional[HostCollectives],
    ) -> TracedTrainLoop:
        """The while loop of one `Session.run`; its loss is the last step's (after every step's updates)."""
        ipl = self._loop_settings.iterations_per_loop
        iterations = hooks_lib.iterations_per_loop_tensor(ipl.value if ipl.unit == "count" else 1)
        initial = [tf.constant(0, tf.int32), tf.constant(0.0, tf.float32)]
        invariants = [tf.TensorShape([]), tf.TensorShape([])]
        if update is not None:
            initial += update.initial_pending()
            invariants += update.pending_shape_invariants()

        # The while loop keeps only the tensors its body returns; replica 0's spec (hooks, scaffold, host call) is
        # kept from the body's one trace here.
        replica0_specs = []

        def step(step_counter, unused_loss, *pending):
            next_loop_vars, replica0_spec = self._step(feed, bridge, update, collectives, step_counter, list(pending))
            replica0_specs.append(replica0_spec)
            return next_loop_vars

        with _tf_internal.v1_control_flow():
            outputs = tf.compat.v1.while_loop(
                lambda step_counter, *_: step_counter < iterations,
                step,
                initial,
                shape_invariants=invariants,
                parallel_iterations=1,
                name="training_loop",
            )
        replica0_spec = replica0_specs[-1]
        loss = outputs[1]
        if update is not None:
            loss = update.after_loop(loss, list(outputs[2:]))
        return TracedTrainLoop(loss, replica0_spec, iterations)

    def _step(
        self,
        feed: StepFeed,
        bridge: Optional[EmbeddingBridge],
        update: Optional[EmbeddingUpdate],
        collectives: Optional[HostCollectives],
        step: tf.Tensor,
        pending: List[tf.Tensor],
    ) -> Tuple[List[tf.Tensor], Any]:
        """One training step, the loop body: `([step + 1, loss] + pending embedding update, replica 0's spec)`."""
        graph = tf.compat.v1.get_default_graph()
        first_op = len(graph.get_operations())
        inputs = feed.read()
        replicas = self._replicate_model_fn(inputs.per_replica, bridge, collectives)
        step_ops = graph.get_operations()[first_op:]
        spec = replicas.specs[0]
        side_effects = [spec.train_op]
        updates, next_pending = self._update_embeddings(update, inputs, replicas, pending, step_ops)
        side_effects += updates
        side_effects += self._enqueue_host_calls(replicas, step, step_ops, collectives)
        with tf.control_dependencies(side_effects):
            loss = tf.identity(tf.cast(spec.loss, tf.float32))
        return [step + 1, loss] + next_pending, spec

    # ---- the stages of one step ------------------------------------------------------------------------------

    def _replicate_model_fn(
        self, per_replica: List[Any], bridge: Optional[EmbeddingBridge], collectives: Optional[HostCollectives]
    ) -> shared_stages.Replicas:
        """`model_fn` on every replica; checks that replica 0 returned a loss and a train op.

        Raises:
          ValueError: several replicas but no cross-replica reduction (no `CrossShardOptimizer`), or no
            loss/train_op.
        """
        replicas = shared_stages.replicate_model_fn(self._settings, self._ctx, per_replica, bridge, collectives)
        if self._ctx.num_replicas > 1 and replicas.num_reductions == 0:
            raise ValueError("CrossShardOptimizer must be used for model training on TPUs.")
        spec = replicas.specs[0]
        if spec.loss is None or spec.train_op is None:
            raise ValueError("model_fn must return loss and train_op in TRAIN mode.")
        return replicas

    def _update_embeddings(
        self,
        update: Optional[EmbeddingUpdate],
        inputs: FedStep,
        replicas: shared_stages.Replicas,
        pending: List[tf.Tensor],
        step_ops,
    ) -> Tuple[List[tf.Operation], List[tf.Tensor]]:
        """The step's embedding update, by the loop's strategy (immediate, pipelined or exchanged).

        Returns:
          `(ops to run with the step, the pending update to carry to the next step)`.
        """
        if update is None:
            return [], []
        op, next_pending = update.step(inputs.per_replica, inputs.batches, replicas.tapped_gradients, pending)
        # As on a TPU, the step's reads (learning_rate_fn(global_step)) see the values from before the step.
        _tf_internal.order_variable_writes_after([op], step_ops)
        return [op], next_pending

    def _enqueue_host_calls(
        self, replicas: shared_stages.Replicas, step: tf.Tensor, step_ops, collectives: Optional[HostCollectives]
    ) -> List[tf.Operation]:
        """Queues the `host_call` tensors of every replica (every n-th step); with one process per host, gathered to
        the chief."""
        if replicas.specs[0].host_call is None:
            return []
        enqueue, host_tensors = self._host_calls.enqueue([s.host_call for s in replicas.specs], step, collectives)
        # The host call sees the variables from before the step's updates, as on a TPU.
        _tf_internal.order_variable_writes_after(host_tensors, step_ops)
        return [enqueue]

    # ---- after the loop --------------------------------------------------------------------------------------

    def _progress_hooks(self, loss: tf.Tensor) -> List[tf.compat.v1.train.SessionRunHook]:
        progress = self._loop_settings.progress
        every_n_runs = None
        if progress.every_n_steps is not None:
            # Hooks see one run per loop.
            every_n_runs = hooks_lib.logging_every_n_runs(
                progress.every_n_steps, self._loop_settings.iterations_per_loop
            )
        return hooks_lib.progress_hooks(loss, self._ctx.global_batch_size, progress, every_n_runs)
