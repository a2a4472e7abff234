"""EVAL on shards: `evaluate(steps=N)` runs its N steps in one in-graph loop, in one `Session.run`, as on a TPU.

One step, top to bottom (`EvalLoop._step`):

1. read inputs: each replica's `(features, labels)` (`input_pipeline.py`);
2. embedding lookup: the step's activations, tables read-only (`embedding_bridge.py`);
3. replicate `model_fn` on every replica (`sharded_step.replicate_model_fn`);
4. host calls: the `eval_metrics` tensors of every replica, concatenated, are queued on the host
   (`host_calls.HostCallOutfeed`); replica 0's loss is summed.

After the loop, `eval_metrics`' function is called once on a dequeue of that queue, and its update ops run once per
queued step (`EvalMetricsDrainHook`), so every metric sees every step's rows as upstream's outfeed thread makes it
see them. The reported loss is replica 0's, averaged over the loop (upstream: `outputs_from_all_shards=False`).
The Estimator's evaluation step counter advances by N per run, so its `StopAfterNEvalsHook` stops after the one
run and evaluation hooks see one `Session.run` for the N steps (upstream's `_SetEvalIterationsHook`).

An input that ends before N steps fails the loop: `EvalMetricsDrainHook` raises `EvaluationInputEndedError` (a
`ValueError`) saying how many steps were read (on a TPU such an evaluation hangs).
"""

from typing import List, Optional

import tensorflow as tf

from tpu_estimator import _estimator_lib, _tf_internal, sharded_step
from tpu_estimator import hooks as hooks_lib
from tpu_estimator import host_calls as host_calls_lib
from tpu_estimator.context import ShardingContext
from tpu_estimator.spec import call_scaffold_fn

ModeKeys = _estimator_lib.ModeKeys


class EvalLoop(object):
    """Builds the EVAL graph on shards: the loop over N steps, the metrics on the host, and the hooks.

    Args:
      settings: what every mode on shards needs (`model_fn`, params, embedding spec, ...).
      ctx: the `ShardingContext` of EVAL.
    """

    def __init__(self, settings: sharded_step.ShardedSettings, ctx: ShardingContext):
        self._settings = settings
        self._ctx = ctx
        self._pipeline = None
        self._bridge = None
        self._metrics_outfeed = host_calls_lib.HostCallOutfeed(ctx.host_device, every_n_steps=1)
        self._replica0_spec = None  # what replica 0's model_fn returned, once the step is traced

    def build(self, call_input_fn) -> _estimator_lib.EstimatorSpec:
        """Calls `input_fn`, builds the loop, and returns its `EstimatorSpec` (loss, metric ops, hooks, scaffold)."""
        ctx = self._ctx
        self._pipeline, input_hooks = sharded_step.build_input_pipeline(self._settings, ctx, call_input_fn)
        self._bridge = sharded_step.embedding_bridge(self._settings, ctx)
        iterations = hooks_lib.eval_loop_length_tensor()
        steps, total_loss = self._build_loop(iterations)
        if self._bridge is not None:
            self._bridge.register_checkpoint_names(tf.compat.v1.get_default_graph())
        spec = self._replica0_spec
        # The Estimator adds 1 to its evaluation step per run; the loop ran `steps`.
        eval_step = _tf_internal.get_or_create_eval_step()
        advance = tf.compat.v1.assign_add(eval_step, tf.cast(steps - 1, eval_step.dtype), use_locking=True)
        with tf.control_dependencies([advance]):
            loss = tf.math.divide(total_loss, tf.cast(tf.maximum(steps, 1), tf.float32))
        hooks = list(input_hooks) + list(spec.evaluation_hooks or [])
        eval_metric_ops = None
        drain = None
        if spec.eval_metrics is not None:
            metrics = self._metrics_outfeed.call_on_dequeued(spec.eval_metrics)
            # The Estimator runs each metric's update op with the loop; the real updates run after it, per step.
            loop_done = tf.group(loss)
            eval_metric_ops = {name: (value, loop_done) for name, (value, _) in metrics.items()}
            drain = [update for _, update in metrics.values()]
        hooks.append(EvalMetricsDrainHook(self._metrics_outfeed, drain))
        return _estimator_lib.EstimatorSpec(
            mode=ModeKeys.EVAL,
            loss=loss,
            eval_metric_ops=eval_metric_ops,
            evaluation_hooks=hooks,
            scaffold=call_scaffold_fn(spec.scaffold_fn),
        )

    def _build_loop(self, iterations: tf.Tensor):
        """The while loop of one `Session.run`; returns `(steps run, sum of replica 0's losses)`."""
        initial = [tf.constant(0, tf.int32), tf.constant(0.0, tf.float32)]
        with _tf_internal.v1_control_flow():
            steps, total_loss = tf.compat.v1.while_loop(
                lambda step, _: step < iterations,
                self._step,
                initial,
                parallel_iterations=1,
                name="evaluation_loop",
            )
        return steps, total_loss

    def _step(self, step: tf.Tensor, total_loss: tf.Tensor) -> List[tf.Tensor]:
        """One evaluation step, the loop body: `[step + 1, total_loss + replica 0's loss]`."""
        per_replica, _ = sharded_step.read_step_with_embeddings(self._pipeline, self._bridge)
        specs = sharded_step.replicate_model_fn(self._settings, self._ctx, per_replica, self._bridge).specs
        spec = specs[0]
        if spec.loss is None:
            raise ValueError("model_fn must return loss in EVAL mode.")
        self._replica0_spec = spec
        side_effects = []
        if spec.eval_metrics is not None:
            enqueue, _ = self._metrics_outfeed.enqueue([s.eval_metrics for s in specs], step)
            side_effects.append(enqueue)
        with tf.control_dependencies(side_effects):
            loss = tf.identity(tf.cast(spec.loss, tf.float32))
        return [step + 1, total_loss + loss]


