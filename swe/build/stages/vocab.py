"""Stage ``vocab``: the V most frequent words per language, from mergeable partial counts.

Each sentence shard is counted by one task, which writes its counts split into ``P`` hash
partitions (a stable CRC32 of the word: ``counts/<lang>/p<P>/s<K>.parquet``); one task per
partition sums them and keeps its top V (``top/<lang>/p<P>.parquet``); one last task takes the
top V of those and writes ``<lang>.parquet`` (words by descending count, ties by the word). No
process holds more than one partition's distinct words, the driver none; every task is marked,
so a killed stage resumes task by task. Words are the units of ``swe.text`` (lowercased English,
cased German, teacher tokens for Chinese/Japanese).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pyarrow as pa

from swe import inputs, storage
from swe.build.markers import StageDir, hashed
from swe.build.outputs import text_keys, vocab_url
from swe.build.stage import LogPhrases, Section, StageResult
from swe.build.tasks import MiB, node_id, remote, run_sharded

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Result", "VocabConfig", "count_shard", "merge_partition", "read_vocab",
           "select_words", "top_words"]

NAME = "vocab"


@dataclass
class VocabConfig:
    """``[vocab]``: size V per language and the minimum count."""

    size: int = field(default=150_000, metadata={"min": 1, "help": "words V per language"})
    min_count: int = field(default=5, metadata={"min": 1, "help": "fewest occurrences kept"})
    partitions: int = field(default=16, metadata={
        "min": 1, "help": "hash partitions of the mergeable word counts"})
    on_short: str = field(default="warn", metadata={"choices": {
        "warn": "continue with the smaller vocabulary", "error": "stop"},
        "help": "what to do when fewer than size words reach min_count"})
    word_lists: str = field(default="", metadata={
        "help": "a word list per language, {lang} its code (e.g. {data}/multilingual/vocab/"
                "{lang}.tsv.xz: TSV word<TAB>count, header 'word<TAB>count'); a language "
                "without the file has none; '' = none"})
    listed_min_count: int = field(default=1, metadata={
        "min": 1, "help": "a listed word seen this often in its language's text is kept "
                          "below min_count, after the size most frequent words"})

    def word_list(self, lang: str) -> str:
        """``lang``'s word list file, ``""`` when it has none."""
        path = self.word_lists.replace("{lang}", lang)
        return storage.data_path(path) if path and inputs.present([path]) else ""


SECTION = Section("vocab", VocabConfig)


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Vocabulary size and the lowest kept count, per language (words in ``<lang>.parquet``)."""

    LOG: ClassVar[LogPhrases] = {"sizes": ("{} words", None),
                                 "min_count_kept": ("min count {}", None),
                                 "listed": ("{} listed words below min count", None)}

    sizes: dict[str, int]
    min_count_kept: dict[str, int]
    listed: dict[str, int] = field(default_factory=dict)


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """``vocab.word_lists`` is a path; each language's word list, when it names one: a header
    ``word<TAB>count``, numeric counts."""
    if "\0" in cfg.vocab.word_lists or (cfg.vocab.word_lists and
                                        not cfg.vocab.word_lists.strip()):
        errors.append(f"vocab.word_lists: {cfg.vocab.word_lists!r} is not a path (blank, or "
                      "holding a NUL byte)")
        return
    if not (check_paths and cfg.vocab.word_lists):
        return
    for lang in cfg.languages:
        if path := cfg.vocab.word_list(lang):
            try:
                read_word_list(path)
            except (OSError, ValueError) as e:
                errors.append(f"vocab.word_lists: {e}")


def read_word_list(path: str) -> list[str]:
    """The words of a word list (TSV, header ``word<TAB>count``, counts whole numbers), in
    file order; ``ValueError`` naming the file and line when it is not one."""
    words = []
    with storage.naming(path, "reading"), inputs.open_input(path) as f:
        for n, raw in enumerate(inputs.iter_lines(f), 1):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            fields = line.split("\t")
            if n == 1:
                if [x.strip().lower() for x in fields] != ["word", "count"]:
                    raise ValueError(f"{path}: the header is {line[:80]!r}, not "
                                     "'word<TAB>count'; is it a word list?")
                continue
            if not line.strip():
                continue
            if len(fields) != 2 or not fields[1].strip().isdigit():
                raise ValueError(f"{path} line {n}: {line[:80]!r} is not word<TAB>count with "
                                 "a whole-number count")
            words.append(fields[0].strip())
    return words


def enabled(cfg: BuildConfig) -> bool:
    """Always runs."""
    return True


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Counts the sentence shards."""
    return ("sentences",)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The vocabulary settings."""
    return (hashed(cfg.vocab, on_short="warn", word_lists="", listed_min_count=1),)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Count per shard into partitions, merge each partition, keep the global top V."""
    v = ctx.cfg.vocab
    sizes, lowest, listed = {}, {}, {}
    for lang in ctx.cfg.languages:
        top = _vocab_language(ctx, st, lang, done["sentences"].shards[lang])
        if not top["size"]:
            raise ValueError(f"{lang}: no word occurs {v.min_count}+ times; "
                             "lower vocab.min_count or add corpus")
        sizes[lang], lowest[lang] = top["size"], top["min_count_kept"]
        listed[lang] = top.get("listed", 0)
        if top["size"] - listed[lang] < v.size:
            _short_vocab(st, v, lang, top["size"] - listed[lang])
    return Result(sizes=sizes, min_count_kept=lowest,
                  listed={k: n for k, n in listed.items() if n})


