"""EVAL on shards: `evaluate(steps=N)` runs its N steps in one in-graph loop, in one `Session.run`, as on a TPU.

One step, top to bottom (`EvalLoop._step`):

1. read inputs: each replica's `(features, labels)` (`step_feed.StepFeed.for_evaluation`, `input_pipeline.py`);
2. embedding lookup: the step's activations, tables read-only (`embedding_bridge.py`);
3. replicate `model_fn` on every replica (`shared_stages.replicate_model_fn`);
4. metrics: the `eval_metrics` tensors of every replica, concatenated on the host, go through `eval_metrics`'
   function, whose update ops run in the step, so every metric sees every step's rows as upstream's outfeed thread
   makes it see them; replica 0's loss is summed, and a counter of the steps read advances.

`eval_metrics`' function is called twice: in the loop body, where its update ops run once per step, and once after
the loop, on placeholders of the same shapes, for the value ops the Estimator reads. Its variables are created
outside the loop by the first call and handed, in order, to the second (`MetricVariables`), so both calls read and
write the same variables. The reported loss is replica 0's, averaged over the loop (upstream:
`outputs_from_all_shards=False`). The Estimator's evaluation step counter advances by N per run, so its
`StopAfterNEvalsHook` stops after the one run and evaluation hooks see one `Session.run` for the N steps (upstream's
`_SetEvalIterationsHook`).

An input that ends before N steps fails the loop: `EvalLoopEndHook` raises `EvaluationInputEndedError` (a
`ValueError`) saying how many steps were read (on a TPU such an evaluation hangs).
"""

import contextlib
import dataclasses
from typing import Any, Iterator, List, Optional, Tuple

import tensorflow as tf

from tpu_estimator import _estimator_lib, _tf_internal, graph_walk
from tpu_estimator.embedding_stage.embedding_bridge import EmbeddingBridge
from tpu_estimator.hosts.collectives import HostCollectives
from tpu_estimator.modes import hooks as hooks_lib
from tpu_estimator.modes import host_calls as host_calls_lib
from tpu_estimator.modes import shared_stages
from tpu_estimator.modes.step_feed import FeedSources, StepFeed
from tpu_estimator.specs.context import ShardingContext
from tpu_estimator.specs.spec import call_scaffold_fn

ModeKeys = _estimator_lib.ModeKeys


@dataclasses.dataclass(frozen=True)
class TracedEvalStep:
    """What the evaluation step's trace built besides its loop variables.

    Attributes:
      replica0_spec: what replica 0's `model_fn` returned.
      metric_inputs: the `eval_metrics` tensors of every replica concatenated on the host, or None.
    """

    replica0_spec: Any
    metric_inputs: Optional[List[tf.Tensor]]


