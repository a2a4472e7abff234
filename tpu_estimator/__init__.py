"""TPUEstimator programs on CPUs, GPUs and clusters of them."""
