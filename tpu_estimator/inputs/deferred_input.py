"""`DeferredInput`: what the Estimator's `_call_input_fn` returns on shards, `input_fn` to be called per host."""

import dataclasses
from typing import Any, Callable, Dict, Optional


@dataclasses.dataclass(frozen=True)
class DeferredInput:
    """`input_fn` with its arguments, called inside `model_fn` once per host with its `TPUContext` (a class, not a
    tuple: the Estimator would take a tuple for `(features, labels)`).

    Attributes:
      input_fn: the user's `input_fn`.
      kwargs: its arguments (`params` holds the batch size for `input_fn`; `config`, `mode`, `input_context` when it
        takes them).
      steps: `train()`'s or `evaluate()`'s `steps` (the loop's length and stop).
      max_steps: `train()`'s `max_steps`.
      hooks_save_checkpoints: `train()` was given a `CheckpointSaverHook` (the training loop then brings no checkpoint
        saver of its own).
    """

    input_fn: Callable[..., Any]
    kwargs: Dict[str, Any]
    steps: Optional[int] = None
    max_steps: Optional[int] = None
    hooks_save_checkpoints: bool = False

    def call(self, context: Any) -> Any:
        """Calls `input_fn` with `params["context"] = context`.

        Args:
          context: the `TPUContext` of the host the input is for.

        Returns:
          What `input_fn` returned.
        """
        kwargs = dict(self.kwargs)
        kwargs["params"] = dict(self.kwargs["params"], context=context)
        return self.input_fn(**kwargs)