class EvalLoop(shared_stages.ModeOnShards):
    """Builds the EVAL graph on shards: the loop over N steps with the metric updates in it, and the hooks.

    Args:
      settings: what every mode on shards needs (`model_fn`, params, embedding spec, ...).
      ctx: the `ShardingContext` of EVAL.
      steps: `evaluate()`'s `steps`, the loop's length: all of them run in one `Session.run`.

    Raises:
      ValueError: `steps` is None.
    """

    def __init__(self, settings: shared_stages.ShardedSettings, ctx: ShardingContext, steps: Optional[int]):
        super(EvalLoop, self).__init__(settings, ctx)
        if steps is None:
            raise ValueError("Evaluate `steps` must be set on TPU. Cannot be `None`.")
        self._steps = steps
        self._metric_variables = MetricVariables()

    def build(self, call_input_fn) -> _estimator_lib.EstimatorSpec:
        """Calls `input_fn`, builds the loop, and returns its `EstimatorSpec` (loss, metric ops, hooks, scaffold)."""
        ctx = self._ctx
        collectives = shared_stages.host_collectives(ctx)
        bridge = shared_stages.build_embedding_bridge(self._settings, ctx, collectives)
        feed = StepFeed.for_evaluation(FeedSources(call_input_fn, self._settings, ctx, bridge))
        with tf.device(ctx.host_work_device):
            steps_read = tf.compat.v1.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                name="evaluation_steps_read",
            )
        iterations = hooks_lib.eval_loop_length_tensor(self._steps)
        initial = [tf.constant(0, tf.int32), tf.constant(0.0, tf.float32)]

        traces = []  # what the body's one trace built besides its tensors (replica 0's spec, the metric inputs)

        def step(step_counter, total_loss):
            next_loop_vars, traced = self._step(feed, bridge, collectives, steps_read, step_counter, total_loss)
            traces.append(traced)
            return next_loop_vars

        with _tf_internal.v1_control_flow():
            steps, total_loss = tf.compat.v1.while_loop(
                lambda step_counter, _: step_counter < iterations,
                step,
                initial,
                parallel_iterations=1,
                name="evaluation_loop",
            )
        traced = traces[-1]
        if bridge is not None:
            bridge.register_checkpoint_names(tf.compat.v1.get_default_graph())
        spec = traced.replica0_spec
        # The Estimator adds 1 to its evaluation step per run; the loop ran `steps`.
        eval_step = _tf_internal.get_or_create_eval_step()
        advance = tf.compat.v1.assign_add(eval_step, tf.cast(steps - 1, eval_step.dtype), use_locking=True)
        with tf.control_dependencies([advance]):
            loss = tf.math.divide(total_loss, tf.cast(tf.maximum(steps, 1), tf.float32))
        hooks = feed.input_hooks + ([feed.infeed_hook] if feed.infeed_hook else []) + list(spec.evaluation_hooks or [])
        eval_metric_ops = None
        if spec.eval_metrics is not None:
            metrics = self._metric_values(spec.eval_metrics, traced.metric_inputs)
            # The Estimator runs each metric's update op with the loop: the real updates ran in it, per step.
            loop_done = tf.group(loss)
            eval_metric_ops = {name: (value, loop_done) for name, (value, _) in metrics.items()}
        hooks.append(EvalLoopEndHook(steps_read))
        return _estimator_lib.EstimatorSpec(
            mode=ModeKeys.EVAL,
            loss=loss,
            eval_metric_ops=eval_metric_ops,
            evaluation_hooks=hooks,
            scaffold=call_scaffold_fn(spec.scaffold_fn),
        )

    def _step(
        self,
        feed: StepFeed,
        bridge: Optional[EmbeddingBridge],
        collectives: Optional[HostCollectives],
        steps_read: tf.Variable,
        step: tf.Tensor,
        total_loss: tf.Tensor,
    ) -> Tuple[List[tf.Tensor], "TracedEvalStep"]:
        """One evaluation step, the loop body: `([step + 1, total_loss + replica 0's loss], what it traced)`.

        With one process per host, replica 0 is host 0's: its loss is gathered from the hosts, and every host's
        metric function sees every host's rows (gathered in host order, the replicas' order).
        """
        per_replica = feed.read().per_replica
        specs = shared_stages.replicate_model_fn(self._settings, self._ctx, per_replica, bridge, collectives).specs
        spec = specs[0]
        if spec.loss is None:
            raise ValueError("model_fn must return loss in EVAL mode.")
        # A step is read when every replica's step is: with per-host or per-shard input a replica may hit the end.
        with tf.device(self._ctx.host_work_device), tf.control_dependencies([s.loss for s in specs]):
            side_effects = [steps_read.assign_add(1)]
        metric_inputs = None
        if spec.eval_metrics is not None:
            metric_inputs, updates = self._metric_updates([s.eval_metrics for s in specs], collectives)
            side_effects.extend(updates)
        loss = tf.cast(spec.loss, tf.float32)
        if collectives is not None:
            with tf.device(self._ctx.host_work_device):
                loss = collectives.all_gather(tf.reshape(loss, [1]))[0]
        with tf.control_dependencies(side_effects):
            loss = tf.identity(loss)
        return [step + 1, total_loss + loss], TracedEvalStep(spec, metric_inputs)

    def _metric_updates(
        self, per_replica_metrics, collectives: Optional[HostCollectives]
    ) -> Tuple[List[tf.Tensor], List[Any]]:
        """In the loop body: `eval_metrics`' function on every replica's rows (of every host).

        Returns:
          `(the function's inputs: every replica's tensors concatenated on the host, its update ops)`.
        """
        host = self._ctx.host_work_device
        metric_inputs = host_calls_lib.concat_over_replicas("eval_metrics", per_replica_metrics, host)
        if collectives is not None:
            with tf.device(host):
                metric_inputs = [collectives.all_gather(t) for t in metric_inputs]
        with tf.device(host), self._metric_variables.creating():
            metric_fn_call = per_replica_metrics[0]
            metrics = host_calls_lib.call(metric_fn_call, host_calls_lib.pack_tensors(metric_fn_call, metric_inputs))
        _check_metric_pairs(metrics)
        return metric_inputs, [update for _, update in metrics.values()]

    def _metric_values(self, metric_fn_call, metric_inputs: List[tf.Tensor]) -> dict:
        """After the loop: `eval_metrics`' function again, on placeholders shaped as the loop's `metric_inputs`,
        over the loop's metric variables."""
        with tf.device(self._ctx.host_work_device):
            inputs = [
                tf.compat.v1.placeholder(t.dtype, t.shape, name="eval_metrics_input_%d" % i)
                for i, t in enumerate(metric_inputs)
            ]
            try:
                with self._metric_variables.reusing():
                    metrics = host_calls_lib.call(metric_fn_call, host_calls_lib.pack_tensors(metric_fn_call, inputs))
            except ValueError as e:
                if "already exists" not in str(e):
                    raise
                raise ValueError(
                    "eval_metrics' function failed on its second call, after the evaluation loop: {} (on shards it is "
                    "called in the loop for the updates and again after it for the metric values; create metric "
                    "variables with tf.compat.v1.metrics or tf.Variable, not "
                    "tf.compat.v1.get_variable)".format(e)
                ) from e
        for name, (value, _) in metrics.items():
            if _reads_any(value, inputs):
                raise ValueError(
                    "eval_metrics' metric {!r}: its value reads the function's input tensors, not only its variables. "
                    "On shards the updates run in the evaluation loop and the value is read after it (as on a TPU): "
                    "accumulate what the value needs in variables in the update op (e.g. tf.compat.v1.metrics.mean)."
                    "".format(name)
                )
        return metrics


