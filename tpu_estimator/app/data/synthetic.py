"""Synthetic Criteo-like click data: deterministic, learnable, no downloads.

Each example is generated from `(seed, example index)` alone, in blocks of `BLOCK_SIZE` examples, so any range
of examples can be generated, written or streamed independently and identically:

* 13 dense integer counts: `floor(expm1(mu_j + sigma_j * n))` with `n ~ N(0, 1)` (heavy tailed, non-negative,
  many zeros), each missing with a per-feature rate resembling Criteo's (I12 ~77%, I1/I10 ~45%, ...).
* 26 categorical features: a rank `r` in `[0, cardinality_i)` drawn from a truncated power law
  (`P(r) ~ (r + 1) ** -zipf_exponent`), written as an 8-hex-character token (a keyed hash of the rank, so token
  values look random but frequent ranks give frequent tokens); missing with per-feature rates.
* label: Bernoulli(sigmoid(bias + sum_i w_i(r_i) + sum_j a_j * z_j)) with hidden per-(feature, rank) weights
  `w_i`, dense coefficients `a_j` on the standardized `log1p(count)` `z_j`, and `bias` calibrated on a
  fixed sample so the click rate is about `click_rate` (25% by default, as in Criteo).

`SyntheticCriteo.dataset` yields exactly what `criteo_tsv_dataset` yields on the files `write_tsv` writes.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tpu_estimator.app.data import criteo

BLOCK_SIZE = 1024

# Fraction of missing values per dense feature I1..I13 and categorical feature C1..C26, close to Criteo Kaggle.
DENSE_MISSING_RATES: Tuple[float, ...] = (0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0005, 0.04, 0.45, 0.04, 0.77, 0.22)
CATEGORICAL_MISSING_RATES: Tuple[float, ...] = (
    0.0,
    0.0,
    0.03,
    0.03,
    0.0,
    0.12,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.03,
    0.0,
    0.0,
    0.0,
    0.03,
    0.0,
    0.0,
    0.44,
    0.44,
    0.03,
    0.76,
    0.0,
    0.03,
    0.44,
    0.44,
)

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclasses.dataclass(frozen=True)
class SyntheticCriteoSpec:
    """What the synthetic data looks like.

    Attributes:
      seed: everything is a function of the seed (and the example index).
      cardinalities: distinct values per categorical feature (26 ints); `criteo.criteo_cardinalities(max_vocab)`
        gives scaled-down Criteo ones.
      zipf_exponent: power-law exponent of the categorical value frequencies (> 0).
      click_rate: target fraction of positive labels.
      signal: scale of the hidden logit (0 = labels independent of features; 1 = Bayes AUC about 0.8).
      dense_missing_rates: 13 missing rates.
      categorical_missing_rates: 26 missing rates.
    """

    seed: int = 0
    cardinalities: Tuple[int, ...] = criteo.CRITEO_KAGGLE_CARDINALITIES
    zipf_exponent: float = 1.1
    click_rate: float = 0.25
    signal: float = 1.0
    dense_missing_rates: Tuple[float, ...] = DENSE_MISSING_RATES
    categorical_missing_rates: Tuple[float, ...] = CATEGORICAL_MISSING_RATES

    def __post_init__(self):
        object.__setattr__(self, "cardinalities", tuple(int(c) for c in self.cardinalities))
        object.__setattr__(self, "dense_missing_rates", tuple(float(r) for r in self.dense_missing_rates))
        object.__setattr__(self, "categorical_missing_rates", tuple(float(r) for r in self.categorical_missing_rates))
        criteo.resolve_vocab_sizes(self.cardinalities)
        if len(self.dense_missing_rates) != criteo.NUM_DENSE_FEATURES:
            raise ValueError(f"dense_missing_rates needs {criteo.NUM_DENSE_FEATURES} entries")
        if len(self.categorical_missing_rates) != criteo.NUM_CATEGORICAL_FEATURES:
            raise ValueError(f"categorical_missing_rates needs {criteo.NUM_CATEGORICAL_FEATURES} entries")
        if not 0 < self.click_rate < 1:
            raise ValueError(f"click_rate must be in (0, 1), got {self.click_rate}")
        if self.zipf_exponent <= 0:
            raise ValueError(f"zipf_exponent must be positive, got {self.zipf_exponent}")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")


@dataclasses.dataclass
class RawBatch:
    """Raw columns of consecutive examples (as `criteo.parse_tsv_lines` returns them, plus ranks).

    Attributes:
      label: int64 `[N]`.
      dense: int64 `[N, 13]`, 0 where missing.
      dense_present: bool `[N, 13]`.
      categorical: bytes `S8` `[N, 26]`, 8 hex characters, `b''` where missing.
      ranks: int64 `[N, 26]`, the popularity rank behind each categorical value, -1 where missing.
    """

    label: np.ndarray
    dense: np.ndarray
    dense_present: np.ndarray
    categorical: np.ndarray
    ranks: np.ndarray

    def __len__(self) -> int:
        return len(self.label)

    @staticmethod
    def concat(batches: Sequence["RawBatch"]) -> "RawBatch":
        return RawBatch(*(np.concatenate([getattr(b, f.name) for b in batches]) for f in dataclasses.fields(RawBatch)))

    def slice(self, start: int, stop: int) -> "RawBatch":
        return RawBatch(*(getattr(self, f.name)[start:stop] for f in dataclasses.fields(RawBatch)))

    def tsv_lines(self) -> List[str]:
        """The examples as Criteo TSV lines (without line terminators)."""
        cols = [self.label.astype(str)]
        for j in range(criteo.NUM_DENSE_FEATURES):
            cols.append(np.where(self.dense_present[:, j], self.dense[:, j].astype(str), ""))
        for i in range(criteo.NUM_CATEGORICAL_FEATURES):
            cols.append(self.categorical[:, i].astype(str))
        return ["\t".join(row) for row in zip(*(c.tolist() for c in cols))]


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on uint64 arrays (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _hash(seed: int, salt: int, feature: int, values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        key = _mix64(np.array([seed], np.uint64) ^ np.uint64(salt))
        key = _mix64(key ^ np.uint64(feature))
        return _mix64(key ^ values.astype(np.uint64))


def _to_hex8(tokens: np.ndarray) -> np.ndarray:
    """uint32 values -> `S8` lower-case hex strings."""
    shifts = np.arange(28, -1, -4, dtype=np.uint64)
    nibbles = (tokens.astype(np.uint64)[..., None] >> shifts) & np.uint64(0xF)
    return np.ascontiguousarray(_HEX[nibbles]).view("S8")[..., 0]


def _power_law_ranks(u: np.ndarray, n: int, s: float) -> np.ndarray:
    """Inverse CDF of the continuous power law x**-s on [1, n + 1), floored to ranks in [0, n)."""
    if abs(s - 1.0) < 1e-9:
        x = np.exp(u * np.log(n + 1.0))
    else:
        x = (u * ((n + 1.0) ** (1.0 - s) - 1.0) + 1.0) ** (1.0 / (1.0 - s))
    return np.clip(np.floor(x).astype(np.int64) - 1, 0, n - 1)


class SyntheticCriteo:
    """Generates synthetic Criteo-like examples; see the module docstring."""

    _SALT_TOKEN = 1
    _SALT_WEIGHT = 2
    _CALIBRATION_BLOCK = 2**40  # block indices used only to calibrate the bias
    _CALIBRATION_BLOCKS = 8

    def __init__(self, spec: Optional[SyntheticCriteoSpec] = None):
        self.spec = spec or SyntheticCriteoSpec()
        rng = np.random.default_rng([self.spec.seed, 7])
        self._dense_mu = rng.uniform(0.3, 3.5, criteo.NUM_DENSE_FEATURES)
        self._dense_sigma = rng.uniform(0.8, 2.0, criteo.NUM_DENSE_FEATURES)
        self._dense_coef = rng.normal(0.0, 0.35, criteo.NUM_DENSE_FEATURES)
        self._cat_scale = rng.uniform(0.0, 0.5, criteo.NUM_CATEGORICAL_FEATURES)
        self._bias = 0.0
        self._bias = self._calibrate_bias()

    @property
    def bias(self) -> float:
        """The calibrated bias of the hidden logit."""
        return self._bias

    def hidden_weights(self, feature: int, ranks: np.ndarray) -> np.ndarray:
        """Hidden logit contribution of categorical `feature` for the given ranks (0 for rank -1 = missing)."""
        h = _hash(self.spec.seed, self._SALT_WEIGHT, feature, np.maximum(ranks, 0))
        u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)  # uniform [0, 1)
        w = (2.0 * u - 1.0) * np.sqrt(3.0) * self._cat_scale[feature] * self.spec.signal
        return np.where(ranks >= 0, w, 0.0)

    def token(self, feature: int, ranks: np.ndarray) -> np.ndarray:
        """The 8-hex-character tokens of categorical `feature` for the given ranks."""
        h = _hash(self.spec.seed, self._SALT_TOKEN, feature, ranks)
        return _to_hex8(h & np.uint64(0xFFFFFFFF))

    def _block(self, k: int) -> Tuple[RawBatch, np.ndarray, np.ndarray]:
        """Block k without labels: (raw batch with zero labels, logits without bias, uniforms for labels)."""
        spec = self.spec
        rng = np.random.default_rng([spec.seed, k])
        n = BLOCK_SIZE
        latent = rng.standard_normal((n, criteo.NUM_DENSE_FEATURES))
        dense = np.floor(np.expm1(self._dense_mu + self._dense_sigma * latent)).astype(np.int64)
        dense = np.maximum(dense, 0)
        dense_present = rng.random((n, criteo.NUM_DENSE_FEATURES)) >= np.array(spec.dense_missing_rates)
        dense = np.where(dense_present, dense, 0)
        u = rng.random((n, criteo.NUM_CATEGORICAL_FEATURES))
        cat_present = rng.random((n, criteo.NUM_CATEGORICAL_FEATURES)) >= np.array(spec.categorical_missing_rates)
        label_u = rng.random(n)
        ranks = np.empty((n, criteo.NUM_CATEGORICAL_FEATURES), np.int64)
        categorical = np.empty((n, criteo.NUM_CATEGORICAL_FEATURES), "S8")
        logit = np.zeros(n)
        for i, card in enumerate(spec.cardinalities):
            r = np.where(cat_present[:, i], _power_law_ranks(u[:, i], card, spec.zipf_exponent), -1)
            ranks[:, i] = r
            categorical[:, i] = np.where(r >= 0, self.token(i, r), b"")
            logit += self.hidden_weights(i, r)
        z = (np.log1p(dense) - self._dense_mu) / self._dense_sigma
        logit += spec.signal * np.sum(np.where(dense_present, z, 0.0) * self._dense_coef, axis=1)
        batch = RawBatch(np.zeros(n, np.int64), dense, dense_present, categorical, ranks)
        return batch, logit, label_u

    def _calibrate_bias(self) -> float:
        logits = np.concatenate([self._block(self._CALIBRATION_BLOCK + k)[1] for k in range(self._CALIBRATION_BLOCKS)])
        lo, hi = -20.0, 20.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if np.mean(1.0 / (1.0 + np.exp(-(logits + mid)))) < self.spec.click_rate:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def block(self, k: int) -> RawBatch:
        """Examples `[k * BLOCK_SIZE, (k + 1) * BLOCK_SIZE)`."""
        batch, logit, label_u = self._block(k)
        batch.label = (label_u < 1.0 / (1.0 + np.exp(-(logit + self._bias)))).astype(np.int64)
        return batch

    def click_probability(self, batch: RawBatch) -> np.ndarray:
        """The hidden model's click probability for the examples of `batch` (the Bayes-optimal predictor)."""
        logit = np.full(len(batch), self._bias)
        for i in range(criteo.NUM_CATEGORICAL_FEATURES):
            logit += self.hidden_weights(i, batch.ranks[:, i])
        z = (np.log1p(batch.dense) - self._dense_mu) / self._dense_sigma
        logit += self.spec.signal * np.sum(np.where(batch.dense_present, z, 0.0) * self._dense_coef, axis=1)
        return 1.0 / (1.0 + np.exp(-logit))

    def generate(self, num_examples: int, start: int = 0) -> RawBatch:
        """Examples `[start, start + num_examples)`."""
        if num_examples < 0 or start < 0:
            raise ValueError(f"Need num_examples >= 0 and start >= 0, got {num_examples}, {start}")
        first, last = start // BLOCK_SIZE, (start + num_examples + BLOCK_SIZE - 1) // BLOCK_SIZE
        if num_examples == 0:
            return self.block(first).slice(0, 0)
        batch = RawBatch.concat([self.block(k) for k in range(first, last)])
        offset = start - first * BLOCK_SIZE
        return batch.slice(offset, offset + num_examples)

    def iter_blocks(self, num_examples: int, start: int = 0) -> Iterator[RawBatch]:
        """Examples `[start, start + num_examples)` in pieces of at most `BLOCK_SIZE`."""
        end = start + num_examples
        pos = start
        while pos < end:
            k = pos // BLOCK_SIZE
            stop = min(end, (k + 1) * BLOCK_SIZE)
            yield self.block(k).slice(pos - k * BLOCK_SIZE, stop - k * BLOCK_SIZE)
            pos = stop

    def write_tsv(self, path: str, num_examples: int, start: int = 0) -> str:
        """Writes examples `[start, start + num_examples)` to `path` in Criteo TSV format; returns `path`."""
        with tf.io.gfile.GFile(path, "w") as f:
            for batch in self.iter_blocks(num_examples, start):
                lines = batch.tsv_lines()
                if lines:
                    f.write("\n".join(lines) + "\n")
        return path

    def write_tsv_files(
        self, directory: str, num_examples: int, num_files: int = 1, prefix: str = "criteo"
    ) -> List[str]:
        """Splits `num_examples` examples into `num_files` consecutive TSV files in `directory`.

        Returns:
          The paths, `{directory}/{prefix}-{i:05d}-of-{num_files:05d}.tsv`, in example order.
        """
        if num_files < 1:
            raise ValueError(f"num_files must be positive, got {num_files}")
        tf.io.gfile.makedirs(directory)
        paths = []
        bounds = np.linspace(0, num_examples, num_files + 1).astype(np.int64)
        for i in range(num_files):
            path = os.path.join(directory, f"{prefix}-{i:05d}-of-{num_files:05d}.tsv")
            paths.append(self.write_tsv(path, int(bounds[i + 1] - bounds[i]), int(bounds[i])))
        return paths

    def dataset(
        self,
        batch_size: int,
        num_examples: Optional[int] = None,
        vocab_sizes: Optional[criteo.VocabSizes] = None,
        *,
        drop_remainder: bool = False,
        num_epochs: Optional[int] = 1,
        input_pipeline_id: int = 0,
        num_pipelines: int = 1,
    ) -> tf.data.Dataset:
        """A `tf.data.Dataset` of `(features, label)` batches of examples `[0, num_examples)`.

        Args:
          batch_size: examples per batch.
          num_examples: examples per epoch; None streams new examples forever.
          vocab_sizes: hash buckets per categorical feature; default `spec.cardinalities`.
          drop_remainder: drop a last partial batch.
          num_epochs: passes over the same examples (None = forever); ignored when `num_examples` is None.
          input_pipeline_id: this pipeline's index.
          num_pipelines: pipelines sharing the examples; pipeline p gets blocks `p::num_pipelines` of `BLOCK_SIZE`
            examples.

        Returns:
          Batches as `criteo.criteo_tsv_dataset` yields them for the same examples (same values, and the same
          order when `num_pipelines` is 1).
        """
        criteo.check_sharding(input_pipeline_id, num_pipelines)
        sizes = criteo.resolve_vocab_sizes(self.spec.cardinalities if vocab_sizes is None else vocab_sizes)
        if num_examples is None:
            blocks = tf.data.Dataset.range(2**62)
            total = None
        else:
            blocks = tf.data.Dataset.range((num_examples + BLOCK_SIZE - 1) // BLOCK_SIZE)
            total = int(num_examples)
        blocks = blocks.shard(num_pipelines, input_pipeline_id)

        def make(k):
            k = int(k)
            b = self.block(k)
            if total is not None and (k + 1) * BLOCK_SIZE > total:
                b = b.slice(0, total - k * BLOCK_SIZE)
            return b.label, b.dense, b.dense_present, b.categorical.astype(object)

        def gen(k):
            label, dense, present, cat = tf.numpy_function(
                make, [k], [tf.int64, tf.int64, tf.bool, tf.string], stateful=False
            )
            label.set_shape([None])
            dense.set_shape([None, criteo.NUM_DENSE_FEATURES])
            present.set_shape([None, criteo.NUM_DENSE_FEATURES])
            cat.set_shape([None, criteo.NUM_CATEGORICAL_FEATURES])
            return label, dense, present, cat

        ds = blocks.map(
            criteo.no_autograph(gen),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        if total is not None and num_epochs != 1:
            ds = ds.repeat(num_epochs)
        ds = ds.rebatch(batch_size, drop_remainder=drop_remainder)
        ds = ds.map(
            criteo.no_autograph(lambda *raw: criteo.raw_to_features(*raw, sizes)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return ds.prefetch(tf.data.AUTOTUNE)


def synthetic_criteo_dataset(
    batch_size: int,
    num_examples: Optional[int] = None,
    *,
    seed: int = 0,
    max_vocab: Optional[int] = None,
    vocab_sizes: Optional[criteo.VocabSizes] = None,
    **kwargs,
) -> tf.data.Dataset:
    """Shortcut: `SyntheticCriteo(SyntheticCriteoSpec(seed, criteo_cardinalities(max_vocab))).dataset(...)`.

    Args:
      batch_size: examples per batch.
      num_examples: examples per epoch (None = endless stream).
      seed: data seed.
      max_vocab: cap on the Criteo cardinalities (the generator's and, by default, the hash buckets).
      vocab_sizes: hash buckets, if they should differ from the cardinalities.
      **kwargs: passed to `SyntheticCriteo.dataset` (drop_remainder, num_epochs, input_pipeline_id,
        num_pipelines).
    """
    spec = SyntheticCriteoSpec(seed=seed, cardinalities=tuple(criteo.criteo_cardinalities(max_vocab)))
    return SyntheticCriteo(spec).dataset(batch_size, num_examples, vocab_sizes, **kwargs)
