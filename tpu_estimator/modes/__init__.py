"""The modes on shards, each a loop of stages: the feed stage, TRAIN's loop, EVAL's loop, PREDICT's step, the CPU
path, loop-length and progress hooks, and host calls.
"""
