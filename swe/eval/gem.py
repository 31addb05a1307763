"""GEM pooling (Yang, Zhu & Chen 2019, "Parameter-free Sentence Embedding via Orthogonal Basis").

A training-free alternative to mean pooling over any :class:`~swe.model.StaticModel`'s word
vectors, following the authors' ``code/encoder.py`` (github.com/ziyi-yang/GEM):

1. *Coarse sentence embeddings*: for each sentence's ``d × n`` word matrix ``A = U Σ Vᵀ``,
   ``g = Σ_k σ_k^t u_k`` (``t = 3``).
2. *Corpus principal directions*: the top ``K = components`` left singular vectors ``C`` (and
   singular values ``s``) of the ``d × N`` matrix of coarse embeddings of a corpus.
3. *Sentence-dependent selection*: per sentence, the ``r = top`` directions with the largest
   ``s_k · ‖Aᵀ c_k‖``; they are removed from every word vector of the sentence.
4. *Word weights* from the window of ``m = window`` words either side: Gram-Schmidt on
   ``[context, w]`` gives the residual ``q·ρ`` of ``w`` orthogonal to its context; the weight is
   novelty ``exp(ρ/‖w‖)`` + significance ``‖σ ⊙ qᵀU‖/l`` (= ``ρ/l`` exactly, ``l`` the window's
   column count) + uniqueness ``exp(-‖s_sel ⊙ C_selᵀ q‖ / r)``.
5. The sentence vector is ``Σ_i weight_i · (w_i − C_sel C_selᵀ w_i)``, L2-normalised.

As in the reference, the corpus of step 2 is the set of sentences being encoded:
:meth:`GEMEncoder.encode` computes it over its own ``texts`` unless :meth:`GEMEncoder.fit` was
called, whose directions are then reused (the reference fits on both sides of an STS set).

Deviation: the sign of each singular vector in step 1 is arbitrary (LAPACK's choice in the
reference); here it is fixed so that the largest-magnitude entry of the right singular vector
is positive (sklearn's ``svd_flip``), which makes the encoder deterministic and equivariant
under rotations of the embedding space. Everything is numpy, vectorised over all words.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from swe.model import StaticModel

__all__ = ["EPS", "GEMEncoder", "coarse_embedding", "window_residuals"]

EPS = 5e-7  # the reference's Gram-Schmidt threshold: a smaller residual norm counts as zero
_CHUNK = 2048  # words whose windows are orthogonalised at once


def coarse_embedding(mats: np.ndarray, t: float = 3.0) -> np.ndarray:
    """``Σ_k σ_k^t u_k`` per word matrix: ``mats`` is ``[B, n, d]`` (rows are words) or one
    ``[n, d]`` matrix; returns ``[B, d]`` (or ``[d]``). The reference's ``svd_sv``, with each
    ``u_k``'s sign fixed so that the largest-magnitude entry of ``A u_k`` is positive."""
    a = np.asarray(mats, dtype=np.float64)
    if a.ndim == 2:
        return coarse_embedding(a[None], t)[0]
    if a.shape[1] == 0:
        return np.zeros((a.shape[0], a.shape[2]))
    _, s, vt = np.linalg.svd(a, full_matrices=False)  # rows of vt: the reference's u_k
    ws = a @ np.swapaxes(vt, 1, 2)  # [B, n, k]: σ_k times the word-space singular vectors
    pick = np.abs(ws).argmax(axis=1)
    sign = np.sign(np.take_along_axis(ws, pick[:, None, :], axis=1)[:, 0])
    sign[sign == 0] = 1.0
    return np.einsum("bk,bkd->bd", s**t * sign, vt)


