"""Evaluation: metrics, tasks and the encoders they run on (numpy only; baselines on demand).

An *encoder* is anything with ``encode(list[str]) -> np.ndarray``. :func:`load_encoder` turns a
spec into one: a ``StaticModel``/``EnsembleModel`` path, ``teacher:DIR`` (or ``teacher:minilm``),
``model2vec:DIR``, ``gem:DIR`` (GEM pooling over a StaticModel's vectors), or a named baseline
(``potion-base-8m``, ``wordllama-256``, ``glove-50d``, ``use-multilingual``).
"""

from __future__ import annotations

import copy
import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

__all__ = ["Encoder", "load_encoder", "macro_f1", "read_sts", "read_tatoeba", "spearman", "sts",
           "tatoeba", "top_k"]


class Encoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...


# -- metrics -------------------------------------------------------------------------------------


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x, y) -> float:
    """Spearman's rank correlation (Pearson of average ranks, so ties are handled)."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("spearman needs two sequences of the same length >= 2")
    rx, ry = _ranks(x), _ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    den = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / den) if den else 0.0


def macro_f1(gold, pred) -> float:
    """Macro-averaged F1 over every label in ``gold`` or ``pred`` (sklearn's default, as MTEB's
    bitext-mining F1 uses it)."""
    gold, pred = np.asarray(gold), np.asarray(pred)
    labels = np.union1d(gold, pred)
    scores = []
    for c in labels:
        tp = np.sum((pred == c) & (gold == c))
        fp = np.sum((pred == c) & (gold != c))
        fn = np.sum((pred != c) & (gold == c))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores))


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


def top_k(queries: np.ndarray, keys: np.ndarray, k: int, block: int = 4096
          ) -> tuple[np.ndarray, np.ndarray]:
    """Cosine top-``k`` keys per query, ``(scores [q, k], indices [q, k])`` best first, computed
    in blocks of queries × keys so no ``q × n`` matrix is ever held (memory ~ block²)."""
    q, kk = _normalise(queries), _normalise(keys)
    k = min(k, len(kk))
    best_s = np.full((len(q), k), -np.inf, np.float32)
    best_i = np.zeros((len(q), k), np.int64)
    for a in range(0, len(q), block):
        qs = q[a:a + block]
        cur_s, cur_i = best_s[a:a + block], best_i[a:a + block]
        for b in range(0, len(kk), block):
            sims = qs @ kk[b:b + block].T
            if sims.shape[1] > k:  # this block's own top k first: no [q, block] index array
                part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
                sims, idx = np.take_along_axis(sims, part, 1), part + b
            else:
                idx = np.broadcast_to(np.arange(b, b + sims.shape[1]), sims.shape)
            both_s = np.concatenate([cur_s, sims], axis=1)
            both_i = np.concatenate([cur_i, idx], axis=1)
            sel = np.argpartition(-both_s, k - 1, axis=1)[:, :k]
            cur_s = np.take_along_axis(both_s, sel, 1)
            cur_i = np.take_along_axis(both_i, sel, 1)
        order = np.lexsort((cur_i, -cur_s), axis=1)  # best score first, ties by index
        best_s[a:a + block] = np.take_along_axis(cur_s, order, 1)
        best_i[a:a + block] = np.take_along_axis(cur_i, order, 1)
    return best_s, best_i


# -- tasks ----------------------------------------------------------------------------------------


def read_sts(path: str | os.PathLike) -> tuple[list[str], list[str], np.ndarray]:
    """An STS file (TSV or CSV) with ``sentence1``, ``sentence2`` and ``score`` columns."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"STS file not found: {path}")
    delim = "," if path.suffix.lower() == ".csv" else "\t"
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter=delim,
                                quoting=csv.QUOTE_MINIMAL if delim == "," else csv.QUOTE_NONE)
        missing = {"sentence1", "sentence2", "score"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: missing column(s) {sorted(missing)}; the header is "
                             f"{reader.fieldnames}")
        a, b, s = [], [], []
        for line, row in enumerate(reader, start=2):
            try:
                s.append(float(row["score"]))
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{line}: score {row['score']!r} is not a number") from None
            a.append(row["sentence1"] or "")
            b.append(row["sentence2"] or "")
    if len(s) < 2:
        raise ValueError(f"{path}: fewer than 2 rows")
    return a, b, np.asarray(s)


