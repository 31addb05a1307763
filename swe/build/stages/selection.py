"""Stage ``selection``: for each word, the N shortest sentences among its first ≤C candidates.

"First" means corpus order (sentence ids are ordered). Exact, and partitioned by key so that no
process (the driver least of all) holds anything that grows with the corpus or with V·N. Word
ids are range-partitioned into ``P`` partitions (``selection.partitions``, by default from V·C);
each pass is one task per shard or per partition, exchanging files under ``work/selection/<lang>/``
(see ``swe.build.shuffle``), each task marked when done so a killed stage resumes task by task:

A. per shard: the (sentence, word) candidate pairs, and each word's document frequency, written
   by word partition (``df/p<P>/s<K>``);
Q. per partition: the prefix sum over shards in corpus order gives each shard's quota — how many
   of the word's first C candidates it holds (``quota/s<K>/p<P>``);
B. per shard: the bounded "N shortest" of each word's first ``quota`` candidates there, by
   ``(ntok, sid)``, written by word partition (``heaps/p<P>/s<K>``);
M. per partition: the N smallest of the union (the N smallest of the per-shard N smallest), saved
   as ``pairs/p<P>.npz`` and sent back by shard (``chosen/s<K>/p<P>``);
C. per shard: its selected sentences, once each, with every vocabulary word they serve
   (``parts/<lang>-<shard>.parquet``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pyarrow as pa

from swe import storage
from swe.build.markers import StageDir
from swe.build.outputs import text_keys, vocab_url, vocab_words
from swe.build.shuffle import by_partition, id_partition, partition_ids, read_files, write_groups
from swe.build.stage import LogPhrases, Section, StageResult
from swe.build.tasks import MiB, node_id, remote, run_sharded

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Result", "SelectionConfig", "candidate_pairs", "emit_selected", "pass_a", "pass_b",
           "pass_c", "pass_m", "pass_q", "read_selected", "shard_heaps"]

NAME = "selection"


@dataclass
class SelectionConfig:
    """``[selection]``: N sentences per word, the shortest of its first C candidates."""

    n: int = field(default=100, metadata={
        "min": 1, "help": "sentences kept per word (the N shortest)"})
    candidates: int = field(default=2_000, metadata={
        "min": 1, "help": "among the word's first C candidates in corpus order"})
    partitions: int = field(default=0, metadata={
        "min": 0, "help": "word partitions of the exchange; 0 = from V·C (the result is the same)"})


SECTION = Section("selection", SelectionConfig)

#: The other stages' config sections this stage reads (its contract; tests/test_layout.py
#: checks the source names no other).
READS: tuple[str, ...] = ("extraction",)


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """How many sentences the selection needs encoded, against V·N."""

    LOG: ClassVar[LogPhrases] = {
        "unique_sentences": ("{} sentences to encode", "sentences"),
        "naive_encodes": ("V·N {}", None), "encode_ratio": ("ratio {}", None),
        "words_below_n": ("{} words with fewer than N", None),
        "words_without_sentence": ("{} words without a sentence", None)}

    unique_sentences: int
    naive_encodes: int
    encode_ratio: float
    words_below_n: int
    words_without_sentence: int


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[selection]``."""
    sel = cfg.selection
    if sel.n > sel.candidates:
        errors.append(f"selection.n = {sel.n} > selection.candidates = {sel.candidates}: "
                      "N shortest of fewer candidates is impossible; raise candidates or lower n")


def enabled(cfg: BuildConfig) -> bool:
    """Sentence-mode extraction only (Model2Vec mode embeds each word alone)."""
    return cfg.extraction.mode != "model2vec"


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Selects among the vocabulary's sentences."""
    return ("vocab",)