class EvaluationInputEndedError(ValueError):
    """The evaluation input ended inside the loop: fewer batches than `evaluate(steps=...)`.

    Attributes:
      steps_read: the steps of the loop that read a batch, or None when unknown (no `eval_metrics`).
    """

    def __init__(self, steps_read: Optional[int]):
        self.steps_read = steps_read
        read = "{} step(s)".format(steps_read) if steps_read is not None else "fewer steps than asked"
        super(EvaluationInputEndedError, self).__init__(
            "The evaluation input ended after {} of a loop: on shards, evaluate(steps=N) runs its N steps in one "
            "loop as on a TPU, so input_fn must yield at least N batches (N = the `steps` given). Pass steps <= the "
            "number of batches, or .repeat() the dataset.".format(read)
        )


class EvalMetricsDrainHook(host_calls_lib.SummaryWritersHook):
    """After each evaluation loop, runs the metric updates once per step the loop queued; checks the loop ended.

    Args:
      outfeed: the loop's metric queue.
      update_ops: the metric update ops (each dequeues one step), or None without `eval_metrics`.

    Raises (from `end`):
      EvaluationInputEndedError: the input ended inside a loop (fewer batches than `evaluate(steps=...)`).
    """

    def __init__(self, outfeed: host_calls_lib.HostCallOutfeed, update_ops: Optional[list]):
        self._update_ops = update_ops
        self._queue_size = outfeed.size() if update_ops is not None else None
        self._loop_running = False

    def before_run(self, run_context):
        self._loop_running = True

    def after_run(self, run_context, run_values):
        self._loop_running = False
        self._drain(run_context.session)

    def _drain(self, session) -> int:
        if self._update_ops is None:
            return 0
        queued = int(session.run(self._queue_size))
        for _ in range(queued):
            session.run(self._update_ops)
        return queued

    def end(self, session):
        completed = self._drain(session)
        super(EvalMetricsDrainHook, self).end(session)
        if self._loop_running:
            self._loop_running = False
            raise EvaluationInputEndedError(completed if self._update_ops is not None else None)
