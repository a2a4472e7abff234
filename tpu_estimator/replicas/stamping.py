"""Replicas traced once: `model_fn` is built for replica 0, and its ops are copied onto the other replicas' devices.

A TPU traces `model_fn` once and runs the traced program on every core. Here replica 0's build is that trace: the
user's Python runs once. Every other replica gets a copy of the ops it needs (those its cross-replica reductions
and its outputs depend on), with replica 0's inputs replaced by its own, on its own device. A copy costs a
fraction of a build (no model Python, no gradient construction), so setup grows slowly with the shards.

A cross-replica reduction is where replicas meet. Replica 0's build goes on with a stand-in for its element of
the sum (an identity, re-pointed at the sum once it is built); the sums are built together when something needs
one (a copy that reads a sum, the mapping of the outputs, the end of the build): each other replica's copy of the
reduced values is made in one graph import (the ops they depend on that are not copied yet), then the sums. The
200 gradient sums of a BERT-base `apply_gradients` cost one import per replica, not 200.

Shared instead of copied: ops built before the replicas, ops that create state (variables, tables, queues:
stateful ops without inputs), the loop invariants entered into the loop the replicas are built in, and ops
outside the build's control-flow context (initialisers built under `init_scope`). A side effect is copied only
when a replica's outputs depend on it, as when each replica was built by its own `model_fn` call. Seeded random
ops get another op seed on each replica, so the replicas draw different numbers (dropout masks).
"""

import contextlib
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tpu_estimator import _tf_internal, graph_walk
from tpu_estimator.replicas import replication
from tpu_estimator.replicas.replica_context import ReplicaContext, ReplicaCoordinator

_ENTER_OPS = ("Enter", "RefEnter")
# Replica r's seeded random ops draw with op seed `seed2 + r * _SEED_STRIDE` (mod 2**31 - 1).
_SEED_STRIDE = 1000003


def _tensors_of(structure: Any) -> List[tf.Tensor]:
    return [t for t in tf.nest.flatten(structure, expand_composites=True) if isinstance(t, tf.Tensor)]


def _within(context, ancestor) -> bool:
    while context is not None:
        if context is ancestor:
            return True
        context = context.outer_context
    return False


class _PendingReduction(NamedTuple):
    """A reduction replica 0 asked for: built with the others of its batch by `StampingCoordinator.build_reductions`."""

    value: tf.Tensor  # replica 0's value
    merge_fn: Callable[[List[tf.Tensor]], List[tf.Tensor]]
    result: tf.Tensor  # replica 0's stand-in for its element of the sum
    context: Any  # the control-flow context replica 0 asked in