LAYOUT = 2  # the files under work/selection/ (2: partitioned exchange, pairs/p<P>.npz)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """N and C (the partitioning does not change the result), and the layout of the stage's
    files: a build directory written by an older layout reruns selection onward instead of
    reading files that are not there."""
    return {"n": cfg.selection.n, "candidates": cfg.selection.candidates}, {"layout": LAYOUT}


def partitions(cfg: BuildConfig, vocab_size: int) -> int:
    """``selection.partitions``, or enough that a merge task holds ~512 MiB of candidates."""
    if cfg.selection.partitions:
        return cfg.selection.partitions
    rows = vocab_size * cfg.selection.candidates
    return int(min(4096, max(1, -(-rows * _ROW_BYTES // (512 * MiB)))))


_ROW_BYTES = 72  # a (word, ntok, sid) candidate row with the copies a sort makes


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Passes A, Q, B, M, C per language, each a set of marked tasks."""
    cfg, sel = ctx.cfg, ctx.cfg.selection
    totals = {"unique": 0, "below_n": 0, "missing": 0}
    for lang in cfg.languages:
        v = done["vocab"].sizes[lang]
        for key, value in _select_language(ctx, st, lang, done["sentences"].shards[lang], v,
                                           partitions(cfg, v)).items():
            totals[key] += value
    naive = sum(done["vocab"].sizes.values()) * sel.n
    return Result(unique_sentences=totals["unique"], naive_encodes=naive,
                  encode_ratio=round(totals["unique"] / max(naive, 1), 3),
                  words_below_n=totals["below_n"], words_without_sentence=totals["missing"])


