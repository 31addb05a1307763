"""The build's stages, in order; each module is one stage (see ``swe.build.runner.Stage``).

corpus → sentences → vocab → selection → extraction → pca → train_data → refine
"""

from swe.build.stages import (
    corpus,
    extraction,
    pca,
    refine,
    selection,
    sentences,
    train_data,
    vocab,
)

STAGES = (corpus, sentences, vocab, selection, extraction, pca, train_data, refine)
STAGE_NAMES = tuple(s.NAME for s in STAGES)

__all__ = ["STAGES", "STAGE_NAMES"]
