"""Stage ``selection``: for each word, the N shortest sentences among its first ≤C candidates.

"First" means corpus order (sentence ids are ordered). Exact and mergeable in three passes over
the sentence shards, all in parallel:

A. per shard: how many sentences contain each vocabulary word (document frequency);
B. the driver turns those into per-shard quotas (how many of the word's first C candidates fall
   in each shard: a prefix sum over shards); per shard, the bounded "N shortest" of the word's
   first ``quota`` candidates there, by ``(ntok, sid)``;
C. the per-shard heaps merge into the global N shortest per word (the N smallest of a union are
   the N smallest of the per-part N smallest); each shard then emits its selected sentences once,
   with every vocabulary word they serve (``parts/<lang>-<shard>.parquet``), and the
   ``(word_id, sid)`` pairs are saved per language (``pairs-<lang>.npz``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from swe import storage
from swe.build.markers import StageDir
from swe.build.runner import StageResult
from swe.build.stages.vocab import read_vocab, text_keys
from swe.raysetup import get

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Result", "SelectionConfig", "candidate_pairs", "emit_selected", "merge_heaps",
           "quotas", "read_selected", "selected_parts", "shard_df", "shard_heaps"]

NAME = "selection"


@dataclass
class SelectionConfig:
    """``[selection]``: N sentences per word, the shortest of its first C candidates."""

    n: int = 100  # sentences kept per word (the N shortest)
    candidates: int = 2_000  # among the word's first candidates in corpus order


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """How many sentences the selection needs encoded, against V·N."""

    unique_sentences: int
    naive_encodes: int
    encode_ratio: float
    words_below_n: int
    words_without_sentence: int


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[selection]``."""
    sel = cfg.selection
    if sel.n < 1:
        errors.append(f"selection.n = {sel.n} must be >= 1")
    if sel.n > sel.candidates:
        errors.append(f"selection.n = {sel.n} > selection.candidates = {sel.candidates}: "
                      "N shortest of fewer candidates is impossible; raise candidates or lower n")


def enabled(cfg: BuildConfig) -> bool:
    """Sentence-mode extraction only (Model2Vec mode embeds each word alone)."""
    return cfg.extraction.mode != "model2vec"


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Selects among the vocabulary's sentences."""
    return ("vocab",)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """N and C."""
    return (cfg.selection,)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Passes A–C per language."""
    import ray

    df = ray.remote(num_cpus=0.5)(shard_df)
    heaps = ray.remote(num_cpus=0.5)(shard_heaps)
    emit = ray.remote(num_cpus=0.5)(emit_selected)
    cfg, (n, c) = ctx.cfg, (ctx.cfg.selection.n, ctx.cfg.selection.candidates)
    vocab, _ = read_vocab(ctx)
    unique = below = missing = 0
    pairs_all = []
    for lang in cfg.languages:
        shards = done["sentences"].shards[lang]
        words_ref = ray.put(vocab[lang])
        pairs = [st.path("candidates", f"{s['shard_id']:06d}.npz") for s in shards]
        dfs = get([df.remote(s["path"], lang, ctx.teacher, words_ref, pp)
                   for s, pp in zip(shards, pairs, strict=True)])
        parts = get([heaps.remote(s["path"], lang, ctx.teacher, words_ref, q, n, pp)
                     for s, q, pp in zip(shards, quotas(dfs, c), pairs, strict=True)])
        wid, _, sid = merge_heaps(parts, n)
        per_word = np.bincount(wid, minlength=len(vocab[lang]))
        below += int((per_word < n).sum())
        missing += int((per_word == 0).sum())
        shard_of = sid >> 32
        emits = []
        for s in shards:
            m = shard_of == s["shard_id"]
            if m.any():
                name = s["path"].rsplit("/", 1)[-1]
                emits.append(emit.remote(s["path"], st.path("parts", f"{lang}-{name}"), lang,
                                         sid[m], wid[m]))
        unique += sum(get(emits))
        pairs_all.append((lang, wid, sid))
    for lang, wid, sid in pairs_all:
        storage.save_npz(st.path(f"pairs-{lang}.npz"), word_id=wid, sid=sid)
    naive = sum(len(vocab[lang]) for lang in cfg.languages) * n
    return Result(unique_sentences=unique, naive_encodes=naive,
                  encode_ratio=round(unique / max(naive, 1), 3), words_below_n=below,
                  words_without_sentence=missing)


def read_selected(ctx: BuildContext, lang: str) -> tuple[np.ndarray, np.ndarray]:
    """``(word_id, sid)`` of every selected (word, sentence) pair of ``lang``, by word id."""
    z = storage.load_npz(ctx.work(NAME, f"pairs-{lang}.npz"))
    return z["word_id"], z["sid"]


def selected_parts(ctx: BuildContext) -> list[str]:
    """The selected-sentence Parquet parts (``sid, text, ntok, lang, word_ids``)."""
    return storage.find(ctx.work(NAME, "parts"))


def candidate_pairs(texts: list[str], lang: str, teacher_dir: str | None,
                    index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """``(row, word_id)`` for every distinct vocabulary word of every sentence, in row order."""
    rows: list[int] = []
    wids: list[int] = []
    for r, keys in enumerate(text_keys(texts, lang, teacher_dir)):
        ids = {index[k] for k in keys if k in index}
        rows.extend([r] * len(ids))
        wids.extend(sorted(ids))
    return np.asarray(rows, dtype=np.int64), np.asarray(wids, dtype=np.int64)


def shard_df(path: str, lang: str, teacher_dir: str, words: list[str],
             pairs_out: str | None = None) -> np.ndarray:
    """Pass A: number of sentences of the shard containing each word. The ``(row, word)``
    pairs are saved to ``pairs_out`` so pass B need not split the text again."""
    index = {w: i for i, w in enumerate(words)}
    texts = storage.read_parquet(path, ["text"]).column("text").to_pylist()
    rows, wids = candidate_pairs(texts, lang, teacher_dir, index)
    if pairs_out:
        storage.save_npz(pairs_out, rows=rows, wids=wids)
    return np.bincount(wids, minlength=len(words)).astype(np.int64)


def quotas(dfs: list[np.ndarray], candidates: int) -> list[np.ndarray]:
    """Per shard (in corpus order), how many of each word's first ``candidates`` it holds.

    One running V-vector of counts so far, int32 quotas: memory ≈ shards × V × 4 bytes beside
    the inputs (not several stacked int64 copies)."""
    before = np.zeros(len(dfs[0]) if dfs else 0, np.int64)
    out = []
    for df in dfs:
        out.append(np.clip(candidates - before, 0, df).astype(np.int32))
        before += df
    return out


def smallest_per_word(wid: np.ndarray, ntok: np.ndarray, sid: np.ndarray,
                      n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep the ``n`` smallest ``(ntok, sid)`` per word; returns the kept arrays sorted."""
    order = np.lexsort((sid, ntok, wid))
    wid, ntok, sid = wid[order], ntok[order], sid[order]
    first = np.searchsorted(wid, wid, side="left")
    keep = (np.arange(len(wid)) - first) < n
    return wid[keep], ntok[keep], sid[keep]


