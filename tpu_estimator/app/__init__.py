"""The product built on the library: the `tpu-estimator` command line, its YAML configs, built-in data and models
(DLRM, Wide & Deep), progress printing and the benchmark harness.

Nothing in `tpu_estimator`'s core imports this package.
"""
