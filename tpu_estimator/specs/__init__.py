"""What a program declares, as values: `TPUContext` and the sharding context, `TPUEstimatorSpec`, host calls, `EmbeddingConfigSpec`, batch-size checks.

These modules build no graph stage; every stage reads them.
"""