class MetricVariables(object):
    """The variables of `eval_metrics`' function, shared by its call in the loop body and its call after the loop.

    `creating()` (the call in the loop) creates each variable outside the loop, where its initial value must live,
    makes it a local metric variable (initialised by each evaluation's session, never saved or restored, whatever
    created it: `tf.compat.v1.metrics` or `tf.Variable`) and records it; `reusing()` (the call after the loop) hands
    out the recorded variables in creation order instead of creating new ones.
    """

    def __init__(self):
        self._variables = []

    @contextlib.contextmanager
    def creating(self) -> Iterator[None]:
        """Variables created inside are created in the graph's root context and recorded."""

        def create_outside_the_loop(next_creator, **kwargs):
            with _tf_internal.outside_control_flow(), tf.control_dependencies(None):
                variable = next_creator(**kwargs)
            _make_local_metric_variable(variable)
            self._variables.append(variable)
            return variable

        with tf.compat.v1.variable_creator_scope(create_outside_the_loop):
            yield

    @contextlib.contextmanager
    def reusing(self) -> Iterator[None]:
        """Variables created inside are the recorded ones, in order.

        Raises:
          ValueError: the function created more or fewer variables than on its first call, or one of another dtype
            or shape.
        """
        recorded = list(self._variables)
        handed = []

        def reuse(next_creator, **kwargs):
            del next_creator
            if len(handed) == len(recorded):
                raise ValueError(
                    "eval_metrics' function created more variables on its second call than on its first ({}): on "
                    "shards it is called in the evaluation loop and again after it for the metric values, and must "
                    "create the same variables each time.".format(len(recorded))
                )
            variable = recorded[len(handed)]
            dtype, shape = kwargs.get("dtype"), kwargs.get("shape")
            same_dtype = dtype is None or tf.as_dtype(dtype).base_dtype == variable.dtype.base_dtype
            same_shape = shape is None or tf.TensorShape(shape).is_compatible_with(variable.shape)
            if not (same_dtype and same_shape):
                raise ValueError(
                    "eval_metrics' function created variable {} as {} {} on its first call and as {} {} on its second: "
                    "it must create the same variables each time.".format(
                        variable.name, variable.dtype.base_dtype.name, variable.shape, dtype, shape
                    )
                )
            handed.append(variable)
            return variable

        with tf.compat.v1.variable_creator_scope(reuse):
            yield
        if len(handed) != len(recorded):
            raise ValueError(
                "eval_metrics' function created {} variables on its second call and {} on its first: on shards it is "
                "called in the evaluation loop and again after it for the metric values, and must create the same "
                "variables each time.".format(len(handed), len(recorded))
            )


