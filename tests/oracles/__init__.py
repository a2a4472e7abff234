"""NumPy references ("oracles") of TPU embedding semantics, written from the formulas and independent of `embedding/`.

- `optimizers`: the per-optimizer update rules, one step on rows whose gradient is summed per id.
- `combiners`: combining looked-up rows into activations (sum / mean / sqrtn, sequences, quantization) and back.
- `tables`: training whole tables from id features: activations, per-id gradient sums, one update per id.
"""
