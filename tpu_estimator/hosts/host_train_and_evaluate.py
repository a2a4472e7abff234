"""`train_and_evaluate` with one process per host: every host evaluates the checkpoints the chief's saves pick.

The local loop of `train_and_evaluate` evaluates inside training: a listener of the checkpoint saver pauses the run
after a save, evaluates the new checkpoint (then runs the exporters), and training goes on in the same session, so
the input pipeline reads on where it stood. With one process per host, evaluation is collective (each host
evaluates its part of the eval input, the metrics are summed over the hosts), so every host pauses at the same step:

* only the chief saves checkpoints, so only the chief's listener (`ChiefEvaluationPicks`) sees the saves; it picks
  the ones to evaluate (`EvaluationThrottle`: each save but the first, at most once per `EvalSpec.throttle_secs`,
  and the last one unless it was just evaluated);
* after each run of the training loop, every host's hook (`EvaluateWhatTheChiefPicks`) receives the chief's pick by
  a collective broadcast in the training session, after the chief's save (the saver is a chief-only hook, and those
  run first), and every host evaluates that checkpoint in the pause;
* after training, the chief's pick of the last checkpoint reaches every host the same way.

The throttle's clock is the chief's alone: hosts reading their own clocks could disagree about a throttle that ends
between their checks, and one host would evaluate while the others train on.
"""

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from tpu_estimator.estimator_core import evaluator as evaluator_lib
from tpu_estimator.hosts import collectives

# How long a host waits for the chief's pick: the chief answers once it has saved (a large model's checkpoint may
# take minutes); a lost chief fails the broadcast at once (its connection is gone).
CHIEF_PICK_WAIT_SECS = 3600
# No evaluation.
_NOT_PICKED = -1


class ChiefEvaluationPicks(evaluator_lib.ThrottledEvaluations):
    """The chief's listener: which checkpoint saves are evaluated (the global step of the pick, or -1).

    Args:
      eval_throttle_secs: `EvalSpec.throttle_secs`.
    """

    def __init__(self, eval_throttle_secs: int):
        super().__init__(eval_throttle_secs)
        self._picked = _NOT_PICKED

    def begin(self) -> None:
        super().begin()
        self._picked = _NOT_PICKED

    def _evaluate(self, global_step_value: int) -> None:
        self._picked = int(global_step_value)

    def take(self) -> int:
        """The step of the checkpoint picked since the last call, or -1."""
        picked, self._picked = self._picked, _NOT_PICKED
        return picked


class EvaluateWhatTheChiefPicks(tf.compat.v1.train.SessionRunHook):
    """Every host's training hook: after each run, the chief's pick (a collective broadcast); then evaluates it.

    Args:
      host_collectives: this host's collectives with the others.
      picks: the chief's listener (read on the chief only).
      evaluate: evaluates the checkpoint of a global step on this host.
    """

    def __init__(
        self,
        host_collectives: collectives.HostCollectives,
        picks: ChiefEvaluationPicks,
        evaluate: Callable[[int], None],
    ):
        self._collectives = host_collectives
        self._picks = picks
        self._evaluate = evaluate
        self._pick = self._shared_pick = None

    def begin(self) -> None:
        with tf.name_scope("evaluate_what_the_chief_picks"), tf.device(self._collectives.device):
            self._pick = tf.compat.v1.placeholder(tf.int64, [], name="pick")
            self._shared_pick = self._collectives.from_chief(self._pick)

    def after_run(self, run_context, run_values) -> None:
        del run_values
        pick = self._picks.take() if self._collectives.is_chief else _NOT_PICKED
        options = tf.compat.v1.RunOptions(timeout_in_ms=int(self._collectives.timeout_seconds * 1000))
        step = int(run_context.session.run(self._shared_pick, {self._pick: pick}, options=options))
        if step != _NOT_PICKED:
            self._evaluate(step)


def train_and_evaluate_on_hosts(
    estimator: Any, train_spec: Any, eval_spec: Any
) -> Tuple[Optional[Dict[str, Any]], List[Any]]:
    """`train_and_evaluate`'s local loop, run by every host's process of a `TPUEstimator` (see the module docstring).

    Args:
      estimator: a `TPUEstimator` whose config runs one process per host.
      train_spec: a `TrainSpec`.
      eval_spec: an `EvalSpec`.

    Returns:
      `(metrics of the last evaluation, export results of the last evaluation)`, the same on every host; `(None,
      None)` when nothing was evaluated.

    Raises:
      RuntimeError: a checkpoint the chief picked was not there to evaluate.
    """
    cluster = estimator.config.tpu_cluster
    wait_secs = CHIEF_PICK_WAIT_SECS
    if cluster.is_chief:
        wait_secs = collectives.chief_wait_secs(estimator.config.session_config, CHIEF_PICK_WAIT_SECS)
    host_collectives = collectives.HostCollectives(
        cluster.num_hosts, cluster.this_host, cluster.host_device(cluster.this_host), wait_secs
    )
    evaluator = evaluator_lib.Evaluator(estimator, eval_spec, train_spec.max_steps)
    last: Dict[str, Any] = {"result": None, "exports": None}

    def evaluate(global_step: int) -> None:
        # The chief's checkpoint of that step: every host evaluates the same one, whatever the newest it sees.
        path = _checkpoint_of_step(estimator.model_dir, global_step)
        if not tf.io.gfile.exists(path + ".index"):
            raise RuntimeError(
                "Host {} cannot read the checkpoint {} the chief saved for evaluation: model_dir must be a path every "
                "host reads (a shared file system or a gs:// or hdfs:// URL).".format(cluster.this_host, path)
            )
        last["result"], last["exports"] = evaluator_lib.evaluate_new_checkpoint(evaluator, path)

    picks = ChiefEvaluationPicks(eval_spec.throttle_secs)
    estimator.train(
        input_fn=train_spec.input_fn,
        max_steps=train_spec.max_steps,
        hooks=list(train_spec.hooks) + [EvaluateWhatTheChiefPicks(host_collectives, picks, evaluate)],
        saving_listeners=list(train_spec.saving_listeners) + [picks],
    )
    final_pick = collectives.int_from_chief(
        picks.take() if cluster.is_chief else _NOT_PICKED,
        cluster.num_hosts,
        cluster.this_host,
        host_collectives.device,
        cluster.target,
        estimator.config.session_config,
        timeout_secs=CHIEF_PICK_WAIT_SECS,
    )
    if final_pick != _NOT_PICKED:
        evaluate(final_pick)
    result = last["result"]
    if result is None:  # nothing evaluated (a run resumed at max_steps), as the local loop returns it
        return None, None
    return result.metrics, last["exports"]


def _checkpoint_of_step(model_dir: str, global_step: int) -> str:
    """The path of `model_dir`'s checkpoint at `global_step` (from its `checkpoint` state; `model.ckpt-N` else)."""
    state = tf.train.get_checkpoint_state(model_dir)
    suffix = "-{}".format(global_step)
    for path in list(state.all_model_checkpoint_paths) if state else []:
        if path.endswith(suffix):
            return path if os.path.isabs(path) else os.path.join(model_dir, path)
    return os.path.join(model_dir, "model.ckpt" + suffix)