def _select_language(ctx: BuildContext, st: StageDir, lang: str, shards: list[dict], v: int,
                     p: int) -> dict[str, int]:
    """The five passes over one language's shards; its counts."""
    n, c = ctx.cfg.selection.n, ctx.cfg.selection.candidates
    out, words = st.path(lang), vocab_url(ctx, lang)
    ids = [s["shard_id"] for s in shards]
    biggest = max(s["sentences"] for s in shards)
    shard_mem = 128 * MiB + v * 100 + biggest * 600
    part_mem = 128 * MiB + (v // p + 1) * c * _ROW_BYTES
    where = "selection.partitions"
    a = remote(pass_a, shard_mem, "selection (pass A)", "corpus.<lang>.shard_lines")
    q = remote(pass_q, part_mem, "selection (quotas)", where)
    b = remote(pass_b, shard_mem, "selection (pass B)", "corpus.<lang>.shard_lines")
    m = remote(pass_m, part_mem, "selection (merge)", where)
    e = remote(pass_c, shard_mem, "selection (emit)", "corpus.<lang>.shard_lines")
    run_sharded(st, [(f"{lang}-A-{s['shard_id']:06d}", lambda s=s: a.remote(
        s["path"], lang, ctx.teacher, words, s["shard_id"], v, p, out)) for s in shards])
    run_sharded(st, [(f"{lang}-Q-{k:04d}", lambda k=k: q.remote(out, k, v, p, c, ids))
                     for k in range(p)])
    run_sharded(st, [(f"{lang}-B-{s['shard_id']:06d}", lambda s=s: b.remote(
        s["path"], out, s["shard_id"], v, p, n)) for s in shards])
    merged = run_sharded(st, [(f"{lang}-M-{k:04d}", lambda k=k: m.remote(out, k, v, p, n))
                              for k in range(p)])
    emitted = run_sharded(st, [(f"{lang}-C-{s['shard_id']:06d}", lambda s=s: e.remote(
        s["path"], out, s["shard_id"], st.path("parts", f"{lang}-{_name(s)}"), lang))
        for s in shards])
    return {"unique": sum(r["unique"] for r in emitted),
            "below_n": sum(r["below_n"] for r in merged),
            "missing": sum(r["missing"] for r in merged)}


def _name(shard: dict) -> str:
    return shard["path"].rsplit("/", 1)[-1]


def _shard_file(out: str, kind: str, shard: int, part: int) -> str:
    return storage.join(out, kind, f"s{shard:06d}", f"p{part:04d}.npz")


def _part_file(out: str, kind: str, part: int, shard: int) -> str:
    return storage.join(out, kind, f"p{part:04d}", f"s{shard:06d}.npz")


_I64 = np.dtype(np.int64)


def pass_a(path: str, lang: str, teacher_dir: str, words_url: str, shard: int, v: int, p: int,
           out: str) -> dict:
    """Pass A (one shard): candidate pairs, and document frequencies by word partition."""
    index = {w: i for i, w in enumerate(vocab_words(words_url))}
    texts = storage.read_parquet(path, ["text"]).column("text").to_pylist()
    rows, wids = candidate_pairs(texts, lang, teacher_dir, index)
    storage.save_npz(storage.join(out, "candidates", f"s{shard:06d}.npz"), rows=rows, wids=wids)
    wid, df = np.unique(wids, return_counts=True)
    write_groups(by_partition(id_partition(wid, v, p), wid=wid, df=df.astype(np.int64)),
                 lambda k: _part_file(out, "df", k, shard))
    return {"candidates": len(rows), "node": node_id()}


def pass_q(out: str, part: int, v: int, p: int, candidates: int, shards: list[int]) -> dict:
    """Pass Q (one partition): each shard's quota of each word's first ``candidates``, streaming
    the shards in corpus order (memory: the partition's words, not the shards)."""
    ids = partition_ids(part, v, p)
    before = np.zeros(len(ids), np.int64)
    present = set(storage.find(storage.join(out, "df", f"p{part:04d}")))
    written = 0
    for shard in shards:
        url = _part_file(out, "df", part, shard)
        if url not in present:
            continue
        z = storage.load_npz(url)
        local = z["wid"] - (ids[0] if len(ids) else 0)
        quota = np.clip(candidates - before[local], 0, z["df"])
        before[local] += z["df"]
        keep = quota > 0
        if keep.any():
            storage.save_npz(_shard_file(out, "quota", shard, part), wid=z["wid"][keep],
                             quota=quota[keep].astype(np.int32))
            written += 1
    return {"quota_files": written, "node": node_id()}


def pass_b(path: str, out: str, shard: int, v: int, p: int, n: int) -> dict:
    """Pass B (one shard): per word, the ``n`` shortest of its first ``quota`` candidates here,
    sent on by word partition."""
    z = read_files(storage.join(out, "quota", f"s{shard:06d}"), {"wid": _I64, "quota": _I64})
    quota = np.zeros(v, np.int64)
    quota[z["wid"]] = z["quota"]
    wid, ntok, sid = shard_heaps(path, "", None, [], quota, n,
                                 storage.join(out, "candidates", f"s{shard:06d}.npz"))
    write_groups(by_partition(id_partition(wid, v, p), wid=wid, ntok=ntok, sid=sid),
                 lambda k: _part_file(out, "heaps", k, shard))
    return {"rows": len(wid), "node": node_id()}


def pass_m(out: str, part: int, v: int, p: int, n: int) -> dict:
    """Pass M (one partition): the global ``n`` shortest per word, saved, and sent back by
    shard."""
    z = read_files(storage.join(out, "heaps", f"p{part:04d}"),
                   {"wid": _I64, "ntok": _I64, "sid": _I64})
    wid, _, sid = smallest_per_word(z["wid"], z["ntok"], z["sid"], n)
    storage.save_npz(storage.join(out, "pairs", f"p{part:04d}.npz"), word_id=wid, sid=sid)
    ids = partition_ids(part, v, p)
    per_word = np.bincount(wid - ids[0], minlength=len(ids)) if len(ids) else np.zeros(0)
    write_groups(by_partition(sid >> 32, sid=sid, wid=wid),
                 lambda k: _shard_file(out, "chosen", k, part))
    return {"below_n": int((per_word < n).sum()), "missing": int((per_word == 0).sum()),
            "node": node_id()}


def pass_c(path: str, out: str, shard: int, dst: str, lang: str) -> dict:
    """Pass C (one shard): write its selected sentences with the word ids each one serves."""
    z = read_files(storage.join(out, "chosen", f"s{shard:06d}"), {"sid": _I64, "wid": _I64})
    unique = emit_selected(path, dst, lang, z["sid"], z["wid"]) if len(z["sid"]) else 0
    return {"unique": unique, "node": node_id()}


def read_selected(ctx: BuildContext, lang: str) -> tuple[np.ndarray, np.ndarray]:
    """``(word_id, sid)`` of every selected (word, sentence) pair of ``lang``, by word id."""
    z = read_files(ctx.work(NAME, lang, "pairs"), {"word_id": _I64, "sid": _I64})
    return z["word_id"], z["sid"]


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
