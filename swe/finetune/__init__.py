"""``swe finetune``: a classifier head trained with the static table on labelled data, on Ray
Train (:mod:`swe.finetune.job`); the result loads as :class:`swe.StaticClassifier`."""

from swe.finetune.job import FinetuneReport, finetune
from swe.finetune.train import FinetuneJob

__all__ = ["FinetuneJob", "FinetuneReport", "finetune"]
