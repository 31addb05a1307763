"""Stage 6: PCA with all-but-the-top, fitted on sentences (the paper) or on words (ablation).

The statistics ``(n, Σx, ΣxxᵀT)`` are additive, so every block of sentences contributes a partial
in parallel and the driver sums them and eigendecomposes once. Components ``k+1 … k+d′`` are kept,
``k = floor(d/100)`` with ABTT (else 0); because a sentence is a mean of word vectors, every word
is transformed once: ``v′ = (v − mean) · W``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PCA", "PCAStats", "fit", "sentence_stats"]


@dataclass
class PCAStats:
    """Mergeable second-moment statistics of a set of vectors."""

    n: int
    s: np.ndarray  # Σx, float64 [d]
    ss: np.ndarray  # ΣxxT, float64 [d, d]

    @classmethod
    def of(cls, x: np.ndarray) -> PCAStats:
        x = np.asarray(x, dtype=np.float64)
        return cls(len(x), x.sum(axis=0), x.T @ x)

    def __add__(self, other: PCAStats) -> PCAStats:
        return PCAStats(self.n + other.n, self.s + other.s, self.ss + other.ss)


@dataclass
class PCA:
    mean: np.ndarray  # [d]
    components: np.ndarray  # [d, d'] kept components (columns)
    explained: np.ndarray  # variances of all components, descending
    skipped: int  # k, top components dropped

    def transform(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, dtype=np.float64) - self.mean) @ self.components).astype(np.float32)


def fit(stats: PCAStats, dim: int, abtt: bool) -> PCA:
    """Eigendecompose the covariance once; keep components ``k+1 … k+dim``."""
    if stats.n < 2:
        raise ValueError(f"PCA needs at least 2 vectors, got {stats.n}")
    mean = stats.s / stats.n
    cov = (stats.ss - stats.n * np.outer(mean, mean)) / (stats.n - 1)
    vals, vecs = np.linalg.eigh(cov)
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], vecs[:, order]
    d = cov.shape[0]
    k = d // 100 if abtt else 0
    if k + dim > d:
        raise ValueError(f"cannot keep {dim} components after dropping {k} of {d}")
    # A deterministic sign per component (largest |loading| positive) for reproducible models.
    signs = np.sign(vecs[np.abs(vecs).argmax(axis=0), np.arange(d)])
    vecs = vecs * np.where(signs == 0, 1, signs)
    return PCA(mean, vecs[:, k : k + dim], vals, k)


def sentence_stats(model_path: str, texts: list[str]) -> PCAStats:
    """Partial statistics of the mean-of-word-vectors of ``texts`` (one block, run as a task)."""
    from swe.model import StaticModel

    model = StaticModel.load(model_path)
    x = model.encode(texts, normalize=False)
    x = x[np.abs(x).sum(axis=1) > 0]  # sentences with no known word carry no information
    return PCAStats.of(x)
