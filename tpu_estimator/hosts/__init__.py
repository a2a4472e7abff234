"""Several hosts: the cluster and its layout, a host's server, collectives between hosts (one process per
host), the mirrored dense variables, and `train_and_evaluate` on hosts.
"""
