"""The contract between stages: where each stage's outputs live and how later stages read them.

A stage writes under ``<output>/work/<stage>/`` and never imports another stage; what one stage
reads of another's work goes through the accessors here (``tests/test_stage_contract.py`` checks
the import graph). Each accessor names the stage that writes what it reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from swe import storage
from swe.build.markers import hashed
from swe.text import language, unit_keys

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["hashed_corpus", "selected_parts", "targets_url", "text_keys", "train_dev_urls",
           "vocab_url", "vocab_words", "writes_targets"]


# -- corpus: the settings that define its line shards ----------------------------------------

def hashed_corpus(cfg: BuildConfig) -> dict:
    """The corpus settings as the corpus and sentences stages hash them."""
    return {lang: hashed(c, on_bad_bytes="skip", paths_if_present=[])
            for lang, c in cfg.corpus.items()}


# -- vocab: one Parquet file of ``(word, count)`` per language --------------------------------

def vocab_url(ctx: BuildContext, lang: str) -> str:
    """The vocabulary file of ``lang``."""
    return ctx.work("vocab", f"{lang}.parquet")


def vocab_words(url: str) -> list[str]:
    """The words of a vocabulary file, in vocabulary order (a word's id is its index)."""
    return storage.read_parquet(url, ["word"]).column("word").to_pylist()


def text_keys(texts: list[str], lang: str, teacher_dir: str | None) -> Iterator[list[str]]:
    """The vocabulary unit keys of each text, as vocab counts them and selection matches them
    (see ``swe.text.units``)."""
    spec = language(lang)
    tok = storage.load_tokenizer(teacher_dir) if spec.teacher_tokens and teacher_dir else None
    unk = None
    if tok is not None:
        from swe.text import unk_token

        unk = unk_token(tok)
    for t in texts:
        yield unit_keys(t, spec, tok, unk)


# -- selection: Parquet parts of the selected sentences ---------------------------------------

def selected_parts(ctx: BuildContext) -> list[str]:
    """The selected-sentence Parquet parts (``sid, text, ntok, lang, word_ids``)."""
    return storage.find(ctx.work("selection", "parts"))


# -- extraction: the selected sentences' teacher embeddings, when it writes them --------------

def writes_targets(cfg: BuildConfig) -> bool:
    """Whether extraction also writes each selected sentence's teacher embedding (train_data
    then distils on all of them instead of running the teacher again)."""
    return (cfg.extraction.mode == "sentence" and cfg.refine.objective == "distill"
            and cfg.refine.sentences == "selected")


def targets_url(stage_dir: str) -> str:
    """The folder of ``(sid, src, teacher)`` Parquet files under extraction's ``stage_dir``."""
    return storage.join(stage_dir, "targets")


# -- train_data: the shuffled training and dev rows -------------------------------------------

def train_dev_urls(ctx: BuildContext) -> tuple[str, str]:
    """The ``train/`` and ``dev/`` folders of Parquet shards train_data wrote."""
    return ctx.work("train_data", "train"), ctx.work("train_data", "dev")
