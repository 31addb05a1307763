"""Stage 3: vocabulary from mergeable partial word counts.

Each sentence shard is counted into ``P`` hash partitions (a stable CRC32 of the word); each
partition's partial counters are summed by one merge task and cut to its top ``V``; the global
top ``V`` is the top ``V`` of those. No node ever holds more than one partition's distinct words,
and no shuffle of individual tokens happens.
"""

from __future__ import annotations

import zlib
from collections import Counter

from swe.stages.corpus import load_tokenizer, read_parquet
from swe.text import language, unit_keys

__all__ = ["count_shard", "merge_partition", "text_keys", "top_words"]


def text_keys(texts: list[str], lang: str, teacher_dir: str | None):
    """Vocabulary unit keys of each text (see ``swe.text.units``)."""
    spec = language(lang)
    tok = load_tokenizer(teacher_dir) if spec.teacher_tokens and teacher_dir else None
    unk = _unk(tok)
    for t in texts:
        yield unit_keys(t, spec, tok, unk)


def _unk(tok) -> str | None:
    if tok is None:
        return None
    from swe.model import unk_token

    return unk_token(tok)


def partition_of(word: str, partitions: int) -> int:
    return zlib.crc32(word.encode("utf-8")) % partitions


def count_shard(path: str, lang: str, teacher_dir: str, partitions: int) -> list[dict]:
    """Word counts of one sentence shard, split into ``partitions`` dicts by word hash."""
    counts: Counter = Counter()
    for keys in text_keys(read_parquet(path, ["text"]).column("text").to_pylist(), lang,
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


def top_words(items, size: int, min_count: int) -> list[tuple[str, int]]:
    """The ``size`` most frequent ``(word, count)`` pairs, ties broken by the word itself."""
    kept = [(w, c) for w, c in items if c >= min_count]
    kept.sort(key=lambda wc: (-wc[1], wc[0]))
    return kept[:size]
