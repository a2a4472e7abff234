"""Which product modules one call visits, in every thread it starts, and its callbacks: calls from one product module
into another that is already on the stack below the caller (the code jumps back up instead of reading down).

A thread's stack continues below its first frame with the stack that started it (`Thread.start`'s caller's, and so
on for a thread started by a thread), so a function handed to a thread and called back there counts as any other
callback. Threads that TensorFlow's runtime starts (not through `threading`: the `py_function`s of a `Session.run`)
are not traced; their calls come from TensorFlow's frames.

Not callbacks: calls made by code outside the product (TensorFlow's `while_loop` calling its body, the user's
`model_fn` calling `CrossShardOptimizer`), and calls between the methods of one object (the Estimator calling the
`_call_input_fn`/`_call_model_fn`/`model_fn` of its subclass `TPUEstimator`, which reads its base's properties).
"""

import dataclasses
import os
import sys
import threading
from typing import Callable, Dict, List, Set, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PACKAGES = tuple(os.path.join(REPO, package) + os.sep for package in ("tpu_estimator", "embedding"))
_THREAD_START = threading.Thread.start.__code__


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
    threads: the names of the threads in which product code ran.
    """

    visited: Set[str] = dataclasses.field(default_factory=set)
    callbacks: Set[Tuple[str, str, str]] = dataclasses.field(default_factory=set)
    threads: Set[str] = dataclasses.field(default_factory=set)


def trace_calls(function: Callable[[], object]) -> CallTrace:
    """Runs `function()` in this thread (the main one) under a profiler that records `CallTrace`, in this thread and
    in every thread started through `threading` while it runs."""
    trace = CallTrace()
    lock = threading.Lock()
    started_from: Dict[threading.Thread, List[str]] = {}  # a thread -> the modules on the stack that started it

    def modules_below(frame) -> List[str]:
        below: List[str] = []
        while frame is not None:
            below.append(product_module(frame.f_code.co_filename))
            frame = frame.f_back
        return below + started_from.get(threading.current_thread(), [])

    def profile(frame, event, arg):
        if event != "call":
            return
        if frame.f_code is _THREAD_START:
            thread = frame.f_locals.get("self")
            with lock:
                started_from[thread] = modules_below(frame.f_back)
            return
        callee = product_module(frame.f_code.co_filename)
        if not callee:
            return
        with lock:
            trace.visited.add(callee)
            trace.threads.add(threading.current_thread().name)
        caller_frame = frame.f_back
        caller = product_module(caller_frame.f_code.co_filename) if caller_frame else ""
        if not caller or caller == callee:
            return
        receiver = frame.f_locals.get("self")
        if receiver is not None and receiver is caller_frame.f_locals.get("self"):
            return  # one object's methods, in the modules of its class and its base class
        if callee in modules_below(caller_frame.f_back):
            with lock:
                trace.callbacks.add((caller, callee, frame.f_code.co_name))

    assert threading.current_thread() is threading.main_thread()
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return trace
