"""Which replica is being built, and the coordinator its reductions and optimizer updates go through.

A replica's `model_fn` meets the other replicas in two places: a cross-replica reduction (`cross_replica_sum`,
`CrossShardOptimizer`'s gradient sums) and an optimizer update (only one replica's runs). Both go through the
`ReplicaCoordinator` of the replica's `ReplicaContext`. Each way of building replicas is one implementation:

* `replication.ThreadedCoordinator`: one build per replica, in coordinated threads (clusters, `tpu.replicate`);
* `stamping.StampingCoordinator`: `model_fn` traced once on replica 0, the other replicas copies of its ops (one
  host).
"""

import abc
import threading
from typing import Any, Callable, ContextManager, List, Optional

_current = threading.local()


class ReplicaCoordinator(abc.ABC):
    """The role every way of building replicas plays for the replicas it builds.

    Attributes:
      devices: one device per replica, by replica id.
      num_replicas: `len(devices)`.
    """

    devices: List[str]
    num_replicas: int

    @abc.abstractmethod
    def reduce(self, replica_id: int, value: Any, merge_fn: Callable[[List[Any]], List[Any]]) -> Any:
        """Contributes replica `replica_id`'s `value` to a reduction.

        Args:
          replica_id: the replica calling.
          value: its tensor.
          merge_fn: builds, from every replica's value (by replica id), every replica's result.

        Returns:
          This replica's element of `merge_fn(values)`.
        """

    @abc.abstractmethod
    def building_update(self, optimizer: Any) -> ContextManager[None]:
        """Replica 0: the scope in which the caller builds an optimizer update (the one that runs).

        Args:
          optimizer: the optimizer whose update is built in the scope (it holds the slots).

        Returns:
          A context manager; the update is built inside it.
        """

    @abc.abstractmethod
    def skip_update(self, replica_id: int) -> Any:
        """A replica other than 0: the update it would build never runs, so it builds none.

        Args:
          replica_id: the replica calling (> 0).

        Returns:
          The optimizer of replica 0's matching update (it holds the slots the replica reads).
        """


class ReplicaContext(object):
    """Which replica is being built and its coordinator.

    Attributes:
      replica_id: the replica.
      num_replicas: how many replicas are built.
      device: the replica's device.
      coordinator: the `ReplicaCoordinator` of the build.
    """

    def __init__(self, replica_id: int, num_replicas: int, device: str, coordinator: ReplicaCoordinator):
        self.replica_id = replica_id
        self.num_replicas = num_replicas
        self.device = device
        self.coordinator = coordinator


def current_replica_context() -> Optional[ReplicaContext]:
    """The replica being built by this thread, or None outside a replicated build."""
    return getattr(_current, "context", None)


def set_current_replica_context(context: Optional[ReplicaContext]) -> None:
    """Makes `context` this thread's replica context (None: outside a replicated build)."""
    _current.context = context
