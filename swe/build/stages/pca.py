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
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from swe import storage
from swe.build.markers import StageDir
from swe.build.outputs import selected_parts, vocab_url
from swe.build.stage import LogPhrases, Section, StageResult
from swe.build.tasks import MiB, remote
from swe.model import StaticModel
from swe.raysetup import get

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["PCA", "PCAConfig", "PCAStats", "Result", "choose_sentences", "fit", "part_moments",
           "transform_step1", "word_moments"]

NAME = "pca"
LEVELS = ("sentence", "word", "none")


@dataclass
class PCAConfig:
    """``[pca]``: where PCA is fitted, the kept dimensions, ABTT, and SIF in Model2Vec mode."""

    level: str = field(default="sentence", metadata={
        "choices": LEVELS, "help": "what PCA is fitted on; none keeps the teacher's dims"})
    dim: int = field(default=256, metadata={"min": 1, "help": "kept dimensions d'"})
    abtt: bool = field(default=True, metadata={"help": "drop the top k = floor(d/100) components"})
    sample: int = field(default=100_000, metadata={
        "min": 2, "help": "M sentences for sentence-level PCA"})
    sif_a: float = field(default=1e-3, metadata={
        "gt": 0, "help": "SIF weight a/(a+p(w)) in model2vec mode"})


SECTION = Section("pca", PCAConfig)

