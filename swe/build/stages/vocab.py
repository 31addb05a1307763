"""Stage ``vocab``: the V most frequent words per language, from mergeable partial counts.

Each sentence shard is counted into ``P`` hash partitions (a stable CRC32 of the word); each
partition's partial counters are summed by one merge task and cut to its top ``V``; the global
top ``V`` is the top ``V`` of those. No node ever holds more than one partition's distinct words,
and no shuffle of individual tokens happens. Words are the units of ``swe.text`` (lowercased
English, cased German, teacher tokens for Chinese/Japanese).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from swe import storage
from swe.build.markers import StageDir, hashed
from swe.build.runner import StageResult
from swe.raysetup import get
from swe.text import language, unit_keys

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Result", "VocabConfig", "count_shard", "merge_partition", "read_vocab", "text_keys",
           "top_words"]

NAME = "vocab"


@dataclass
class VocabConfig:
    """``[vocab]``: size V per language and the minimum count."""

    size: int = 150_000
    min_count: int = 5
    partitions: int = 16  # hash partitions of the mergeable word counts
    on_short: str = "warn"  # fewer than `size` words reach min_count: warn | error


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Vocabulary size and the lowest kept count, per language (words in ``<lang>.parquet``)."""

    sizes: dict[str, int]
    min_count_kept: dict[str, int]


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[vocab]``."""
    v = cfg.vocab
    if v.size < 1 or v.min_count < 1 or v.partitions < 1:
        errors.append("vocab: size, min_count and partitions must be >= 1")
    if v.on_short not in ("warn", "error"):
        errors.append(f"vocab.on_short = {v.on_short!r}; use 'warn' (continue with the "
                      "smaller vocabulary) or 'error' (stop)")


def enabled(cfg: BuildConfig) -> bool:
    """Always runs."""
    return True


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Counts the sentence shards."""
    return ("sentences",)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The vocabulary settings."""
    return (hashed(cfg.vocab, on_short="warn"),)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Count per shard into partitions, merge each partition in a task, keep the global top V."""
    import ray

    cfg, v = ctx.cfg, ctx.cfg.vocab
    count = ray.remote(num_cpus=0.5, num_returns=v.partitions)(count_shard)
    merge = ray.remote(num_cpus=0.5)(merge_partition)
    sizes, lowest = {}, {}
    for lang in cfg.languages:
        parts = [count.remote(s["path"], lang, ctx.teacher, v.partitions)
                 for s in done["sentences"].shards[lang]]
        parts = [p if isinstance(p, list) else [p] for p in parts]
        tops = get([merge.remote(*[p[i] for p in parts], size=v.size, min_count=v.min_count)
                    for i in range(v.partitions)])
        top = top_words([wc for t in tops for wc in t], v.size, v.min_count)
        if not top:
            raise ValueError(f"{lang}: no word occurs {v.min_count}+ times; "
                             "lower vocab.min_count or add corpus")
        words, counts = zip(*top, strict=True)
        storage.write_parquet(st.path(f"{lang}.parquet"),
                              pa.table({"word": list(words), "count": list(counts)}))
        sizes[lang], lowest[lang] = len(words), int(counts[-1])
        if len(words) < v.size:
            _short_vocab(st, v, lang, len(words))
    return Result(sizes=sizes, min_count_kept=lowest)


def _short_vocab(st: StageDir, v: VocabConfig, lang: str, found: int) -> None:
    """Fewer words than ``vocab.size`` reach ``min_count``: stop or warn per ``vocab.on_short``."""
    msg = (f"{lang}: only {found} words occur {v.min_count}+ times, fewer than vocab.size = "
           f"{v.size}; add corpus, or lower vocab.size or vocab.min_count")
    if v.on_short == "error":
        raise ValueError(f"{msg} (or set vocab.on_short = 'warn' to build with {found} words)")
    st.warn(msg)


def read_vocab(ctx: BuildContext) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """``(words, counts)`` per language, as the vocab stage wrote them."""
    words, counts = {}, {}
    for lang in ctx.cfg.languages:
        t = storage.read_parquet(ctx.work(NAME, f"{lang}.parquet"))
        words[lang] = t.column("word").to_pylist()
        counts[lang] = t.column("count").to_numpy()
    return words, counts


def text_keys(texts: list[str], lang: str,
              teacher_dir: str | None) -> Iterator[list[str]]:
    """Vocabulary unit keys of each text (see ``swe.text.units``)."""
    spec = language(lang)
    tok = storage.load_tokenizer(teacher_dir) if spec.teacher_tokens and teacher_dir else None
    unk = _unk(tok)
    for t in texts:
        yield unit_keys(t, spec, tok, unk)


def _unk(tok: object) -> str | None:
    if tok is None:
        return None
    from swe.model import unk_token

    return unk_token(tok)


def partition_of(word: str, partitions: int) -> int:
    """A word's hash partition (stable across processes)."""
    return zlib.crc32(word.encode("utf-8")) % partitions


def count_shard(path: str, lang: str, teacher_dir: str, partitions: int) -> list[dict]:
    """Word counts of one sentence shard, split into ``partitions`` dicts by word hash."""
    counts: Counter = Counter()
    for keys in text_keys(storage.read_parquet(path, ["text"]).column("text").to_pylist(), lang,
                          teacher_dir):
        counts.update(keys)
    parts: list[dict] = [{} for _ in range(partitions)]
    for w, c in counts.items():
        parts[partition_of(w, partitions)][w] = c
    return parts


def merge_partition(*partials: dict, size: int, min_count: int) -> list[tuple[str, int]]:
    """Sum one partition's partial counters; its top ``size`` words with ``count >= min_count``."""
    total: Counter = Counter()
    for p in partials:
        total.update(p)
    return top_words(total.items(), size, min_count)


def top_words(items: Iterable[tuple[str, int]], size: int, min_count: int) -> list[tuple[str, int]]:
    """The ``size`` most frequent ``(word, count)`` pairs, ties broken by the word itself."""
    kept = [(w, c) for w, c in items if c >= min_count]
    kept.sort(key=lambda wc: (-wc[1], wc[0]))
    return kept[:size]
