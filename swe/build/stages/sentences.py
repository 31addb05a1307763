"""Stage ``sentences``: line shards → sentence shards, each sentence with its teacher-token count.

Lines are split into sentences (BlingFire) unless the corpus is already one sentence per line;
sentences outside ``[sentences] min_tokens … max_tokens`` teacher tokens are dropped. Every
sentence gets an id ``shard_id << 32 | row``: unique and in corpus order, which selection's
"first C candidates" relies on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pyarrow as pa

from swe import storage
from swe.build.markers import StageDir
from swe.build.outputs import hashed_corpus
from swe.build.stage import LogPhrases, Section, StageResult
from swe.build.tasks import MiB, remote, run_sharded
from swe.text import split_sentences

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Result", "SentenceConfig", "sentence_shard"]

NAME = "sentences"


@dataclass
class SentenceConfig:
    """``[sentences]``: the teacher-token length window."""

    min_tokens: int = field(default=3, metadata={
        "min": 1, "help": "shortest sentence kept, in teacher tokens"})
    max_tokens: int = field(default=128, metadata={
        "min": 1, "max": 511, "help": "longest kept; teachers accept < 512 tokens"})


SECTION = Section("sentences", SentenceConfig)

#: The other stages' config sections this stage reads (its contract; tests/test_layout.py
#: checks the source names no other).
READS: tuple[str, ...] = ("corpus",)


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Sentence shards per language (``{"path", "sentences", "shard_id"}`` each)."""

    LOG: ClassVar[LogPhrases] = {"shards": None, "sentences": ("{} sentences", "sentences"),
                                 "dropped_by_length": ("{} dropped by length", None)}

    shards: dict[str, list[dict]]
    sentences: int
    dropped_by_length: int
    sentences_per_s: int


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[sentences]``."""
    s = cfg.sentences
    if s.min_tokens > s.max_tokens:
        errors.append(f"sentences: need 1 <= min_tokens ({s.min_tokens}) <= max_tokens "
                      f"({s.max_tokens})")


def enabled(cfg: BuildConfig) -> bool:
    """Always runs."""
    return True


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Reads the line shards."""
    return ("corpus",)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The length window, the teacher (its tokenizer counts tokens) and the corpus settings."""
    return cfg.sentences, teacher, hashed_corpus(cfg)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """One task per line shard (resumable per shard)."""
    cfg = ctx.cfg
    # ≈ 5 KB per sentence while splitting and tokenising, a paragraph line holding a few.
    per_line = max(15_000 if c.split_sentences else 5_000 for c in cfg.corpus.values())
    biggest = max(s["lines"] for v in done["corpus"].shards.values() for s in v)
    task = remote(sentence_shard, 256 * MiB + biggest * per_line, "sentences",
                  "corpus.<lang>.shard_lines")
    jobs, langs = [], []
    for lang in cfg.languages:
        split = cfg.corpus[lang].split_sentences
        for s in done["corpus"].shards[lang]:
            sid = len(jobs)
            dst = st.path(lang, s["path"].rsplit("/", 1)[-1])
            jobs.append((f"{sid:06d}", lambda a=s["path"], b=dst, k=sid, sp=split: task.remote(
                a, b, k, ctx.teacher, sp, cfg.sentences.min_tokens, cfg.sentences.max_tokens)))
            langs.append(lang)
    t = time.perf_counter()
    results = run_sharded(st, jobs)
    shards: dict[str, list] = {lang: [] for lang in cfg.languages}
    for lang, (key, _), r in zip(langs, jobs, results, strict=True):
        shards[lang].append({"path": r["path"], "sentences": r["sentences"],
                             "shard_id": int(key)})
    for lang in cfg.languages:
        if not sum(s["sentences"] for s in shards[lang]):
            raise ValueError(f"no {lang} sentence has {cfg.sentences.min_tokens}–"
                             f"{cfg.sentences.max_tokens} teacher tokens: widen [sentences]")
    total = sum(r["sentences"] for r in results)
    return Result(shards=shards, sentences=total,
                  dropped_by_length=sum(r["dropped_by_length"] for r in results),
                  sentences_per_s=round(total / max(time.perf_counter() - t, 1e-9)))


# A sentence longer than max_tokens × this many characters cannot be in the length window (no
# real text averages 50 characters per teacher token); it is dropped before tokenising.
MAX_CHARS_PER_TOKEN = 50
TOKENIZE_BATCH = 8192


def sentence_shard(src: str, dst: str, shard_id: int, teacher_dir: str, split: bool,
                   min_tokens: int, max_tokens: int) -> dict:
    """Split a line shard into sentences, count teacher tokens, keep the length window.

    Output columns: ``sid`` (``shard_id << 32 | row``: unique and in corpus order), ``text``,
    ``ntok`` (teacher tokens without special tokens).
    """
    lines = storage.read_parquet(src).column("text").to_pylist()
    sents: list[str] = []
    for line in lines:
        sents.extend(split_sentences(line) if split else [line])
    # Longer than any sentence of max_tokens tokens can be: dropped without tokenising (the
    # tokenizer holds ~130 bytes per character: a 50 MB line would take 6.6 GB).
    fits = np.fromiter((len(t) <= max_tokens * MAX_CHARS_PER_TOKEN for t in sents), dtype=bool,
                       count=len(sents))
    tok = storage.load_tokenizer(teacher_dir)
    ntok = np.full(len(sents), max_tokens + 1, dtype=np.int32)
    todo = np.flatnonzero(fits)
    for a in range(0, len(todo), TOKENIZE_BATCH):  # a tokenizer Encoding holds ~KBs: in batches
        ids = todo[a : a + TOKENIZE_BATCH]
        ntok[ids] = [len(e.ids) for e in tok.encode_batch([sents[i] for i in ids],
                                                          add_special_tokens=False)]
    keep = (ntok >= min_tokens) & (ntok <= max_tokens)
    idx = np.flatnonzero(keep)
    sid = (np.int64(shard_id) << 32) + np.arange(len(idx), dtype=np.int64)
    storage.write_parquet(dst, pa.table({"sid": sid, "text": pa.array([sents[i] for i in idx]),
                                         "ntok": ntok[idx]}))
    return {"path": dst, "sentences": len(idx), "dropped_by_length": int((~keep).sum()),
            "lines": len(lines)}
