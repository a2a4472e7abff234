"""TPU embedding engine: sharded tables, deduplicated lookups and TPU optimizer semantics.

This package never imports `tpu_estimator`.
"""