def window_residuals(windows: np.ndarray) -> np.ndarray:
    """Residual of each window's last column (the word) orthogonal to the span of its other
    columns (the context; all-zero columns are padding): what the reference's Gram-Schmidt
    leaves in ``q[:, -1] · r[-1, -1]``.

    ``windows``: ``[B, L, d]``; returns ``[B, d]`` float64. The projection uses the context's
    Gram matrix (pseudo-inverse: directions with singular value below :data:`EPS`, or 1e-6 of
    the largest, count as absent, like the reference's dropped columns), applied twice so the
    residual is orthogonal to working precision.
    """
    a = np.asarray(windows, dtype=np.float64)
    ctx, w = a[:, :-1], a[:, -1]
    if ctx.shape[1] == 0:
        return w.copy()
    lam, vec = np.linalg.eigh(ctx @ np.swapaxes(ctx, 1, 2))  # [B, c], [B, c, c]
    floor = np.maximum(EPS**2, 1e-12 * lam[:, -1:])
    inv = np.divide(1.0, lam, out=np.zeros_like(lam), where=lam > floor)
    pinv = (vec * inv[:, None, :]) @ np.swapaxes(vec, 1, 2)  # [B, c, c]
    r = w
    for _ in range(2):
        coef = pinv @ (ctx @ r[:, :, None])  # [B, c, 1]
        r = r - (np.swapaxes(ctx, 1, 2) @ coef)[:, :, 0]
    return r


