"""Bitext mining (BUCC-style): find the translation pairs hidden among distractor sentences.

Scoring is Artetxe & Schwenk's (2019) ratio margin over k nearest neighbours,

    margin(x, y) = cos(x, y) / (mean_{NN_k(x)} cos(x, z) / 2 + mean_{NN_k(y)} cos(y, z) / 2),

candidates are each sentence's best-margin neighbour in both directions ("max" retrieval: the
union, best score first, each sentence used at most once), and a pair is predicted when its margin
clears a threshold tuned for F1 on a dev split. Every similarity goes through the blocked
:func:`swe.eval.metrics.top_k`, so memory stays ~block² however many sentences a side has.

:func:`bucc` builds the task from aligned test pairs (e.g. Tatoeba) plus distractors drawn from
monolingual corpora, halves the pairs into dev and test, and reports test F1 at the dev threshold.
"""

from __future__ import annotations

import lzma
import os
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from swe.eval.data import TATOEBA, WIKIPEDIA, data_root
from swe.eval.encoders import Encoder
from swe.eval.metrics import top_k
from swe.eval.retrieval import read_tatoeba

__all__ = ["DISTRACTOR_CORPORA", "best_threshold", "bucc", "bucc_tatoeba", "f1_at",
           "margin_candidates", "mine_task", "read_distractors"]


def margin_candidates(x: np.ndarray, y: np.ndarray, k: int = 4, block: int = 4096
                      ) -> list[tuple[int, int, float]]:
    """Mined ``(i, j, margin)`` pairs, best first, one-to-one, from sentence embeddings ``x`` and
    ``y`` (any scale: cosine is used)."""
    if len(x) == 0 or len(y) == 0:
        return []
    k = max(1, min(k, len(x), len(y)))
    sxy, ixy = top_k(x, y, k, block)  # x's neighbours in y
    syx, iyx = top_k(y, x, k, block)  # y's neighbours in x
    mx, my = sxy.mean(1), syx.mean(1)  # each sentence's neighbourhood density
    fwd, bwd = _ratio(sxy, (mx[:, None] + my[ixy]) / 2), _ratio(syx, (my[:, None] + mx[iyx]) / 2)
    bf, bb = fwd.argmax(1), bwd.argmax(1)
    rx, ry = np.arange(len(x)), np.arange(len(y))
    cands = list(zip(rx.tolist(), ixy[rx, bf].tolist(), fwd[rx, bf].tolist(), strict=True))
    cands += list(zip(iyx[ry, bb].tolist(), ry.tolist(), bwd[ry, bb].tolist(), strict=True))
    cands.sort(key=lambda c: (-c[2], c[0], c[1]))
    used_x, used_y, out = set(), set(), []
    for i, j, s in cands:
        if i not in used_x and j not in used_y:
            used_x.add(i)
            used_y.add(j)
            out.append((i, j, s))
    return out


def _ratio(score: np.ndarray, density: np.ndarray) -> np.ndarray:
    """The margin ``score / density``; -inf (never mined) where both are 0: a sentence with no
    vector (every word unknown) and neighbours of its kind, where the ratio is undefined."""
    return np.divide(score, density, out=np.full_like(score, -np.inf), where=density != 0)


def f1_at(candidates: Sequence[tuple[int, int, float]], gold: set[tuple[int, int]],
          threshold: float) -> dict[str, float]:
    """Precision, recall and F1 (× 100) of the candidates scoring ``>= threshold``."""
    pred = [(i, j) for i, j, s in candidates if s >= threshold]
    tp = sum(p in gold for p in pred)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(gold) if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": 100 * p, "recall": 100 * r, "f1": 100 * f}


def best_threshold(candidates: Sequence[tuple[int, int, float]], gold: set[tuple[int, int]]
                   ) -> tuple[float, float]:
    """``(threshold, F1 × 100)`` maximising F1: a threshold at each candidate's score, swept in
    one pass over the candidates sorted best first."""
    best_t, best_f, tp = float("inf"), 0.0, 0
    ranked = sorted(candidates, key=lambda c: -c[2])
    for n, (i, j, s) in enumerate(ranked, start=1):
        tp += (i, j) in gold
        if n < len(ranked) and ranked[n][2] == s:
            continue  # a threshold keeps every candidate with this score
        f = 2 * tp / (n + len(gold)) if gold else 0.0
        if f > best_f:
            best_t, best_f = s, f
    return best_t, 100 * best_f


def mine_task(encoder: Encoder, src: list[str], tgt: list[str], k: int = 4
              ) -> list[tuple[int, int, float]]:
    """Encode both sides and mine them (see :func:`margin_candidates`)."""
    return margin_candidates(encoder.encode(src), encoder.encode(tgt), k)