def sts(encoder: Encoder, path: str | os.PathLike) -> float:
    """Spearman × 100 between cosine similarity and the gold scores. An encoder with a ``fit``
    method (GEM) is first fitted on both columns' sentences, as its authors evaluate it."""
    a, b, gold = read_sts(path)
    if hasattr(encoder, "fit"):  # on a copy: later tasks must not reuse these directions
        encoder = copy.copy(encoder).fit(a + b)
    ea, eb = _normalise(encoder.encode(a)), _normalise(encoder.encode(b))
    return 100 * spearman((ea * eb).sum(1), gold)


def read_tatoeba(lang: str, root: str | os.PathLike) -> tuple[list[str], list[str]]:
    """The aligned ``lang`` and English sentences of ``tatoeba.{lang}-eng.*`` under ``root``."""
    root = Path(root)
    files = [root / f"tatoeba.{lang}-eng.{lang}", root / f"tatoeba.{lang}-eng.eng"]
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"Tatoeba file not found: {f}")
    xs, en = (f.read_text(encoding="utf-8").rstrip("\n").split("\n") for f in files)
    if len(xs) != len(en):
        raise ValueError(f"{files[0]} and {files[1]} differ in length")
    return xs, en


def tatoeba(encoder: Encoder, lang: str, root: str | os.PathLike) -> dict[str, float]:
    """Tatoeba translation retrieval for ``lang``-eng: nearest neighbour by cosine in both
    directions; accuracy × 100 each way and MTEB's F1 (``lang`` → eng, macro) × 100."""
    xs, en = read_tatoeba(lang, root)
    ex, ee = encoder.encode(xs), encoder.encode(en)
    gold = np.arange(len(xs))
    x2e = top_k(ex, ee, 1)[1][:, 0]
    e2x = top_k(ee, ex, 1)[1][:, 0]
    acc_x2e, acc_e2x = 100 * float(np.mean(x2e == gold)), 100 * float(np.mean(e2x == gold))
    return {"acc": (acc_x2e + acc_e2x) / 2, f"acc_{lang}_eng": acc_x2e,
            f"acc_eng_{lang}": acc_e2x, "f1": 100 * macro_f1(gold, x2e)}


# -- encoders -------------------------------------------------------------------------------------


@dataclass
class TeacherEncoder:
    """A teacher with its own pooling and prefix (``swe.teacher``), batched, CPU or GPU."""

    path: str
    batch_size: int = 128
    threads: int | None = None

    def __post_init__(self) -> None:
        from swe.teacher import Teacher

        self.teacher = Teacher(self.path, threads=self.threads)

    def encode(self, texts: list[str]) -> np.ndarray:
        from swe.stages.extraction import length_batches

        texts = list(texts)
        out = np.zeros((len(texts), self.teacher.dim), np.float32)
        lengths = np.array([len(t) for t in texts]) // 3 + 1
        for idx in length_batches(lengths, budget=self.batch_size * 64):
            out[idx] = self.teacher.embed([texts[i] for i in idx])
        return out


@dataclass
class _Adapter:
    """An encoder from any ``texts -> array`` function (e.g. WordLlama's ``embed``)."""

    fn: object

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.fn(list(texts)), dtype=np.float32)


def load_encoder(spec: str) -> Encoder:
    """An encoder from a spec (see the module docstring)."""
    kind, _, arg = spec.partition(":")
    if kind == "teacher" and arg:
        from swe.config import BuildConfig

        return TeacherEncoder(BuildConfig(teacher=arg).teacher_dir())
    if kind == "model2vec" and arg:
        from model2vec import StaticModel as M2V

        return M2V.from_pretrained(arg)
    if spec == "potion-base-8m":
        from model2vec import StaticModel as M2V

        from swe.baselines import potion_base_8m_dir

        return M2V.from_pretrained(str(potion_base_8m_dir()))
    if spec == "wordllama-256":
        from swe.baselines import wordllama_256

        return _Adapter(wordllama_256().embed)
    if kind == "gem" and arg:
        from swe.gem import GEMEncoder
        from swe.model import StaticModel

        return GEMEncoder(StaticModel.load(arg))
    if spec == "use-multilingual":
        from swe.baselines import use_multilingual

        return _Adapter(use_multilingual().encode)
    if spec == "glove-50d":
        from swe.baselines import glove_50d

        return glove_50d()
    from swe import storage

    if storage.is_local(spec) and not os.path.isdir(spec):
        raise FileNotFoundError(f"model not found: {spec} (a model dir, teacher:DIR, "
                                "model2vec:DIR, gem:DIR, potion-base-8m, wordllama-256, glove-50d "
                                "or use-multilingual)")
    fs, path = storage.filesystem(storage.join(spec, "ensemble.json"))
    if fs.exists(path):
        from swe.ensemble import EnsembleModel

        return EnsembleModel.load(spec)
    from swe.model import StaticModel

    return StaticModel.load(spec)