class GEMEncoder:
    """GEM sentence encoder over a :class:`StaticModel`'s word vectors.

    ``window`` (m), ``components`` (K), ``top`` (r) and ``t`` are the paper's hyperparameters.
    ``basis``/``sigma`` hold the corpus principal directions ``[d, K]`` and their singular values
    after :meth:`fit`; ``None`` until then.
    """

    def __init__(self, model: StaticModel, window: int = 7, components: int = 45,
                 top: int = 17, t: float = 3.0) -> None:
        for name, value in (("window", window), ("components", components), ("top", top)):
            least = 0 if name == "window" else 1
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        self.model = model
        self.window = window
        self.components = components
        self.top = top
        self.t = float(t)
        self.basis: np.ndarray | None = None
        self.sigma: np.ndarray | None = None

    def __repr__(self) -> str:
        return (f"GEMEncoder(dim={self.model.dim}, window={self.window}, "
                f"components={self.components}, top={self.top}, t={self.t}, "
                f"fitted={self.basis is not None})")

    # -- corpus directions ----------------------------------------------------------------------

    def _words(self, texts: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
        """All word vectors (float64, ``[T, d]``) and the number of words per text."""
        ids = self.model.word_ids(texts)
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        return self.model.vectors[flat].astype(np.float64), lengths

    def _coarse(self, vecs: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Coarse embeddings ``[N, d]``: one batched SVD per distinct sentence length."""
        d = vecs.shape[1]
        out = np.zeros((len(lengths), d))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        for n in np.unique(lengths[lengths > 0]):
            rows = np.flatnonzero(lengths == n)
            for a in range(0, len(rows), 4096):
                sel = rows[a:a + 4096]
                mats = vecs[starts[sel][:, None] + np.arange(n)]  # [B, n, d]
                out[sel] = coarse_embedding(mats, self.t)
        return out

    def _directions(self, vecs: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = self._coarse(vecs, lengths)
        g = g[lengths > 0]
        if len(g) == 0:
            return np.zeros((vecs.shape[1], 0)), np.zeros(0)
        # Left singular vectors of the [d, N] matrix gᵀ = eigenvectors of g.T @ g (d × d).
        lam, vec = np.linalg.eigh(g.T @ g)
        k = min(self.components, len(g), len(lam))
        return vec[:, ::-1][:, :k].copy(), np.sqrt(np.maximum(lam[::-1][:k], 0.0))

    def fit(self, texts: Sequence[str | None]) -> GEMEncoder:
        """Compute the corpus principal directions on ``texts`` once; :meth:`encode` reuses them."""
        self.basis, self.sigma = self._directions(*self._words(list(texts)))
        return self

    # -- encoding -------------------------------------------------------------------------------

    def encode(self, texts: Sequence[str | None], **_: object) -> np.ndarray:
        """L2-normalised float32 ``[n, d]`` GEM embeddings; zero rows for texts with no known
        word. Uses the fitted directions, else computes them over ``texts`` (not stored)."""
        texts = list(texts)
        vecs, lengths = self._words(texts)
        if self.basis is not None:
            basis, sigma = self.basis, self.sigma
        else:
            basis, sigma = self._directions(vecs, lengths)
        return self._pool(vecs, lengths, basis, sigma)

    def _select(self, vecs: np.ndarray, lengths: np.ndarray, basis: np.ndarray,
                sigma: np.ndarray) -> np.ndarray:
        """Per text, a 0/1 mask ``[N, K]`` of its ``top`` directions by ``s_k · ‖Aᵀ c_k‖``."""
        n, k = len(lengths), basis.shape[1]
        mask = np.zeros((n, k))
        if k == 0 or vecs.shape[0] == 0:
            return mask
        seg = np.repeat(np.arange(n), lengths)
        sq = np.zeros((n, k))
        np.add.at(sq, seg, (vecs @ basis) ** 2)
        score = np.sqrt(sq) * sigma
        r = min(self.top, k)
        top = np.argsort(score, axis=1)[:, -r:]
        np.put_along_axis(mask, top, 1.0, axis=1)
        return mask

    def _windows(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per word, the row ids of ``[left context, right context, word]`` (``T`` = padding,
        the zero row) and the reference's ``l_win`` (columns in the window)."""
        total = int(lengths.sum())
        seg = np.repeat(np.arange(len(lengths)), lengths)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[seg]
        pos = np.arange(total) - starts  # index within the sentence
        m = self.window
        offsets = np.concatenate([np.arange(-m, 0), np.arange(1, m + 1), [0]])
        local = pos[:, None] + offsets
        valid = (local >= 0) & (local < lengths[seg][:, None])
        idx = np.where(valid, np.arange(total)[:, None] + offsets, total)
        return idx, valid.sum(axis=1)

    def _pool(self, vecs: np.ndarray, lengths: np.ndarray, basis: np.ndarray,
              sigma: np.ndarray) -> np.ndarray:
        n, d = len(lengths), self.model.dim
        out = np.zeros((n, d), dtype=np.float32)
        total = vecs.shape[0]
        if total == 0:
            return out
        mask = self._select(vecs, lengths, basis, sigma)
        seg = np.repeat(np.arange(n), lengths)
        weights = self.word_weights(vecs, lengths, basis, sigma, mask, seg)
        sums = np.zeros((n, d))
        np.add.at(sums, seg, weights[:, None] * vecs)
        proj = (sums @ basis) * mask  # remove the selected directions
        sums -= proj @ basis.T
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        np.divide(sums, norms, out=sums, where=norms > 0)
        sums[(norms[:, 0] <= 0) | (lengths == 0)] = 0.0
        out[:] = sums
        return out

    def word_weights(self, vecs: np.ndarray, lengths: np.ndarray, basis: np.ndarray,
                     sigma: np.ndarray, mask: np.ndarray, seg: np.ndarray) -> np.ndarray:
        """GEM weight of every word: novelty + significance + uniqueness (reference ``ngram``)."""
        total, d = vecs.shape
        idx, l_ctx = self._windows(lengths)
        padded = np.vstack([vecs, np.zeros((1, d))])
        resid = np.empty_like(vecs)
        for a in range(0, total, _CHUNK):
            resid[a:a + _CHUNK] = window_residuals(padded[idx[a:a + _CHUNK]])
        rho = np.linalg.norm(resid, axis=1)
        keep = rho >= EPS
        rho = np.where(keep, rho, 0.0)
        q = np.divide(resid, rho[:, None], out=np.zeros_like(resid), where=keep[:, None])
        norm = np.linalg.norm(vecs, axis=1)
        novelty = np.exp(np.divide(rho, norm, out=np.zeros_like(rho), where=norm > 0))
        significance = rho / np.minimum(d, l_ctx)  # = ‖σ ⊙ qᵀU‖ / l_win of the window's SVD
        n_sel = np.maximum(mask.sum(axis=1), 1)[seg]
        spread = np.linalg.norm((q @ basis) * sigma * mask[seg], axis=1)
        uniqueness = np.exp(-spread / n_sel)
        return novelty + significance + uniqueness