#: The other stages' config sections this stage reads (its contract; tests/test_layout.py
#: checks the source names no other).
READS: tuple[str, ...] = ("extraction",)


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """What PCA was fitted on and kept (empty with ``level = "none"``)."""

    LOG: ClassVar[LogPhrases] = {
        "fitted_on": ("fitted on {} sentences", "sentences"),
        "dropped_top": ("top {} components dropped", None), "dim": ("{} dimensions", None),
        "sif_a": ("SIF a {}", None)}

    fitted_on: int = 0
    dropped_top: int = 0
    dim: int = 0
    level: str = "none"
    top_variances: list[float] = field(default_factory=list)
    sif_a: float | None = None


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[pca]``, including ``dim`` beyond the teacher's dimensions."""
    pca = cfg.pca
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
    """The PCA settings, the seed (it samples sentences) and a non-default OOV rule."""
    return (cfg.pca, cfg.seed) + ((cfg.oov,) if cfg.oov != "subword" else ())


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Fit PCA from statistics reduced in tasks, then transform every word once in a task that
    saves ``<output>/step2`` and ``<output>/model`` (the driver never holds the matrix)."""

    cfg, stats, pca = ctx.cfg, {}, None
    words = done["extraction"].words
    if cfg.pca.level != "none":
        step1 = ctx.path("step1")
        moments = get(remote(word_moments, 512 * MiB + words * 4096 * 2, "pca (words)",
                             "lower vocab.size").remote(step1)) \
            if cfg.pca.level == "word" else _sentence_moments(ctx, step1, words)
        pca = fit(moments, cfg.pca.dim, cfg.pca.abtt)
        stats = {"fitted_on": int(moments.n), "dropped_top": pca.skipped, "dim": cfg.pca.dim,
                 "level": cfg.pca.level,
                 "top_variances": [round(float(v), 4) for v in pca.explained[:5]]}
    sif = cfg.pca.sif_a if cfg.extraction.mode == "model2vec" else None
    if sif is not None:
        stats["sif_a"] = sif
    vocab = {lang: vocab_url(ctx, lang) for lang in cfg.languages}
    task = remote(transform_step1, 512 * MiB + words * 4096 * 3, "pca (transform)",
                  "lower vocab.size")
    get(task.remote(ctx.path("step1"), pca, sif, vocab, ctx.provenance("step2"),
                    [ctx.path("step2"), ctx.path("model")], cfg.oov))
    return Result(**stats)


def word_moments(step1_url: str) -> PCAStats:
    """PCA statistics of the word vectors themselves (the word-level ablation)."""
    return PCAStats.of(StaticModel.load(step1_url).vectors)


def transform_step1(step1_url: str, pca: PCA | None, sif_a: float | None,
                    vocab: dict[str, str], provenance: dict, destinations: list[str],
                    oov: str = "subword") -> None:
    """Transform every word of step 1 once (and SIF-weight it in Model2Vec mode); save with
    the ``oov`` rule."""
    step1 = StaticModel.load(step1_url)
    vectors = step1.vectors if pca is None else pca.transform(step1.vectors)
    if sif_a is not None:  # SIF weights from the corpus counts
        p = _word_counts(vocab, step1.words)
        p = p / p.sum()
        vectors = vectors * (sif_a / (sif_a + p))[:, None]
    model = StaticModel.from_vectors(step1.words, vectors, tokenizer=step1.tokenizer,
                                     language=step1.languages, provenance=provenance, oov=oov)
    for url in destinations:
        model.save(url)


def _word_counts(vocab: dict[str, str], words: list[str]) -> np.ndarray:
    """Corpus counts of ``words`` (summed over languages; 1 for a word never counted)."""
    lookup: dict[str, float] = {}
    for url in vocab.values():
        t = storage.read_parquet(url)
        for w, c in zip(t.column("word").to_pylist(), t.column("count").to_pylist(),
                        strict=True):
            lookup[w] = lookup.get(w, 0) + float(c)
    return np.array([lookup.get(w, 1.0) for w in words])


def _sentence_moments(ctx: BuildContext, step1: str, words: int) -> PCAStats:
    """Sentence-level PCA statistics: one random sentence per word with >= 3 sentences (drawn in
    one task per selection partition), at most ``pca.sample`` of them, each embedded as the mean
    of its words' step-1 vectors (a few tasks per CPU of the cluster, each loading the model
    once); the partial statistics are summed as a tree of tasks."""
    import ray

    cfg = ctx.cfg
    choose = remote(choose_sentences, 256 * MiB, "pca (sample)", "selection.partitions")
    refs = [choose.remote(url, [cfg.seed, i, k])
            for i, lang in enumerate(cfg.languages)
            for k, url in enumerate(storage.find(ctx.work("selection", lang, "pairs")))]
    chosen = np.unique(np.concatenate(get(refs))) if refs else np.zeros(0, np.int64)
    if len(chosen) > cfg.pca.sample:
        rng = np.random.default_rng(cfg.seed)
        chosen = np.sort(rng.choice(chosen, cfg.pca.sample, replace=False))
    if len(chosen) < 2:
        raise ValueError("too few words with >= 3 sentences for sentence-level PCA; use "
                         "pca.level = 'word' or a larger corpus")
    task = remote(part_moments, 512 * MiB + words * 4096 * 2, "pca (moments)", "vocab.size")
    chosen_ref, parts = ray.put(chosen), selected_parts(ctx)
    groups = max(1, min(len(parts), 4 * int(ray.cluster_resources().get("CPU", 1))))
    stats = [task.remote(parts[g::groups], step1, chosen_ref) for g in range(groups)]
    add = ray.remote(num_cpus=0.25)(_add)
    while len(stats) > 1:
        stats = [add.remote(*stats[i:i + 2]) for i in range(0, len(stats), 2)]
    return get(stats[0])


def _add(a: PCAStats, b: PCAStats | None = None) -> PCAStats:
    return a if b is None else a + b


def choose_sentences(pairs_url: str, seed: list[int]) -> np.ndarray:
    """One random selected sentence of each word with >= 3 (one selection partition)."""
    z = storage.load_npz(pairs_url)
    wid, sid = z["word_id"], z["sid"]
    rng = np.random.default_rng(seed)
    _, start, per_word = np.unique(wid, return_index=True, return_counts=True)
    keep = per_word >= 3
    picks = [sid[a + rng.integers(n)] for a, n in zip(start[keep], per_word[keep], strict=True)]
    return np.asarray(picks, dtype=np.int64)


def part_moments(part_urls: list[str], step1_url: str, chosen: np.ndarray) -> PCAStats:
    """PCA statistics of the chosen sentences of some selection parts (run as a task)."""
    model = StaticModel.load(step1_url)
    total = PCAStats(0, 0.0, 0.0)
    for url in part_urls:
        t = storage.read_parquet(url, ["sid", "text"])
        keep = np.isin(t.column("sid").to_numpy(), chosen)
        texts = [x for x, k in zip(t.column("text").to_pylist(), keep, strict=True) if k]
        if texts:
            x = model.encode(texts, normalize=False)
            total = total + PCAStats.of(x[np.abs(x).sum(axis=1) > 0])
    return total


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
