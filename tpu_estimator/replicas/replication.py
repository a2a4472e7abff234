"""Replication: `model_fn` built once per shard on its device, with cross-replica reductions between them.

This per-replica build serves clusters and `tpu.replicate`/`tpu.shard`; on one host, `model_fn` is traced once
and the other replicas are copies of its ops (`stamping.py`, which uses the reductions and the optimizer below).

On a TPU, `model_fn` is traced once and XLA runs it on every core; `cross_replica_sum` is an all-reduce between
the running replicas. Here each replica is built as its own subgraph on its own device. The builds run in one
thread per replica, one thread at a time: a replica that reaches a cross-replica reduction hands over to the
next; when the last replica arrives, the reduction is built from every replica's input and all of them resume
with the result. This is how TensorFlow's own MirroredStrategy builds graphs, without mirrored variables:
variables are one logical copy, created by replica 0 and handed, in creation order, to the other replicas.

Only replica 0's side effects run (its `train_op`); the other replicas compute what the reductions need. Their
`CrossShardOptimizer.apply_gradients` builds the reductions but no update (it would never run): it is handed the
variables replica 0's update created (slots), as any variable, and returns a no-op.
"""

import contextlib
import sys
import threading
from typing import Any, Callable, ContextManager, Iterator, List, NamedTuple, Optional, Sequence

import tensorflow as tf

from tpu_estimator import _tf_internal
from tpu_estimator.replicas.replica_context import (
    ReplicaContext,
    ReplicaCoordinator,
    current_replica_context,
    set_current_replica_context,
)


class _Aborted(Exception):
    """Raised in waiting replica threads when another replica failed."""


# Collections whose entries every replica needs (initialisers of lookup tables built inside `model_fn`).
# Everything else (summaries, update ops, losses) is kept from replica 0 only: on a TPU, `model_fn` is traced
# once, so each collection sees one replica's additions.
_COLLECTIONS_FROM_ALL_REPLICAS = (
    tf.compat.v1.GraphKeys.TABLE_INITIALIZERS,
    tf.compat.v1.GraphKeys.ASSET_FILEPATHS,
    tf.compat.v1.GraphKeys.LOCAL_RESOURCES,
)


