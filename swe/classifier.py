"""StaticClassifier: a fine-tuned static model and its head (``swe finetune``), in numpy only.

A classifier folder is a model folder (the fine-tuned table: ``StaticModel.load`` reads it)
plus ``head.safetensors`` and ``classifier.json`` (the labels, single- or multi-label, the
layers), checksummed like the model's own files. ``predict_proba`` is the head on ``encode``'s
vectors: softmax over the labels, or one sigmoid per label for a multi-label head.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from swe.model import StaticModel
from swe.modelfiles import ModelFileError, ModelFolder

__all__ = ["CLASSIFIER", "CLASSIFIER_FORMAT", "StaticClassifier"]

CLASSIFIER = "classifier.json"
CLASSIFIER_FORMAT = "swe-classifier"


class StaticClassifier:
    """A :class:`StaticModel` and a linear or one-hidden-layer head over its sentence vectors."""

    def __init__(self, model: StaticModel, labels: list[str], layers: list[tuple[np.ndarray,
                 np.ndarray]], multi_label: bool = False) -> None:
        if len(layers) not in (1, 2) or layers[-1][0].shape[0] != len(labels):
            raise ValueError("a head is 1 or 2 layers whose last has one row per label")
        self.model, self.labels, self.layers = model, list(labels), layers
        self.multi_label = bool(multi_label)

    @classmethod
    def load(cls, path: str | os.PathLike) -> StaticClassifier:
        """Load a folder written by ``swe finetune`` (local or ``s3://``), every file checked."""
        from safetensors.numpy import load as st_load

        path = os.fspath(path)
        try:
            folder = ModelFolder(path, fmt=CLASSIFIER_FORMAT, version=1, config_name=CLASSIFIER)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path} is not a classifier: it has no {CLASSIFIER} (make "
                                    "one with swe finetune)") from None
        tensors = st_load(folder.read("head.safetensors", "head"))
        n = folder.get("layers", int)
        try:
            layers = [(tensors[f"w{i}"].astype(np.float32), tensors[f"b{i}"].astype(np.float32))
                      for i in range(n)]
            return cls(StaticModel.load(path), folder.get("labels", list), layers,
                       folder.get("multi_label", bool))
        except (KeyError, ValueError) as e:
            raise ModelFileError(f"{path}/head.safetensors does not hold the {n}-layer head its "
                                 f"{CLASSIFIER} describes ({e}); train it again") from None

    def logits(self, texts: Iterable[str | None]) -> np.ndarray:
        """``[n, labels]`` float32 logits."""
        x = self.model.encode(list(texts))
        for i, (w, b) in enumerate(self.layers):
            x = x @ w.T + b
            if i < len(self.layers) - 1:
                np.maximum(x, 0, out=x)
        return x

    def predict_proba(self, texts: Iterable[str | None]) -> np.ndarray:
        """``[n, labels]`` probabilities: softmax rows, or per-label sigmoids (multi-label)."""
        z = self.logits(texts).astype(np.float64)
        if self.multi_label:
            return (1 / (1 + np.exp(-z))).astype(np.float32)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)

    def predict(self, texts: Iterable[str | None], threshold: float = 0.5
                ) -> list[str] | list[list[str]]:
        """Each text's label (the most probable), or its labels above ``threshold``
        (multi-label)."""
        p = self.predict_proba(texts)
        if self.multi_label:
            return [[self.labels[j] for j in np.flatnonzero(row >= threshold)] for row in p]
        return [self.labels[j] for j in p.argmax(axis=1)]
