"""Shared test helpers that are not references: devices, duck-typed configs, table state, small models and inputs.

References computed from the formulas live in `tests.oracles`.
"""