def _check_metric_pairs(metrics) -> None:
    """`eval_metrics`' function returned `{name: (value, update_op)}`, as `tf.compat.v1.metrics` return.

    Upstream's TPUEstimator on a TPU takes each value as such a pair too (a Keras `Metric` object is accepted only
    by its CPU path).

    Raises:
      TypeError: not a dict, or a value that is not a `(value, update_op)` pair (naming the metric).
    """
    if not isinstance(metrics, dict):
        raise TypeError(
            "eval_metrics' function must return a dict of metric name -> (value, update_op); got {}.".format(
                type(metrics).__name__
            )
        )
    for name, pair in metrics.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(
                "eval_metrics' metric {!r} is a {}, not a (value, update_op) pair. On shards, as on a TPU, each "
                "metric is a pair as tf.compat.v1.metrics return it (e.g. tf.compat.v1.metrics.mean(x) for a Keras "
                "Mean); Keras Metric objects are accepted only by upstream's CPU path.".format(
                    name, type(pair).__name__
                )
            )


def _reads_any(tensor, sources) -> bool:
    """Whether `tensor` depends, through data or control inputs, on any tensor of `sources`."""
    targets = {t.op for t in sources}
    return any(op in targets for op in graph_walk.ancestor_ops([tf.convert_to_tensor(tensor).op]))


def _make_local_metric_variable(variable) -> None:
    """Moves `variable` from the global and trainable collections to the local and metric ones."""
    graph = variable.graph
    for key in (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES):
        collection = graph.get_collection_ref(key)
        collection[:] = [v for v in collection if v is not variable]
    for key in (tf.compat.v1.GraphKeys.LOCAL_VARIABLES, tf.compat.v1.GraphKeys.METRIC_VARIABLES):
        if not any(v is variable for v in graph.get_collection(key)):
            graph.add_to_collection(key, variable)


class EvaluationInputEndedError(ValueError):
    """The evaluation input ended inside the loop: fewer batches than `evaluate(steps=...)`.

    Attributes:
      steps_read: the steps of the loop that read a batch.
    """

    def __init__(self, steps_read: int):
        self.steps_read = steps_read
        super(EvaluationInputEndedError, self).__init__(
            "The evaluation input ended after {} step(s) of a loop: on shards, evaluate(steps=N) runs its N steps in one "
            "loop as on a TPU, so input_fn must yield at least N batches (N = the `steps` given). Pass steps <= the "
            "number of batches, or .repeat() the dataset.".format(steps_read)
        )


class EvalLoopEndHook(host_calls_lib.SummaryWritersHook):
    """Checks that each evaluation loop ended: an input that ended inside it raises with the steps it read.

    Args:
      steps_read: the local variable the loop advances once per step that read a batch.

    Raises (from `end`):
      EvaluationInputEndedError: the input ended inside a loop (fewer batches than `evaluate(steps=N)`).
    """

    def __init__(self, steps_read: tf.Variable):
        self._steps_read = steps_read
        self._loop_running = False

    def before_run(self, run_context):
        self._loop_running = True

    def after_run(self, run_context, run_values):
        self._loop_running = False

    def end(self, session):
        super(EvalLoopEndHook, self).end(session)
        if self._loop_running:
            self._loop_running = False
            raise EvaluationInputEndedError(int(session.run(self._steps_read)))
