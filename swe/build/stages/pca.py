"""Stage ``pca``: PCA with all-but-the-top, fitted on sentences (the paper) or on words
(ablation) → the step-2 model.

The statistics ``(n, Σx, ΣxxT)`` are additive, so every block of sentences contributes a partial
in parallel and the driver sums them and eigendecomposes once. Components ``k+1 … k+d′`` are kept,
``k = floor(d/100)`` with ABTT (else 0); because a sentence is a mean of word vectors, every word
is transformed once: ``v′ = (v − mean) · W``. In Model2Vec mode the vectors are then SIF-weighted
by corpus frequency.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from swe import storage
from swe.build.markers import StageDir
from swe.build.runner import StageResult
from swe.build.stages.selection import read_selected, selected_parts
from swe.build.stages.vocab import read_vocab
from swe.model import StaticModel
from swe.raysetup import get

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["PCA", "PCAConfig", "PCAStats", "Result", "fit", "sentence_stats"]

NAME = "pca"
LEVELS = ("sentence", "word", "none")


@dataclass
class PCAConfig:
    """``[pca]``: where PCA is fitted, the kept dimensions, ABTT, and SIF in Model2Vec mode."""

    level: str = "sentence"  # sentence | word | none
    dim: int = 256
    abtt: bool = True  # drop the top k = floor(d/100) components
    sample: int = 100_000  # M sentences for sentence-level PCA
    sif_a: float = 1e-3  # SIF weight a/(a+p(w)) in model2vec mode


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """What PCA was fitted on and kept (empty with ``level = "none"``)."""

    fitted_on: int = 0
    dropped_top: int = 0
    dim: int = 0
    level: str = "none"
    top_variances: list[float] = field(default_factory=list)
    sif_a: float | None = None


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[pca]``, including ``dim`` beyond the teacher's dimensions."""
    pca = cfg.pca
    if pca.level not in LEVELS:
        errors.append(f"pca.level = {pca.level!r}; use sentence, word or none")
    if pca.sample < 2:
        errors.append("pca.sample must be >= 2")
    dim = _teacher_dim(cfg)
    if dim is not None and pca.level != "none":
        k = dim // 100 if pca.abtt else 0
        if pca.dim + k > dim:
            errors.append(f"pca.dim = {pca.dim} (+ {k} dropped by ABTT) exceeds the teacher's "
                          f"{dim} dimensions; use pca.dim <= {dim - k}")


def _teacher_dim(cfg: BuildConfig) -> int | None:
    try:
        with open(os.path.join(cfg.teacher_dir(), "config.json")) as f:
            conf = json.load(f)
    except (OSError, ValueError, ImportError):
        return None
    return conf.get("hidden_size") or conf.get("d_model") or conf.get("dim")


def enabled(cfg: BuildConfig) -> bool:
    """Always runs (``level = "none"`` only copies step 1)."""
    return True


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Transforms the extracted vectors."""
    return ("extraction",)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The PCA settings and the seed (it samples sentences)."""
    return cfg.pca, cfg.seed


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Fit PCA, transform every word once, save ``<output>/step2`` and ``<output>/model``."""
    cfg = ctx.cfg
    step1 = StaticModel.load(ctx.path("step1"))
    vectors, stats = step1.vectors, {}
    if cfg.pca.level != "none":
        moments = PCAStats.of(vectors) if cfg.pca.level == "word" else _sentence_moments(ctx)
        pca = fit(moments, cfg.pca.dim, cfg.pca.abtt)
        vectors = pca.transform(vectors)
        stats = {"fitted_on": int(moments.n), "dropped_top": pca.skipped, "dim": cfg.pca.dim,
                 "level": cfg.pca.level,
                 "top_variances": [round(float(v), 4) for v in pca.explained[:5]]}
    if cfg.extraction.mode == "model2vec":  # SIF weights from the corpus counts
        p = _word_counts(ctx, step1.words)
        p = p / p.sum()
        vectors = vectors * (cfg.pca.sif_a / (cfg.pca.sif_a + p))[:, None]
        stats["sif_a"] = cfg.pca.sif_a
    ctx.save_step("step2", step1.words, vectors)
    return Result(**stats)


def _word_counts(ctx: BuildContext, words: list[str]) -> np.ndarray:
    """Corpus counts of ``words`` (summed over languages; 1 for a word never counted)."""
    vocab, counts = read_vocab(ctx)
    lookup: dict[str, float] = {}
    for lang, ws in vocab.items():
        for w, c in zip(ws, counts[lang], strict=True):
            lookup[w] = lookup.get(w, 0) + float(c)
    return np.array([lookup.get(w, 1.0) for w in words])


def _sentence_moments(ctx: BuildContext) -> PCAStats:
    """Sentence-level PCA statistics: one random sentence per word with >= 3 sentences, at most
    ``pca.sample`` of them, each embedded as the mean of its words' step-1 vectors (one task per
    selection part)."""
    import ray

    cfg = ctx.cfg
    rng = np.random.default_rng(cfg.seed)
    chosen = []
    for lang in cfg.languages:
        wid, sid = read_selected(ctx, lang)
        per_word = np.bincount(wid)
        start = np.searchsorted(wid, np.arange(len(per_word)))
        for w in np.flatnonzero(per_word >= 3):
            chosen.append(sid[start[w] + rng.integers(per_word[w])])
    chosen = np.unique(np.asarray(chosen, dtype=np.int64))
    if len(chosen) > cfg.pca.sample:
        chosen = np.sort(rng.choice(chosen, cfg.pca.sample, replace=False))
    if len(chosen) < 2:
        raise ValueError("too few words with >= 3 sentences for sentence-level PCA; use "
                         "pca.level = 'word' or a larger corpus")
    task = ray.remote(num_cpus=0.5)(part_moments)
    parts = get([task.remote(url, ctx.path("step1"), chosen) for url in selected_parts(ctx)])
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def part_moments(part_url: str, model_path: str, chosen: np.ndarray) -> PCAStats:
    """PCA statistics of one selection part's chosen sentences (run as a task)."""
    t = storage.read_parquet(part_url, ["sid", "text"])
    keep = np.isin(t.column("sid").to_numpy(), chosen)
    texts = [x for x, k in zip(t.column("text").to_pylist(), keep, strict=True) if k]
    if not texts:
        return PCAStats(0, 0.0, 0.0)
    return sentence_stats(model_path, texts)


@dataclass
class PCAStats:
    """Mergeable second-moment statistics of a set of vectors."""

    n: int
    s: np.ndarray  # Σx, float64 [d]
    ss: np.ndarray  # ΣxxT, float64 [d, d]

    @classmethod
    def of(cls, x: np.ndarray) -> PCAStats:
        """The statistics of the rows of ``x``."""
        x = np.asarray(x, dtype=np.float64)
        return cls(len(x), x.sum(axis=0), x.T @ x)

    def __add__(self, other: PCAStats) -> PCAStats:
        return PCAStats(self.n + other.n, self.s + other.s, self.ss + other.ss)


@dataclass
class PCA:
    """A fitted PCA: the mean and the kept components."""

    mean: np.ndarray  # [d]
    components: np.ndarray  # [d, d'] kept components (columns)
    explained: np.ndarray  # variances of all components, descending
    skipped: int  # k, top components dropped

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Center ``x`` and project it onto the kept components (float32)."""
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
    model = StaticModel.load(model_path)
    x = model.encode(texts, normalize=False)
    x = x[np.abs(x).sum(axis=1) > 0]  # sentences with no known word carry no information
    return PCAStats.of(x)
