"""Around `train()`: one writer per `model_dir` (the lock), finite checkpoints, the `checkpoint` state file
checked, no training past `max_steps`.
"""
