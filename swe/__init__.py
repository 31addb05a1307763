"""swe: static word embeddings for sentence semantics, distilled from Sentence Transformers.

``swe.StaticModel.load(path).encode(texts)`` needs numpy, safetensors, tokenizers and blingfire
only; the build and bulk pipelines (Ray, torch) live in submodules imported on demand.
"""

from swe.classifier import StaticClassifier
from swe.ensemble import EnsembleModel
from swe.model import StaticModel
from swe.version import __version__

__all__ = ["EnsembleModel", "StaticClassifier", "StaticModel", "__version__"]