class StampingCoordinator(ReplicaCoordinator):
    """Copies replica 0's ops onto the other replicas and builds the reductions between them.

    It is the coordinator of replica 0's `ReplicaContext` while `building_replica0` lasts (`reduce`,
    `building_update`; no other replica is built, so none skips an update), and maps replica 0's outputs to another
    replica's (`to_replica`).
    """

    def __init__(self, graph: tf.Graph, devices: Sequence[str], replica_inputs: Sequence[Any]):
        self.graph = graph
        self.devices = list(devices)
        self.num_replicas = len(self.devices)
        self.num_reductions = 0
        existing = graph.get_operations()
        self._first_id = _tf_internal.op_id(existing[-1]) + 1 if existing else 0
        self._context = _tf_internal.control_flow_context(graph)
        self._loop_frame = _tf_internal.while_frame_name(self._context)
        self._own_ids = set()  # the ops this stamper built: copies and reductions
        self._pending = []  # reductions not built yet (`_PendingReduction`), in call order
        self._pending_ids = set()  # the op ids of their stand-ins
        self._tensors = [dict() for _ in self.devices]  # per replica: replica 0's tensor (ref) -> the replica's
        self._copies = [dict() for _ in self.devices]  # per replica: replica 0's op id -> the replica's copy
        self._device_of_replica0 = tf.DeviceSpec.from_string(self.devices[0]).to_string()
        self._placed = {}  # device string -> its canonical form
        self._copy_devices = [dict() for _ in self.devices]  # per replica: replica 0's op id -> its copy's device
        # How many device scopes replica 0's build starts in: an op under more was placed by `model_fn` itself.
        self.replica_scope_depth = 0
        inputs0 = _tensors_of(replica_inputs[0])
        for replica in range(1, self.num_replicas):
            inputs = _tensors_of(replica_inputs[replica])
            if len(inputs) != len(inputs0):
                raise ValueError(
                    "Replica {} has {} input tensors where replica 0 has {}: every replica's (features, labels) "
                    "must have the same structure.".format(replica, len(inputs), len(inputs0))
                )
            for own, replica0 in zip(inputs, inputs0):
                self._tensors[replica][replica0.ref()] = own

    # ---- the coordinator of replica 0's build ------------------------------------------------------------------

    def reduce(self, replica_id: int, value: Any, merge_fn: Callable[[List[Any]], List[Any]]) -> Any:
        """Replica 0's element of `merge_fn(value on every replica)`, built later (`build_reductions`).

        Replica 0's build goes on with a stand-in, an identity that is re-pointed at its element of the sum when
        the sum is built: the reductions of one `apply_gradients` are then built together, with one copy of the
        ops they need per replica (a copy per reduction would cost one graph import each).
        """
        del replica_id  # always replica 0: the only one whose Python runs
        result = tf.identity(value)
        self._pending.append(_PendingReduction(value, merge_fn, result, _tf_internal.control_flow_context(self.graph)))
        self._pending_ids.add(_tf_internal.op_id(result.op))
        self.num_reductions += 1
        return result

    def build_reductions(self) -> None:
        """Builds the pending reductions: the replicas' copies of their values, the sums, the stand-ins' inputs."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        # A batch holds reductions whose values were all built before its first stand-in: none can read a sum of
        # its own batch. A value built after a stand-in (cross-replica batch norm, a sum of a sum) starts a batch.
        batches = [[pending[0]]]
        for reduction in pending[1:]:
            if _tf_internal.op_id(reduction.value.op) > _tf_internal.op_id(batches[-1][0].result.op):
                batches.append([])
            batches[-1].append(reduction)
        graph = self.graph
        for batch in batches:
            for replica in range(1, self.num_replicas):
                self._copy(replica, [reduction.value.op for reduction in batch])
            with graph.control_dependencies(None), graph.colocate_with(None, ignore_existing=True):
                for reduction in batch:
                    _tf_internal.set_control_flow_context(graph, reduction.context)
                    values = [reduction.value] + [
                        self._replica_tensor(r, reduction.value) for r in range(1, self.num_replicas)
                    ]
                    outputs = reduction.merge_fn(values)
                    self._mark_built_between(values, outputs)
                    _tf_internal.update_input(reduction.result.op, 0, outputs[0])
                    result_id = _tf_internal.op_id(reduction.result.op)
                    self._own_ids.add(result_id)
                    self._pending_ids.discard(result_id)
                    for replica in range(1, self.num_replicas):
                        self._tensors[replica][reduction.result.ref()] = outputs[replica]

    def _mark_built_between(self, values: List[tf.Tensor], outputs: List[tf.Tensor]) -> None:
        """Notes the reduction's ops (from `values` to `outputs`) as the stamper's: no replica copies them."""
        stop = {_tf_internal.op_id(v.op) for v in values}
        walk = graph_walk.AncestorWalk([t.op for t in outputs])
        for op in walk:
            op_id = _tf_internal.op_id(op)
            if op_id in stop or op_id in self._own_ids or op_id < self._first_id:
                continue  # outside the reduction
            self._own_ids.add(op_id)
            walk.go_through(op)

    @contextlib.contextmanager
    def building_update(self, optimizer: Any) -> Iterator[None]:
        """Replica 0's optimizer update: built once, run once (the other replicas never build one)."""
        del optimizer
        yield

    def skip_update(self, replica_id: int) -> Any:
        """Never called: only replica 0's `model_fn` runs; the other replicas are copies of its ops.

        Raises:
          RuntimeError: always (a replica other than 0 was built by calling `model_fn`).
        """
        raise RuntimeError(
            "Replica {} was built by calling model_fn, but replicas traced once build replica 0 only.".format(
                replica_id
            )
        )

    # ---- copies ------------------------------------------------------------------------------------------------

    def to_replica(self, replica: int, structure: Any) -> Any:
        """`structure` (of replica 0's tensors) as `replica` computes it: its tensors are copied onto the replica.

        Operations and other leaves are kept (replica 0's).
        """
        self.build_reductions()
        tensors = _tensors_of(structure)
        self._copy(replica, [t.op for t in tensors])
        flat = tf.nest.flatten(structure, expand_composites=True)
        mapped = [self._replica_tensor(replica, t) if isinstance(t, tf.Tensor) else t for t in flat]
        return tf.nest.pack_sequence_as(structure, mapped, expand_composites=True)

    def _replica_tensor(self, replica: int, tensor: tf.Tensor) -> tf.Tensor:
        mapped = self._tensors[replica].get(tensor.ref())
        if mapped is not None:
            return mapped
        copied = self._copies[replica].get(_tf_internal.op_id(tensor.op))
        return copied.outputs[tensor.value_index] if copied is not None else tensor

    def _shared(self, op: tf.Operation) -> bool:
        """Whether every replica uses replica 0's `op` itself (see the module docstring)."""
        op_id = _tf_internal.op_id(op)
        if op_id < self._first_id or op_id in self._own_ids:
            return True
        if not op.inputs and op.op_def.is_stateful:
            return True
        if self._context is not None and not _within(_tf_internal.op_control_flow_context(op), self._context):
            return True
        return (
            op.type in _ENTER_OPS
            and self._loop_frame is not None
            and op.get_attr("frame_name").decode() == self._loop_frame
        )

    def _slice(self, replica: int, roots: Sequence[tf.Operation]) -> Tuple[Dict[int, tf.Operation], bool]:
        """The ops of replica 0 that `roots` depend on and `replica` has no copy of yet, by op id; and whether
        they depend on a reduction not built yet."""
        tensors, copies = self._tensors[replica], self._copies[replica]
        needs_pending = False
        todo = {}
        walk = graph_walk.AncestorWalk(roots)
        for op in walk:
            op_id = _tf_internal.op_id(op)
            if op_id in copies or self._shared(op):
                continue  # copied already, or shared
            if op_id in self._pending_ids:
                needs_pending = True  # the result of a reduction not built yet
                continue
            todo[op_id] = op
            walk.go_through(op, [t for t in op.inputs if t.ref() not in tensors])  # not past the replica's own
        return todo, needs_pending

    def _copy(self, replica: int, roots: Sequence[tf.Operation]) -> None:
        """Copies onto `replica` the ops of replica 0 that `roots` depend on (those not copied yet)."""
        todo, needs_pending = self._slice(replica, roots)
        if needs_pending:
            raise AssertionError("stamping: copying ops that need a reduction not built yet")
        if not todo:
            return
        order = [todo[op_id] for op_id in sorted(todo)]
        graph_def = graph_pb2.GraphDef()
        graph_def.versions.CopyFrom(self.graph.graph_def_versions)
        input_map = {}
        external_controls = {}
        colocations = {}
        for op in order:
            node = graph_def.node.add()
            node.CopyFrom(op.node_def)
            del node.input[:]
            for x in op.inputs:
                if _tf_internal.op_id(x.op) in todo:
                    node.input.append(x.op.name if x.value_index == 0 else "%s:%d" % (x.op.name, x.value_index))
                else:
                    node.input.append(x.name)
                    input_map[x.name] = self._replica_tensor(replica, x)
            controls = []
            for control in op.control_inputs:
                if _tf_internal.op_id(control) in todo:
                    node.input.append("^" + control.name)
                else:
                    controls.append(self._copies[replica].get(_tf_internal.op_id(control), control))
            if controls:
                external_controls[op.name] = controls
            colocations[op.name] = self._place(node, op, replica, todo)
        prefix = "replica_%d" % replica
        graph = self.graph
        # The copies are built in the build's own context, whatever replica 0's build is in now (a cond, a
        # gradient): each is then put in the context its original is in. Their outputs are known to the context
        # beforehand, so that a copy whose input is another copy (a loop's back edge) does not enter it again.
        names = ["%s/%s:%d" % (prefix, op.name, i) for op in order for i in range(len(op.outputs))]
        with graph.control_dependencies(None):
            _tf_internal.set_control_flow_context(graph, self._context)
            _tf_internal.add_values_to_control_flow_context(self._context, names)
            with graph.colocate_with(None, ignore_existing=True), graph.device(None):
                copies = tf.graph_util.import_graph_def(
                    graph_def,
                    input_map=input_map,
                    return_elements=[op.name for op in order],
                    name=prefix + "/",
                )
        for op, copy in zip(order, copies):
            self._own_ids.add(_tf_internal.op_id(copy))
            self._copies[replica][_tf_internal.op_id(op)] = copy
        for op, copy in zip(order, copies):
            _tf_internal.adopt_into_control_flow_context(copy, _tf_internal.op_control_flow_context(op))
            if op.name in external_controls:
                _tf_internal.add_control_inputs(
                    copy, [c for c in external_controls[op.name] if c not in copy.control_inputs]
                )
            groups = colocations[op.name]
            if groups:
                mapped = []
                for name in groups:
                    target = graph.get_operation_by_name(name)
                    target = self._copies[replica].get(_tf_internal.op_id(target), target)
                    mapped.append(b"loc:@" + target.name.encode())
                _tf_internal.set_colocation(copy, mapped)

    def _place(self, node, op: tf.Operation, replica: int, todo: Dict[int, tf.Operation]) -> List[str]:
        """Sets the copy's device, loop frame and op seed; returns the names of the ops it is colocated with.

        A copy goes where the replica's own build would have put it: on the replica's device when replica 0's op
        got its device from the replica's device scope; where the op is when `model_fn` placed it itself (an
        `outside_compilation` on the host) or colocated it with a shared op (a variable); next to the copy of an
        op of replica 0 it is colocated with.
        """
        groups = []
        if "_class" in node.attr:
            groups = [g.decode()[len("loc:@") :] for g in node.attr["_class"].list.s if g.decode() != "loc:@" + op.name]
            del node.attr["_class"]
        devices = self._copy_devices[replica]
        if groups:
            target = _tf_internal.op_id(self.graph.get_operation_by_name(groups[0]))
            if target in devices:
                node.device = devices[target]
        elif node.device and _tf_internal.device_scope_depth(op) <= self.replica_scope_depth:
            placed = self._placed.get(node.device)
            if placed is None:
                placed = self._placed[node.device] = tf.DeviceSpec.from_string(node.device).to_string()
            if placed == self._device_of_replica0:
                node.device = self.devices[replica]
        devices[_tf_internal.op_id(op)] = node.device
        if op.type in _ENTER_OPS:
            node.attr["frame_name"].s = ("replica_%d/" % replica).encode() + node.attr["frame_name"].s
        if "seed2" in node.attr and "seed" in node.attr and op.op_def.is_stateful:
            if node.attr["seed"].i or node.attr["seed2"].i:
                node.attr["seed2"].i = (node.attr["seed2"].i + replica * _SEED_STRIDE) % (2**31 - 1)
        return groups