def _vocab_language(ctx: BuildContext, st: StageDir, lang: str, shards: list[dict]) -> dict:
    """The three passes over one language's shards; the final size and lowest count."""
    v = ctx.cfg.vocab
    out = st.path("counts", lang)
    biggest = max(s["sentences"] for s in shards)
    count = remote(count_shard, 128 * MiB + biggest * 1200, "vocab (count)",
                   "lower corpus.<lang>.shard_lines")
    # A partition's distinct words follow the corpus's long tail, not V: a fixed reservation.
    merge = remote(merge_partition, 1024 * MiB, "vocab (merge)", "raise vocab.partitions")
    select = remote(select_words, 128 * MiB + v.partitions * v.size * 120, "vocab (select)",
                    "lower vocab.size or vocab.partitions")
    run_sharded(st, [(f"{lang}-count-{k:06d}", lambda s=s, k=k: count.remote(
        s["path"], lang, ctx.teacher, v.partitions, out, k)) for k, s in enumerate(shards)])
    listed = (v.word_list(lang), v.listed_min_count, lang, ctx.teacher)
    run_sharded(st, [(f"{lang}-merge-{p:04d}", lambda p=p: merge.remote(
        out, p, v.size, v.min_count, listed)) for p in range(v.partitions)])
    (top,) = run_sharded(st, [(f"{lang}-select", lambda: select.remote(
        out, v.partitions, v.size, v.min_count, st.path(f"{lang}.parquet")))])
    return top


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
        t = storage.read_parquet(vocab_url(ctx, lang))
        words[lang] = t.column("word").to_pylist()
        counts[lang] = t.column("count").to_numpy()
    return words, counts


def partition_of(word: str, partitions: int) -> int:
    """A word's hash partition (stable across processes)."""
    return zlib.crc32(word.encode("utf-8")) % partitions


def count_shard(path: str, lang: str, teacher_dir: str, partitions: int, out: str,
                shard: int) -> dict:
    """Word counts of one sentence shard, written by hash partition."""
    counts: Counter = Counter()
    texts = storage.read_parquet(path, ["text"]).column("text").to_pylist()
    for keys in text_keys(texts, lang, teacher_dir):
        counts.update(keys)
    parts: list[dict] = [{} for _ in range(partitions)]
    for w, c in counts.items():
        parts[partition_of(w, partitions)][w] = c
    for p, part in enumerate(parts):
        if part:
            _write_counts(storage.join(out, f"p{p:04d}", f"s{shard:06d}.parquet"), part.items())
    return {"words": len(counts), "node": node_id()}


def merge_partition(out: str, partition: int, size: int, min_count: int,
                    listed: tuple = ("", 1, "", "")) -> dict:
    """Sum one partition's partial counts; write its top ``size`` words with ``count >=
    min_count``, and its listed words (``listed``: word list, its min count, language, teacher)
    seen fewer than ``min_count`` times."""
    total: Counter = Counter()
    for url in storage.find(storage.join(out, f"p{partition:04d}")):
        t = storage.read_parquet(url)
        total.update(dict(zip(t.column("word").to_pylist(), t.column("count").to_pylist(),
                              strict=True)))
    top = top_words(total.items(), size, min_count)
    _write_counts(storage.join(out, "top", f"p{partition:04d}.parquet"), top)
    below = _listed_below(total, partition, min_count, *listed)
    if listed[0]:
        _write_counts(storage.join(out, "listed", f"p{partition:04d}.parquet"), below)
    return {"words": len(total), "kept": len(top), "listed": len(below), "node": node_id()}


def _listed_below(total: Mapping[str, int], partition: int, min_count: int, word_list: str,
                  listed_min: int, lang: str, teacher_dir: str) -> list[tuple[str, int]]:
    """The listed words of one partition seen ``listed_min`` to ``min_count - 1`` times (a
    listed word is one unit key of its language)."""
    if not word_list:
        return []
    keys = {k[0] for k in text_keys(read_word_list(word_list), lang, teacher_dir)
            if len(k) == 1}
    # ``total`` holds this partition's words only: the listed words of other partitions miss.
    return [(w, total[w]) for w in sorted(keys) if listed_min <= total.get(w, 0) < min_count]



def select_words(out: str, partitions: int, size: int, min_count: int, dst: str) -> dict:
    """The global top ``size`` of the partitions' tops, then the listed words below
    ``min_count`` (by count, then word), written to ``dst``."""
    items, listed = [], []
    parts = set(storage.find(storage.join(out, "listed")))
    for p in range(partitions):
        t = storage.read_parquet(storage.join(out, "top", f"p{p:04d}.parquet"))
        items += zip(t.column("word").to_pylist(), t.column("count").to_pylist(), strict=True)
        url = storage.join(out, "listed", f"p{p:04d}.parquet")
        if url in parts:
            t = storage.read_parquet(url)
            listed += zip(t.column("word").to_pylist(), t.column("count").to_pylist(),
                          strict=True)
    top = top_words(items, size, min_count)
    top += top_words(listed, len(listed), 1)
    _write_counts(dst, top)
    return {"size": len(top), "min_count_kept": int(top[-1][1]) if top else 0,
            "listed": len(listed)}


def _write_counts(url: str, items: Iterable[tuple[str, int]]) -> None:
    words, counts = zip(*items, strict=True) if items else ((), ())
    storage.write_parquet(url, pa.table({"word": pa.array(list(words), pa.string()),
                                         "count": pa.array(list(counts), pa.int64())}))


def top_words(items: Iterable[tuple[str, int]], size: int, min_count: int) -> list[tuple[str, int]]:
    """The ``size`` most frequent ``(word, count)`` pairs, ties broken by the word itself."""
    kept = [(w, c) for w, c in items if c >= min_count]
    kept.sort(key=lambda wc: (-wc[1], wc[0]))
    return kept[:size]
