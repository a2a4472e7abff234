"""Dense variables mirrored on every host, for a cluster of one process per host.

Each host's process creates its own copy of every dense variable (the model's, the optimizer's slots, the global
step) on its own devices, and every host applies the same cross-host sums to it (`collectives.py`), so the copies
stay equal and no host serves another's reads. The embedding tables are not mirrored: each shard lives on one host
and every process names the same shard.

The copies start equal: the chief (host 0) initialises or restores its variables as a single process would (and
writes the checkpoints); every other host keeps its copies as local variables (never saved, never restored,
initialised by its own session) and, in its session's local init, receives the chief's values by a collective
broadcast, which the chief sends in its own local init, after its restore. So every host starts each `train()` from
the chief's values, whatever it initialised.
"""

from typing import List, Optional

import tensorflow as tf

from tpu_estimator.hosts.collectives import HostCollectives

# How long the broadcast at session start may wait for the chief (which may be restoring a large checkpoint); the
# session's operation deadline (`operation_timeout_in_ms`, 40 s by default on a cluster) bounds the local init's run
# too, so raise that one for checkpoints that take longer to restore.
STARTUP_TIMEOUT_SECS = 600.0


def mirror_from_chief(
    graph: tf.Graph, collectives: HostCollectives, scaffold: Optional[tf.compat.v1.train.Scaffold]
) -> tf.compat.v1.train.Scaffold:
    """Makes this host's dense variables copies of the chief's; returns the scaffold whose local init syncs them.

    Call after the graph of `train()` is built (every variable created). On hosts other than the chief, the global
    variables become local ones.

    Args:
      graph: the training graph.
      collectives: this host's collectives.
      scaffold: the spec's scaffold (the user's `scaffold_fn` one), or None.

    Returns:
      A scaffold with the same fields whose `local_init_op` also runs the broadcast from the chief (after the user's
      local init op, or the default one).
    """
    variables: List[tf.Variable] = list(graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES))
    if not collectives.is_chief:
        global_variables = graph.get_collection_ref(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
        global_variables[:] = [v for v in global_variables if not any(v is m for m in variables)]
        for variable in variables:
            graph.add_to_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES, variable)
    scaffold = scaffold or tf.compat.v1.train.Scaffold()
    with graph.as_default():
        local_init = scaffold.local_init_op
        if local_init is None:
            local_init = tf.compat.v1.train.Scaffold.default_local_init_op()
        syncs = []
        with tf.control_dependencies([local_init]), tf.name_scope("mirror_from_chief"):
            for variable in variables:
                with tf.device(variable.device):
                    value = collectives.from_chief(variable.read_value(), STARTUP_TIMEOUT_SECS)
                    syncs.append(tf.group(value) if collectives.is_chief else variable.assign(value).op)
        sync = tf.group(local_init, *syncs, name="local_init_and_mirror_from_chief")
    if collectives.is_chief:
        return tf.compat.v1.train.Scaffold(copy_from_scaffold=scaffold, local_init_op=sync)
    # Never used (only the chief saves and restores), but the Estimator builds a default saver, which refuses a graph
    # without global variables.
    with graph.as_default():
        saver = scaffold.saver or tf.compat.v1.train.Saver(var_list=[], allow_empty=True)
        # The default also waits for the shared resources (embedding table shards, which the chief initialises or
        # restores), polling every 30 s; the broadcast in the local init already waits for the chief's restore.
        ready_for_local_init = scaffold.ready_for_local_init_op
        if ready_for_local_init is None:
            ready_for_local_init = tf.compat.v1.report_uninitialized_variables(
                tf.compat.v1.global_variables(), name="report_uninitialized_global_variables"
            )
    return tf.compat.v1.train.Scaffold(
        copy_from_scaffold=scaffold, local_init_op=sync, saver=saver, ready_for_local_init_op=ready_for_local_init
    )
