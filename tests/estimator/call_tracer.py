"""Which product modules one call visits, and its callbacks: calls from one product module into another that is
already on the stack below the caller (the code jumps back up instead of reading down).

Not callbacks: calls made by code outside the product (TensorFlow's `while_loop` calling its body, the user's
`model_fn` calling `CrossShardOptimizer`), and calls between the methods of one object (the Estimator calling the
`_call_input_fn`/`_call_model_fn`/`model_fn` of its subclass `TPUEstimator`, which reads its base's properties).
"""

import dataclasses
import os
import sys
import threading
from typing import Callable, List, Set, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PACKAGES = tuple(os.path.join(REPO, package) + os.sep for package in ("tpu_estimator", "embedding"))


def product_module(filename: str) -> str:
    """`tpu_estimator/modes/train_loop.py` for a product file, '' for any other."""
    if filename.startswith(_PACKAGES):
        return os.path.relpath(filename, REPO)
    return ""


@dataclasses.dataclass
class CallTrace:
    """Attributes:
    visited: the product modules called.
    callbacks: `(caller module, callee module, callee function)` of each call back into a module on the stack.
    """

    visited: Set[str] = dataclasses.field(default_factory=set)
    callbacks: Set[Tuple[str, str, str]] = dataclasses.field(default_factory=set)


def trace_calls(function: Callable[[], object]) -> CallTrace:
    """Runs `function()` in this thread under a profiler that records `CallTrace`."""
    trace = CallTrace()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = product_module(frame.f_code.co_filename)
        if not callee:
            return
        trace.visited.add(callee)
        caller_frame = frame.f_back
        caller = product_module(caller_frame.f_code.co_filename) if caller_frame else ""
        if not caller or caller == callee:
            return
        receiver = frame.f_locals.get("self")
        if receiver is not None and receiver is caller_frame.f_locals.get("self"):
            return  # one object's methods, in the modules of its class and its base class
        below: List[str] = []
        outer = caller_frame.f_back
        while outer is not None:
            below.append(product_module(outer.f_code.co_filename))
            outer = outer.f_back
        if callee in below:
            trace.callbacks.add((caller, callee, frame.f_code.co_name))

    assert threading.current_thread() is threading.main_thread()
    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return trace
