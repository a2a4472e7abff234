"""The replicas of a step: the replica context and its coordinators, `model_fn` traced on replica 0 and stamped
on the others (one host) or built per replica (clusters), cross-replica sums, `CrossShardOptimizer`, shard devices.
"""