def read_distractors(path: str | os.PathLike, n: int, exclude: set[str], lengths: tuple[int, int],
                     seed: int = 0, scan: int | None = 400_000) -> list[str]:
    """``n`` random distinct sentences (one per line; ``.xz`` read transparently) from the first
    ``scan`` lines (``None``: all) of ``path`` whose character length lies in ``lengths`` and
    that are not in ``exclude`` (the gold sentences)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"distractor corpus not found: {path}")
    opener = lzma.open if path.suffix == ".xz" else open
    lo, hi = lengths
    pool: list[str] = []
    seen: set[str] = set()
    with opener(path, "rt", encoding="utf-8") as f:
        for count, line in enumerate(f):
            if scan is not None and count >= scan:
                break
            s = line.strip()
            if lo <= len(s) <= hi and s not in exclude and s not in seen:
                seen.add(s)
                pool.append(s)
    random.Random(seed).shuffle(pool)
    return pool[:n]


def _split(pairs: list[tuple[str, str]], dist_x: list[str], dist_y: list[str], seed: int
           ) -> tuple[list[str], list[str], set[tuple[int, int]]]:
    """One mining instance: both sides shuffled, gold = positions of the aligned pairs."""
    rng = random.Random(seed)
    xs = [p[0] for p in pairs] + dist_x
    ys = [p[1] for p in pairs] + dist_y
    ox, oy = list(range(len(xs))), list(range(len(ys)))
    rng.shuffle(ox)
    rng.shuffle(oy)
    px, py = {o: n for n, o in enumerate(ox)}, {o: n for n, o in enumerate(oy)}
    gold = {(px[i], py[i]) for i in range(len(pairs))}
    return [xs[o] for o in ox], [ys[o] for o in oy], gold


def bucc(encoder: Encoder, pairs: list[tuple[str, str]], distractors_x: list[str],
         distractors_y: list[str], k: int = 4, seed: int = 0) -> dict[str, float]:
    """BUCC-style mining: ``pairs`` (aligned, e.g. a held-out test set) are shuffled and halved
    into dev and test; each half is hidden among half of the distractors of each side; the
    margin threshold that maximises dev F1 is applied to test. Returns test F1/precision/recall
    × 100, the dev F1 and threshold, and the sizes."""
    if len(pairs) < 4:
        raise ValueError("bitext mining needs at least 4 aligned pairs")
    rng = random.Random(seed)
    pairs = list(pairs)
    rng.shuffle(pairs)
    h, hx, hy = len(pairs) // 2, len(distractors_x) // 2, len(distractors_y) // 2
    dev = _split(pairs[:h], distractors_x[:hx], distractors_y[:hy], seed + 1)
    test = _split(pairs[h:], distractors_x[hx:], distractors_y[hy:], seed + 2)
    threshold, dev_f1 = best_threshold(mine_task(encoder, dev[0], dev[1], k), dev[2])
    result = f1_at(mine_task(encoder, test[0], test[1], k), test[2], threshold)
    return {**result, "dev_f1": dev_f1, "threshold": threshold, "gold": len(test[2]),
            "sentences_x": len(test[0]), "sentences_y": len(test[1])}


#: Monolingual corpora in the shared data dir that distractors are drawn from, per Tatoeba code.
DISTRACTOR_CORPORA = {
    "eng": f"{WIKIPEDIA}/enwiki_sents.00.txt.xz",
    "deu": "corpora/other_mono/de_10kGNAD_test_sents.txt.xz",
    "cmn": "corpora/other_mono/zh_wikipedia_sents.txt.xz",
    "jpn": "corpora/other_mono/ja_wikinews_sents.txt.xz",
}


def bucc_tatoeba(encoder: Encoder, lang: str, data: str | os.PathLike | None = None,
                 distractors: int = 20_000, k: int = 4, seed: int = 0,
                 scan: int | None = 400_000, length_window: bool = True) -> dict[str, float]:
    """:func:`bucc` on the Tatoeba ``lang``-eng test pairs (held out from every build) hidden
    among up to ``distractors`` sentences per side from :data:`DISTRACTOR_CORPORA`, drawn within
    the 5th–95th percentile of the gold sentences' lengths so length alone gives nothing away
    (from each corpus file's first ``scan`` lines; ``None`` for all). ``length_window=False``
    draws distractors of any length. ``data`` defaults to :func:`~swe.eval.data.data_root`."""
    if lang not in DISTRACTOR_CORPORA:
        raise ValueError(f"no distractor corpus for {lang!r}; one of "
                         f"{', '.join(sorted(set(DISTRACTOR_CORPORA) - {'eng'}))}")
    data = Path(data or data_root())
    xs, en = read_tatoeba(lang, data / TATOEBA)
    sides = []
    for code, gold in ((lang, xs), ("eng", en)):
        lo, hi = np.percentile([len(s) for s in gold], [5, 95]) if length_window else (1, 10**9)
        sides.append(read_distractors(data / DISTRACTOR_CORPORA[code], distractors,
                                      set(gold), (int(lo), int(hi)), seed, scan))
    result = bucc(encoder, list(zip(xs, en, strict=True)), sides[0], sides[1], k, seed)
    return {**result, "distractors_x": len(sides[0]), "distractors_y": len(sides[1])}