@contextlib.contextmanager
def building_replica0(
    devices: Sequence[str],
    replica_inputs: Sequence[Any],
    across_hosts: Optional[Any] = None,
) -> Iterator[StampingCoordinator]:
    """The scope in which the caller builds replica 0 (it calls `model_fn` itself); the other replicas are copies.

        with stamping.building_replica0(devices, per_replica) as stamper:
            output = build_replica(0)
        output_on_replica_1 = stamper.to_replica(1, output)

    Inside, replica 0 is built in a replica context (see `replication.cross_replica_sum`) on `devices[0]`; when the
    scope ends without an error, the reductions still pending are built.

    Args:
      devices: one device per replica, all in this process.
      replica_inputs: per replica, the tensors replica 0's build reads as its inputs (the same structure for every
        replica): a copy reads its replica's own where replica 0's read `replica_inputs[0]`.
      across_hosts: with one process per host, this host's `collectives.HostCollectives`: `devices` are this host's
        replicas, each reduction is then summed across the hosts (`replication.CollectiveCoordinator`) and the
        replica context counts every host's replicas. None: `devices` are every replica.

    Yields:
      The `StampingCoordinator`: its `num_reductions` and `to_replica` are read after the scope.

    Raises:
      ValueError: the replicas' inputs differ in structure.
    """
    graph = tf.compat.v1.get_default_graph()
    stamper = StampingCoordinator(graph, devices, replica_inputs)
    if across_hosts is None:
        context = ReplicaContext(0, len(devices), devices[0], stamper)
    else:
        coordinator = replication.CollectiveCoordinator(stamper, across_hosts)
        context = ReplicaContext(0, len(devices) * across_hosts.num_hosts, devices[0], coordinator)
    with replication.building_replica(context):
        stamper.replica_scope_depth = _tf_internal.graph_device_scope_depth(graph)
        yield stamper
        stamper.build_reductions()