class ThreadedCoordinator(ReplicaCoordinator):
    """Runs replica builds one at a time, one thread per replica, and builds the reductions between them."""

    def __init__(self, graph: tf.Graph, devices: Sequence[str]):
        self.graph = graph
        self.devices = list(devices)
        self.num_replicas = len(self.devices)
        self.cv = threading.Condition()
        self.turn = 0
        self.error = None
        self.sync_calls = [0] * self.num_replicas
        self.finished = [False] * self.num_replicas
        self.pending = [None] * self.num_replicas
        self.outputs = None
        self.num_reductions = 0
        self.created_variables = []
        self.variable_counters = [0] * self.num_replicas
        self.updates = []  # Per `CrossShardOptimizer` update of replica 0: (variables it created, its optimizer).
        self.update_counters = [0] * self.num_replicas
        self.collections = [None] * self.num_replicas
        self.flow_contexts = [None] * self.num_replicas
        # (variable index, task) -> (control-flow context, the host's copy of the variable's value).
        self.host_reads = {}

    # Graph state that is not thread-local: swapped in and out when the turn changes hands.
    def _switch_in(self, replica_id: int) -> None:
        _tf_internal.set_graph_collections(self.graph, self.collections[replica_id])
        _tf_internal.set_control_flow_context(self.graph, self.flow_contexts[replica_id])

    def _switch_out(self, replica_id: int) -> None:
        self.collections[replica_id] = _tf_internal.graph_collections(self.graph)
        self.flow_contexts[replica_id] = _tf_internal.control_flow_context(self.graph)

    def _wait_for_turn(self, replica_id: int) -> None:
        while self.turn != replica_id and self.error is None:
            self.cv.wait()
        if self.error is not None:
            raise _Aborted()
        self._switch_in(replica_id)

    def _hand_over(self, replica_id: int, next_id: int) -> None:
        self._switch_out(replica_id)
        self.turn = next_id
        self.cv.notify_all()

    def start(self, replica_id: int) -> None:
        with self.cv:
            self._wait_for_turn(replica_id)

    def fail(self, exc_info) -> None:
        with self.cv:
            if self.error is None:
                self.error = exc_info
            self.cv.notify_all()

    def finish(self, replica_id: int) -> None:
        """Marks a replica's build done and hands over; the last one checks that all agreed."""
        with self.cv:
            self.finished[replica_id] = True
            if replica_id == self.num_replicas - 1:
                self._check_agreement("finished building model_fn")
                self._switch_out(replica_id)
                self.turn = -1
                self.cv.notify_all()
            else:
                self._hand_over(replica_id, replica_id + 1)

    def _check_agreement(self, what: str) -> None:
        last = self.num_replicas - 1
        for other in range(last):
            if self.finished[other] != self.finished[last] or self.sync_calls[other] != self.sync_calls[last]:
                raise RuntimeError(
                    "Replicas diverged: replica {} {} after {} cross-replica reductions, but replica {} had made {} "
                    "and {}. model_fn must call cross_replica_sum (and CrossShardOptimizer) the same number of "
                    "times, in the same order, on every replica.".format(
                        last,
                        what,
                        self.sync_calls[last],
                        other,
                        self.sync_calls[other],
                        "finished" if self.finished[other] else "was waiting in a reduction",
                    )
                )

    def reduce(self, replica_id: int, value: Any, merge_fn: Callable[[List[Any]], List[Any]]) -> Any:
        """Contributes `value`; returns this replica's element of `merge_fn(values of all replicas)`."""
        with self.cv:
            self.sync_calls[replica_id] += 1
            self.pending[replica_id] = value
            if replica_id == self.num_replicas - 1:
                self._check_agreement("called a cross-replica reduction")
                self.outputs = merge_fn(list(self.pending))
                self.num_reductions += 1
                self._hand_over(replica_id, 0)
            else:
                self._hand_over(replica_id, replica_id + 1)
            self._wait_for_turn(replica_id)
            return self.outputs[replica_id]

    def shared_variable(self, replica_id: int, next_creator, kwargs):
        """Variable creator: replica 0 creates, replica i gets replica 0's variable of the same creation index."""
        if replica_id == 0:
            variable = next_creator(**kwargs)
            self.created_variables.append(variable)
            return variable
        index = self.variable_counters[replica_id]
        self.variable_counters[replica_id] += 1
        if index >= len(self.created_variables):
            raise RuntimeError(
                "Replica {} creates more variables than replica 0 (variable {!r}): model_fn must create the same "
                "variables on every replica.".format(replica_id, kwargs.get("name"))
            )
        variable = self.created_variables[index]
        shape = kwargs.get("shape")
        if (
            shape is not None
            and tf.TensorShape(shape).is_fully_defined()
            and not tf.TensorShape(shape).is_compatible_with(variable.shape)
        ):
            raise RuntimeError(
                "Replica {} creates variable {!r} of shape {} where replica 0 created {} of shape {}.".format(
                    replica_id, kwargs.get("name"), shape, variable.name, variable.shape
                )
            )
        variable = self._host_view(replica_id, index, variable)
        # The replica's own view of the collections lists the variable as replica 0's did (optimizers read them).
        keys = list(kwargs.get("collections") or [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES])
        if kwargs.get("trainable", True) and tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES not in keys:
            keys.append(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
        for key in keys:
            if not any(variable is v for v in self.graph.get_collection(key)):
                self.graph.add_to_collection(key, variable)
        return variable

    def _host_view(self, replica_id: int, index: int, variable):
        """The variable as a replica on another host than the variable's sees it: one read per host per step.

        A dense read is a `ReadVariableOp` on the variable's device, and TensorFlow sends its value once per
        device that uses it: every replica of a remote host would receive its own copy over the network. The
        replicas of a host instead share one copy, an identity of one read on the host's first replica device
        (the other replicas of the host copy it locally). The copy is made at the first dense read of the
        host's replicas, without their control dependencies (another replica's side effects must not run); a
        replica that reads in another control-flow context (a cond or loop of its own) reads the variable itself.
        """
        home = tf.DeviceSpec.from_string(variable.device) if variable.device else None
        here = tf.DeviceSpec.from_string(self.devices[replica_id])
        if home is None or home.task is None or (home.job, home.task) == (here.job, here.task):
            return variable
        task = (here.job, here.replica, here.task)
        host_device = self.devices[_by_task(self.devices)[task][0]]
        graph = self.graph
        key = (index, task)

        def read() -> tf.Tensor:
            context = _tf_internal.control_flow_context(graph)
            if key not in self.host_reads:
                with (
                    _tf_internal.without_control_dependencies(graph),
                    graph.colocate_with(None, ignore_existing=True),
                    graph.device(host_device),
                ):
                    value = tf.identity(variable.value(), name="host_read")
                self.host_reads[key] = (context, value)
            read_context, value = self.host_reads[key]
            return value if read_context is context else variable.value()

        view = _tf_internal.variable_reading_through(variable, read)
        return variable if view is None else view

    @contextlib.contextmanager
    def building_update(self, optimizer: Any) -> Iterator[None]:
        """Replica 0: the scope of an optimizer update's build, noting how many variables (slots) it created."""
        first = len(self.created_variables)
        yield
        self.updates.append((len(self.created_variables) - first, optimizer))

    def skip_update(self, replica_id: int) -> Any:
        """Replica > 0: skips its next update, as if it had created replica 0's variables; returns the optimizer
        that built replica 0's update (which holds the slots).

        Replica 0 builds its update before any other replica passes the reductions of the same call.
        """
        index = self.update_counters[replica_id]
        if index >= len(self.updates):
            raise RuntimeError(
                "Replicas diverged: replica {} applies gradients more often than replica 0. model_fn must call "
                "CrossShardOptimizer the same number of times, in the same order, on every replica.".format(replica_id)
            )
        self.update_counters[replica_id] += 1
        created, optimizer = self.updates[index]
        self.variable_counters[replica_id] += created
        return optimizer


class CollectiveCoordinator(ReplicaCoordinator):
    """One host's replicas in a cluster of one process per host: its own replicas reduce as `inner` builds them,
    then each host's sum is summed across the hosts by a collective op, so every replica of every host gets the sum
    over all replicas. Updates are the inner coordinator's: every host applies the same sums to its own copy of the
    dense variables (mirrored), so no host is a hub.

    Args:
      inner: the coordinator of this host's replicas (`stamping.StampingCoordinator`).
      collectives: this host's `collectives.HostCollectives`.
    """

    def __init__(self, inner: ReplicaCoordinator, collectives: Any):
        self._inner = inner
        self._collectives = collectives
        self.devices = inner.devices
        self.num_replicas = inner.num_replicas

    def reduce(self, replica_id: int, value: Any, merge_fn: Callable[[List[Any]], List[Any]]) -> Any:
        def merge_across_hosts(values: List[Any]) -> List[Any]:
            host_sums = merge_fn(values)
            totals = {}
            for host_sum in host_sums:
                if host_sum.ref() not in totals:
                    totals[host_sum.ref()] = self._collectives.all_sum(host_sum)
            return [totals[host_sum.ref()] for host_sum in host_sums]

        return self._inner.reduce(replica_id, value, merge_across_hosts)

    def building_update(self, optimizer: Any) -> ContextManager[None]:
        return self._inner.building_update(optimizer)

    def skip_update(self, replica_id: int) -> Any:
        return self._inner.skip_update(replica_id)


def _replica_collections(base: dict, replica_id: int) -> dict:
    """A copy of the graph collections for one replica (replicas > 0 get a fresh variable store)."""
    collections = {key: list(value) for key, value in base.items()}
    if replica_id > 0:
        collections[_tf_internal.VARSTORE_KEY] = [_tf_internal.copy_variable_store(base)]
    return collections


def _merge_collections(base: dict, per_replica: List[dict]) -> dict:
    merged = per_replica[0]
    for key in _COLLECTIONS_FROM_ALL_REPLICAS:
        known = list(merged.get(key, []))
        for collections in per_replica[1:]:
            for item in collections.get(key, []):
                if not any(item is k for k in known):
                    known.append(item)
        if known:
            merged[key] = known
    if _tf_internal.VARSTORE_KEY in base:
        merged[_tf_internal.VARSTORE_KEY] = base[_tf_internal.VARSTORE_KEY]
    return merged


class ReplicatedBuild(NamedTuple):
    """What `build_replicas` built: one `fn` result per replica and the number of cross-replica reductions."""

    outputs: List[Any]
    num_reductions: int


def run_replicated(fn: Callable[[int], Any], devices: Sequence[str]) -> List[Any]:
    """`build_replicas(fn, devices).outputs`: the list of `fn` results, one per replica."""
    return build_replicas(fn, devices).outputs


def build_replicas(fn: Callable[[int], Any], devices: Sequence[str]) -> ReplicatedBuild:
    """Builds `fn(replica_id)` once per device, each on its device, with reductions between replicas.

    Args:
      fn: builds one replica; called with the replica id in a replica context (see `cross_replica_sum`).
      devices: one device name per replica.

    Returns:
      The `fn` results, one per replica, and the number of cross-replica reductions built between them.

    Raises:
      Whatever `fn` raised in any replica (the first error), or RuntimeError when replicas diverge.
    """
    graph = tf.compat.v1.get_default_graph()
    # Replica threads interleave device/colocation/control-dependency scopes: they must be per thread, as in
    # TF2 graphs (TF1 behaviour, e.g. after tf.compat.v1.disable_v2_behavior(), shares them). As MirroredStrategy.
    graph.switch_to_thread_local()
    coordinator = ThreadedCoordinator(graph, devices)
    base_collections = _tf_internal.graph_collections(graph)
    flow_context = _tf_internal.control_flow_context(graph)
    var_scope = tf.compat.v1.get_variable_scope()
    creator_stack = _tf_internal.variable_creator_stack_of(graph)
    for replica_id in range(len(devices)):
        coordinator.collections[replica_id] = _replica_collections(base_collections, replica_id)
        coordinator.flow_contexts[replica_id] = flow_context
    results = [None] * len(devices)

    def body(replica_id: int) -> None:
        try:
            coordinator.start(replica_id)
            with (
                graph.as_default(),
                _tf_internal.variable_creator_stack(graph, creator_stack),
                graph.name_scope(None if replica_id == 0 else "replica_%d" % replica_id),
                tf.compat.v1.variable_scope(var_scope, auxiliary_name_scope=False),
                tf.compat.v1.variable_creator_scope(
                    lambda next_creator, **kw: coordinator.shared_variable(replica_id, next_creator, kw)
                ),
                _tf_internal.tpu_shard_context(len(devices)),
                graph.device(devices[replica_id]),
            ):
                set_current_replica_context(ReplicaContext(replica_id, len(devices), devices[replica_id], coordinator))
                try:
                    results[replica_id] = fn(replica_id)
                finally:
                    set_current_replica_context(None)
            coordinator.finish(replica_id)
        except _Aborted:
            pass
        except BaseException:
            coordinator.fail(sys.exc_info())

    threads = [
        threading.Thread(target=body, args=(i,), name="replica_%d" % i, daemon=True) for i in range(len(devices))
    ]
    with _tf_internal.cross_replica_sum_as_ours(cross_replica_sum):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    _tf_internal.set_control_flow_context(graph, flow_context)
    if coordinator.error is not None:
        _tf_internal.set_graph_collections(graph, base_collections)
        _, exc, tb = coordinator.error
        raise exc.with_traceback(tb)
    _tf_internal.set_graph_collections(graph, _merge_collections(base_collections, coordinator.collections))
    return ReplicatedBuild(results, coordinator.num_reductions)


@contextlib.contextmanager
def building_replica(context: ReplicaContext) -> Iterator[None]:
    """Builds in the replica `context` on the calling thread, from the state a replica thread starts in.

    As in a replica thread of `build_replicas`: no control dependencies, colocation or outer device scope; the
    root name scope; the replica's device; `cross_replica_sum` and `CrossShardOptimizer` reduce through
    `context.coordinator`.
    """
    graph = tf.compat.v1.get_default_graph()
    with (
        _tf_internal.without_control_dependencies(graph),
        graph.colocate_with(None, ignore_existing=True),
        graph.name_scope(None),
        graph.device(None),
        graph.device(context.device),
        _tf_internal.tpu_shard_context(context.num_replicas),
        _tf_internal.cross_replica_sum_as_ours(cross_replica_sum),
    ):
        set_current_replica_context(context)
        try:
            yield
        finally:
            set_current_replica_context(None)


def _by_task(devices: Sequence[str]) -> "dict[tuple, List[int]]":
    """Positions of `devices` grouped by their task (`(job, replica, task)`), in first-appearance order."""
    tasks = {}
    for position, device in enumerate(devices):
        spec = tf.DeviceSpec.from_string(device)
        tasks.setdefault((spec.job, spec.replica, spec.task), []).append(position)
    return tasks


def _sum_over_hosts(values: List[tf.Tensor], devices: Sequence[str]) -> List[tf.Tensor]:
    """The sum of values that live on several hosts: each host adds its own, then the host sums are added.

    One tensor per host crosses the network to the first host and one copy of the total goes back to each host
    (never one per replica); the replicas of a host share their host's copy. A copy crosses only if something
    that runs uses it: the total of `CrossShardOptimizer`'s gradients feeds replica 0's update only, on host 0.

    The ops are placed by these devices only: the caller's colocation (`CrossShardOptimizer` builds the sum in
    `colocate_with(grad)` of the last replica, whose thread builds every reduction) would otherwise move every
    host's sum to the last replica's device, and each replica's value would cross to it.
    """
    tasks = _by_task(devices)
    graph = tf.compat.v1.get_default_graph()
    with graph.colocate_with(None, ignore_existing=True):
        partial = []
        for positions in tasks.values():
            with tf.device(devices[positions[0]]):
                members = [values[p] for p in positions]
                partial.append(tf.math.add_n(members) if len(members) > 1 else tf.identity(members[0]))
        first = next(iter(tasks.values()))[0]
        with tf.device(devices[first]):
            total = tf.math.add_n(partial)
        outputs = [None] * len(values)
        for positions in tasks.values():
            with tf.device(devices[positions[0]]):
                local = tf.identity(total)
            for p in positions:
                outputs[p] = local
    return outputs


def _sum_groups(values: List[tf.Tensor], devices: Sequence[str], group_assignment) -> List[tf.Tensor]:
    """Sums `values` within each group of replicas; one result per replica."""
    num_replicas = len(values)
    groups = group_assignment if group_assignment is not None else [list(range(num_replicas))]
    seen = sorted(int(r) for group in groups for r in group)
    if seen != list(range(num_replicas)):
        raise ValueError(
            "group_assignment {} must name every replica 0..{} exactly once.".format(group_assignment, num_replicas - 1)
        )
    outputs = [None] * num_replicas
    for group in groups:
        group = [int(r) for r in group]
        members = [values[r] for r in group]
        group_devices = [devices[r] for r in group]
        if len(_by_task(group_devices)) > 1:
            summed = _sum_over_hosts(members, group_devices)
        elif all(devices[r].startswith("/device:GPU") for r in group) and len(group) > 1:
            summed = _tf_internal.nccl_all_sum(members, [devices[r] for r in group])
        else:
            with tf.device(devices[group[0]]):
                summed = [tf.math.add_n(members)] * len(group)
        for r, s in zip(group, summed):
            outputs[r] = s
    return outputs


def all_reduce_sum(value: tf.Tensor, group_assignment=None, name: Optional[str] = None) -> tf.Tensor:
    """The sum of `value` over replicas (within the replica's group), without a custom gradient.

    Outside `run_replicated` it returns `value` unchanged (a single replica).
    """
    context = current_replica_context()
    value = tf.convert_to_tensor(value)
    if context is None:
        return tf.identity(value, name=name)
    coordinator = context.coordinator
    if group_assignment is not None and context.num_replicas != len(coordinator.devices):
        raise ValueError(
            "cross_replica_sum with a group_assignment ({}) is not supported with one process per host: this process "
            "builds {} of the {} replicas. Sum over all replicas (group_assignment=None), or run the hosts from one "
            "client (docs/DISTRIBUTED.md).".format(group_assignment, len(coordinator.devices), context.num_replicas)
        )

    def merge(values):
        for i, v in enumerate(values):
            if v.dtype != values[0].dtype or not v.shape.is_compatible_with(values[0].shape):
                raise ValueError(
                    "Replicas diverged: in a cross_replica_sum, replica {} passed {} {} but replica 0 passed {} {}. "
                    "Every replica must make the same reductions, in the same order, on tensors of the same shape.".format(
                        i, v.dtype.name, v.shape, values[0].dtype.name, values[0].shape
                    )
                )
        with tf.name_scope(name or "cross_replica_sum"):
            return _sum_groups(values, coordinator.devices, group_assignment)

    return coordinator.reduce(context.replica_id, value, merge)


def cross_replica_sum(x, group_assignment=None, name: Optional[str] = None) -> tf.Tensor:
    """Sums `x` across replicas, like `tf.compat.v1.tpu.cross_replica_sum`.

    The gradient is, as on a TPU, the cross-replica sum of the incoming gradients.

    Args:
      x: the local tensor.
      group_assignment: optional `[num_groups, replicas_per_group]` list: sum within each group.
      name: optional op name.

    Returns:
      The sum over the replicas of the group (the input itself outside replication).
    """
    x = tf.convert_to_tensor(x)
    if current_replica_context() is None:
        return tf.identity(x, name=name)

    @tf.custom_gradient
    def _local_identity(local):
        def grad(dy):
            return all_reduce_sum(dy, group_assignment)

        return tf.identity(local), grad

    summed = all_reduce_sum(x, group_assignment, name)
    # Value: the sum. Gradient: only through this replica's own input (then summed across replicas).
    local = _local_identity(x)
    return tf.stop_gradient(summed) + (local - tf.stop_gradient(local))


class CrossShardOptimizer(tf.compat.v1.train.Optimizer):
    """An optimizer that averages (or sums) gradients across shards, like `tf.compat.v1.tpu.CrossShardOptimizer`.

    Args:
      opt: the wrapped `tf.compat.v1.train.Optimizer`.
      reduction: `tf.compat.v1.losses.Reduction.MEAN` (loss scaled by 1/num_shards) or `SUM`.
      name: optional name.
      group_assignment: optional replica groups: gradients are summed within each group.

    Raises:
      ValueError: `reduction` is neither MEAN nor SUM.
    """

    def __init__(
        self, opt, reduction=tf.compat.v1.losses.Reduction.MEAN, name="CrossShardOptimizer", group_assignment=None
    ):
        accepted = (tf.compat.v1.losses.Reduction.MEAN, tf.compat.v1.losses.Reduction.SUM)
        if reduction not in accepted:
            raise ValueError("Unsupported reduction: %s." % reduction)
        super(CrossShardOptimizer, self).__init__(False, name)
        self._opt = opt
        self._reduction = reduction
        self._group_assignment = group_assignment

    def _num_in_group(self) -> int:
        context = current_replica_context()
        num_replicas = context.num_replicas if context else 1
        if not self._group_assignment:
            return num_replicas
        sizes = {len(group) for group in self._group_assignment}
        if len(sizes) != 1:
            raise ValueError("The group sizes of group_assignment must be equal, got {}".format(self._group_assignment))
        return sizes.pop()

    def compute_gradients(self, loss, var_list=None, **kwargs):
        """Gradients of `loss`, scaled by 1/num_shards under MEAN reduction."""
        num = self._num_in_group()
        if num > 1 and self._reduction == tf.compat.v1.losses.Reduction.MEAN:
            loss *= 1.0 / num
        return self._opt.compute_gradients(loss, var_list=var_list, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Sums each gradient across shards, then applies it with the wrapped optimizer.

        Replicas other than 0 build the sums only: their update would never run (only replica 0's `train_op`
        does), so they return a no-op, and their slots are replica 0's.
        """
        summed = []
        for grad, var in grads_and_vars:
            if grad is None:
                summed.append((grad, var))
            else:
                with tf.compat.v1.colocate_with(grad):
                    summed.append((all_reduce_sum(tf.convert_to_tensor(grad), self._group_assignment), var))
        context = current_replica_context()
        if context is None:
            return self._opt.apply_gradients(summed, global_step, name)
        if context.replica_id == 0:
            with context.coordinator.building_update(self._opt):
                return self._opt.apply_gradients(summed, global_step, name)
        self._slots_of = context.coordinator.skip_update(context.replica_id)
        return tf.no_op(name=name)

    def _slot_owner(self):
        """The optimizer holding the slots: the wrapped one, or on replicas > 0 the one of replica 0's update."""
        return getattr(self, "_slots_of", None) or self._opt

    def get_slot(self, *args, **kwargs):
        return self._slot_owner().get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._slot_owner().get_slot_names(*args, **kwargs)

    def variables(self):
        return self._slot_owner().variables()


def outside_compilation(computation: Callable[..., Any], *args, **kwargs) -> Any:
    """Runs `computation(*args, **kwargs)` on the host device (this process's CPU).

    Args:
      computation: a Python function building TensorFlow ops.
      *args: positional arguments for `computation`.
      **kwargs: keyword arguments for `computation`.

    Returns:
      What `computation` returns.
    """
    with tf.device("/device:CPU:0"):
        return computation(*args, **kwargs)
