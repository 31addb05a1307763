"""Metrics: Spearman's ρ, macro F1, and a blocked cosine top-k (numpy only)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["l2_normalise", "macro_f1", "spearman", "top_k"]


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


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation (Pearson of average ranks, so ties are handled). Undefined,
    and a ``ValueError`` saying so, where either sequence is constant or holds NaN."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1 or len(x) != len(y) or len(x) < 2:
        raise ValueError("spearman needs two 1-D sequences of the same length >= 2, got shapes "
                         f"{x.shape} and {y.shape}")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("spearman is undefined: the scores hold NaN")
    rx, ry = _ranks(x), _ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    den = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    if not den:
        raise ValueError(f"spearman is undefined: {'the first' if not rx.any() else 'the second'}"
                         f" sequence is constant (all {len(x)} values equal)")
    return float((rx * ry).sum() / den)


def macro_f1(gold: Sequence | np.ndarray, pred: Sequence | np.ndarray) -> float:
    """Macro-averaged F1 over every label in ``gold`` or ``pred`` (sklearn's default, as MTEB's
    bitext-mining F1 uses it)."""
    gold, pred = np.asarray(gold), np.asarray(pred)
    if len(gold) != len(pred) or not len(gold):
        raise ValueError(f"macro F1 needs as many predictions as gold labels, at least one; got "
                         f"{len(pred)} and {len(gold)}")
    labels = np.union1d(gold, pred)
    scores = []
    for c in labels:
        tp = np.sum((pred == c) & (gold == c))
        fp = np.sum((pred == c) & (gold != c))
        fn = np.sum((pred != c) & (gold == c))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores))


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` as float32 unit vectors; zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


def top_k(queries: np.ndarray, keys: np.ndarray, k: int, block: int = 4096
          ) -> tuple[np.ndarray, np.ndarray]:
    """Cosine top-``k`` keys per query, ``(scores [q, k], indices [q, k])`` best first, computed
    in blocks of queries × keys so no ``q × n`` matrix is ever held (memory ~ block²)."""
    q, kk = l2_normalise(queries), l2_normalise(keys)
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