def shard_heaps(path: str, lang: str, teacher_dir: str, words: list[str], quota: np.ndarray,
                n: int, pairs_in: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pass B: per word, the ``n`` shortest of its first ``quota[w]`` candidates in the shard."""
    table = storage.read_parquet(path, ["sid", "ntok"] if pairs_in else ["sid", "text", "ntok"])
    if pairs_in:
        z = storage.load_npz(pairs_in)
        rows, wids = z["rows"], z["wids"]
    else:
        index = {w: i for i, w in enumerate(words)}
        rows, wids = candidate_pairs(table.column("text").to_pylist(), lang, teacher_dir, index)
    # Occurrence rank of each (row, word) among the word's candidates, in row order.
    order = np.lexsort((rows, wids))
    sw = wids[order]
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order)) - np.searchsorted(sw, sw, side="left")
    take = rank < quota[wids]
    rows, wids = rows[take], wids[take]
    sid = table.column("sid").to_numpy()[rows]
    ntok = table.column("ntok").to_numpy().astype(np.int64)[rows]
    return smallest_per_word(wids, ntok, sid, n)


def merge_heaps(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge per-shard heaps into the global ``n`` shortest per word."""
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    wid, ntok, sid = (np.concatenate(x) for x in zip(*parts, strict=True))
    return smallest_per_word(wid, ntok, sid, n)


def emit_selected(path: str, dst: str, lang: str, sids: np.ndarray, wids: np.ndarray) -> int:
    """Pass C: write the shard's selected sentences with the word ids each one serves."""
    table = storage.read_parquet(path, ["sid", "text", "ntok"])
    order = np.argsort(sids, kind="stable")
    sids, wids = sids[order], wids[order]
    uniq, start = np.unique(sids, return_index=True)
    groups = np.split(wids.astype(np.int32), start[1:]) if len(uniq) else []
    pos = np.searchsorted(table.column("sid").to_numpy(), uniq)
    out = pa.table({
        "sid": pa.array(uniq, pa.int64()),
        "text": table.column("text").take(pa.array(pos)),
        "ntok": table.column("ntok").take(pa.array(pos)),
        "lang": pa.array([lang] * len(uniq), pa.string()),
        "word_ids": pa.array([g.tolist() for g in groups], pa.list_(pa.int32())),
    })
    storage.write_parquet(dst, out)
    return len(uniq)
