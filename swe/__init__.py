"""swe: static word embeddings for sentence semantics, distilled from Sentence Transformers.

``swe.StaticModel.load(path).encode(texts)`` needs numpy, safetensors, tokenizers and blingfire
only; the build and bulk pipelines (Ray, torch) live in submodules imported on demand. The
classes below are imported on first use too, so the ``swe`` command starts (and takes a Ctrl-C
as one line) before numpy loads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from swe.version import __version__

if TYPE_CHECKING:
    from swe.classifier import StaticClassifier
    from swe.ensemble import EnsembleModel
    from swe.model import StaticModel

__all__ = ["EnsembleModel", "StaticClassifier", "StaticModel", "__version__"]

_HOMES = {"EnsembleModel": "swe.ensemble", "StaticClassifier": "swe.classifier",
          "StaticModel": "swe.model"}


def __getattr__(name: str) -> Any:
    """``swe.StaticModel`` and the others, imported when first asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module 'swe' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
