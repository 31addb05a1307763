"""Ensembles of static models (Wada et al. 2025, Appendix D).

E(z) = [a₁·f(E₁(z)), …, a_L·f(E_L(z))] / sqrt(Σ aᵢ²), f = L2 normalisation, so the cosine of
two ensemble vectors is the weighted mean of the members' cosines (weights aᵢ²/Σaⱼ²).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from swe import storage
from swe.model import StaticModel
from swe.modelfiles import ModelFileError, ModelFolder, invalidate, write_folder

__all__ = ["EnsembleModel"]

FORMAT = "swe-ensemble"
ENSEMBLE = "ensemble.json"
MAX_MEMBERS = 64


class EnsembleModel:
    """Concatenation of weighted, normalised member embeddings; same ``encode`` API."""

    def __init__(self, models: Sequence[StaticModel], weights: Sequence[float] | None = None):
        models = list(models)
        if not models:
            raise ValueError("an ensemble needs at least one model")
        if len(models) > MAX_MEMBERS:  # what load accepts, so a save loads again
            raise ValueError(f"an ensemble takes at most {MAX_MEMBERS} models, got {len(models)}")
        weights = [1.0] * len(models) if weights is None else list(weights)
        if not all(isinstance(w, int | float | np.number) and not isinstance(w, bool)
                   for w in weights):  # NaN in a JSON file is read back as None
            raise ValueError(f"weights must be positive and finite numbers, got {weights} (a NaN "
                             "in a JSON file is read back as None)")
        weights = [float(w) for w in weights]
        if len(weights) != len(models):
            raise ValueError(f"{len(weights)} weights for {len(models)} models")
        if not all(np.isfinite(w) and w > 0 for w in weights):
            raise ValueError(f"weights must be positive and finite, got {weights}")
        self.models = models
        self.weights = weights
        w = np.asarray(weights, dtype=np.float64) / max(weights)  # no square over/underflows
        self._scale = (w / np.sqrt(np.sum(np.square(w)))).astype(np.float32)

    @property
    def dim(self) -> int:
        """Sum of the members' dimensions."""
        return sum(m.dim for m in self.models)

    def encode(self, texts: str | Iterable[str | None], batch_size: int = 1024) -> np.ndarray:
        """Embed texts: ``[n, Σdᵢ]`` float32; unit norm when every member knows a word."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts) if texts is not None else None
        parts = [s * m.encode(texts, batch_size) for s, m in zip(self._scale, self.models,
                                                                  strict=True)]
        out = np.concatenate(parts, axis=1)
        return out[0] if single else out

    def save(self, path: str | os.PathLike) -> None:
        """Members under ``member_<i>/``, then the weights in ``ensemble.json`` (removed first,
        so an interrupted save leaves a folder that refuses to load)."""
        path = os.fspath(path)
        invalidate(storage.join(path, ENSEMBLE))
        for i, m in enumerate(self.models):
            m.save(storage.join(path, f"member_{i}"))
        meta = {"format": FORMAT, "format_version": 1, "members": len(self.models),
                "weights": self.weights}
        write_folder(path, {}, meta, ENSEMBLE)

    @classmethod
    def load(cls, path: str | os.PathLike) -> EnsembleModel:
        """Load an ensemble written by :meth:`save`; errors name the file at fault."""
        folder = ModelFolder(os.fspath(path), FORMAT, 1, ENSEMBLE)
        n = folder.get("members", int)
        if not 1 <= n <= MAX_MEMBERS:
            raise ModelFileError(f"{folder.config_path}: members = {n} should be 1 to "
                                 f"{MAX_MEMBERS}")
        weights = folder.get("weights", list)
        models = [StaticModel.load(storage.join(folder.path, f"member_{i}")) for i in range(n)]
        try:
            return cls(models, weights)
        except (TypeError, ValueError) as e:
            raise ModelFileError(f"{folder.config_path}: {e}") from None
