"""EVAL on shards: one step per `Session.run`.

read inputs (`input_pipeline.py`) -> embedding lookup (`embedding_bridge.py`, tables read-only) -> replicate
`model_fn` (`sharded_step.replicate_model_fn`) -> `eval_metrics` over the rows of all replicas, on the host
(`host_calls.py`). The reported loss is replica 0's (averaged over steps by the Estimator, as upstream reports it).
"""

import tensorflow as tf

from tpu_estimator import _estimator_lib, sharded_step
from tpu_estimator import host_calls as host_calls_lib
from tpu_estimator.context import ShardingContext
from tpu_estimator.spec import call_scaffold_fn

ModeKeys = _estimator_lib.ModeKeys


def build_eval(
    settings: sharded_step.ShardedSettings, ctx: ShardingContext, call_input_fn
) -> _estimator_lib.EstimatorSpec:
    """Calls `input_fn` and builds one evaluation step over every replica; returns its `EstimatorSpec`."""
    pipeline, input_hooks = sharded_step.build_input_pipeline(settings, ctx, call_input_fn)
    bridge = sharded_step.embedding_bridge(settings, ctx)
    per_replica, _ = sharded_step.read_step_with_embeddings(pipeline, bridge)
    specs = sharded_step.replicate_model_fn(settings, ctx, per_replica, bridge).specs
    if bridge is not None:
        bridge.register_checkpoint_names(tf.compat.v1.get_default_graph())
    spec = specs[0]
    eval_metric_ops = None
    if spec.eval_metrics is not None:
        flat = host_calls_lib.concat_over_replicas("eval_metrics", [s.eval_metrics for s in specs], ctx.host_device)
        with tf.device(ctx.host_device):
            eval_metric_ops = host_calls_lib.call(
                spec.eval_metrics, host_calls_lib.pack_tensors(spec.eval_metrics, flat)
            )
    return _estimator_lib.EstimatorSpec(
        mode=ModeKeys.EVAL,
        loss=spec.loss,
        eval_metric_ops=eval_metric_ops,
        evaluation_hooks=list(input_hooks) + list(spec.evaluation_hooks),
        scaffold=call_scaffold_fn(spec.scaffold_fn),
    )
