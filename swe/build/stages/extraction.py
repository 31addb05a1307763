"""Stage ``extraction``: word vectors from the teacher → the step-1 model.

A Ray Data actor pool runs the teacher (one model per actor: per GPU on GPU clusters, fractional
CPUs otherwise). Each actor sorts its sentences by length and forms batches under a token budget;
for every vocabulary word a sentence serves it takes the raw last hidden states of the tokens
overlapping the word's *first* occurrence (character-span overlap, so "don't" aligns however the
teacher splits it), averages them, and emits per-word sums and counts for the batch. The driver
adds those up per selection part; each part's sums are saved with a shard marker as soon as all
its sentences are in, so a killed build resumes part by part. The partial sums then give each
word's mean vector; identical strings across languages are averaged.

``mode = "model2vec"`` instead embeds every vocabulary entry alone (Model2Vec's extraction).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from swe import storage
from swe.build.markers import StageDir
from swe.build.runner import StageResult
from swe.build.stages.selection import selected_parts
from swe.build.stages.vocab import read_vocab
from swe.text import language, units

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Extractor", "PartSums", "Result", "actor_count", "align", "length_batches"]

log = logging.getLogger("swe.build")
NAME = "extraction"
MODES = ("sentence", "model2vec")


@dataclass
class ExtractionConfig:
    """``[extraction]``: the mode and the teacher actor pool."""

    mode: str = "sentence"  # sentence (the paper) | model2vec (each word alone)
    token_budget: int = 16_384  # padded tokens per teacher forward pass
    actors: int = 0  # 0 = one per GPU, else one per CPU (single-threaded)
    threads_per_actor: int = 1  # torch threads of a CPU actor
    cpus_per_actor: float = 0.5
    gpus_per_actor: float = 0.0  # 1.0 on GPU clusters
    batch_size: int = 1024  # sentences handed to an actor at once
    job_sentences: int = 100_000  # sentences per Ray Data job: the unit of resumption


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Throughput of this run and the words that got vectors."""

    actors: int = 0  # 0 when every part was already done
    sentences: int = 0
    word_vectors: int = 0
    sentences_per_s: float = 0.0
    words: int
    words_without_vectors: int


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[extraction]``."""
    ex = cfg.extraction
    if ex.mode not in MODES:
        errors.append(f"extraction.mode = {ex.mode!r}; use 'sentence' or 'model2vec'")
    if ex.token_budget < 512 or min(ex.batch_size, ex.job_sentences, ex.threads_per_actor) < 1:
        errors.append("extraction: token_budget must be >= 512; batch_size, job_sentences and "
                      "threads_per_actor >= 1")


def enabled(cfg: BuildConfig) -> bool:
    """Always runs."""
    return True


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """The selected sentences, or in Model2Vec mode the vocabulary itself."""
    return ("vocab",) if cfg.extraction.mode == "model2vec" else ("selection",)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The mode (the actor pool's settings do not change the vectors)."""
    return (cfg.extraction.mode,)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Extract every unfinished part, sum the partials, save ``<output>/step1``."""
    vocab, _ = read_vocab(ctx)
    offsets = np.cumsum([0] + [len(vocab[lang]) for lang in ctx.cfg.languages])
    waves = _model2vec_waves(ctx, st, vocab) if ctx.cfg.extraction.mode == "model2vec" \
        else _sentence_waves(ctx, st)
    stats = _extract(ctx, st, vocab, offsets, waves) if waves else {}
    if not waves:
        log.info("[extraction] every part already done")
    words, vectors, without = _assemble(st, ctx.cfg.languages, vocab, offsets)
    ctx.save_step("step1", words, vectors, publish=False)
    return Result(**stats, words=len(words), words_without_vectors=without)


Wave = tuple[dict[str, int], Callable[[], Any]]


def _model2vec_waves(ctx: BuildContext, st: StageDir, vocab: dict[str, list[str]]) -> list[Wave]:
    """One job over every vocabulary entry, each its own "sentence"."""
    import ray

    if st.shard_done("m2v"):
        return []
    tok = storage.load_tokenizer(ctx.teacher)
    rows = [{"text": w, "lang": lang, "word_ids": [i], "part": "m2v",
             "ntok": len(tok.encode(w, add_special_tokens=False).ids)}
            for lang in ctx.cfg.languages for i, w in enumerate(vocab[lang])]
    blocks = max(1, math.ceil(len(rows) / ctx.cfg.extraction.batch_size))
    return [({"m2v": len(rows)}, lambda: ray.data.from_items(rows, override_num_blocks=blocks))]


def _sentence_waves(ctx: BuildContext, st: StageDir) -> list[Wave]:
    """Ray Data jobs ("waves") of about ``extraction.job_sentences`` sentences over the
    unfinished selection parts."""
    import ray

    pending = []
    for url in selected_parts(ctx):
        key = url.rsplit("/", 1)[-1].removesuffix(".parquet")
        if not st.shard_done(key):
            fs, path = storage.filesystem(url)
            with fs.open(path, "rb") as fh:
                pending.append((key, url, pq.ParquetFile(fh).metadata.num_rows))
    waves, group = [], []
    for i, item in enumerate(pending):
        group.append(item)
        if sum(g[2] for g in group) >= ctx.cfg.extraction.job_sentences or i == len(pending) - 1:
            expected = {k: n for k, _, n in group}
            pafs, _ = storage.pyarrow_filesystem(group[0][1])
            paths = [storage.pyarrow_filesystem(u)[1] for _, u, _ in group]
            # Enough blocks that every actor stays busy (a part is one file otherwise).
            blocks = max(len(paths), math.ceil(sum(expected.values())
                                               / ctx.cfg.extraction.batch_size))
            waves.append((expected, lambda p=paths, fs_=pafs, nb=blocks: ray.data.read_parquet(
                p, filesystem=fs_, include_paths=True, override_num_blocks=nb).repartition(nb)))
            group = []
    return waves


def _extract(ctx: BuildContext, st: StageDir, vocab: dict[str, list[str]],
             offsets: np.ndarray, waves: list[Wave]) -> dict:
    """Run the waves through the teacher actor pool; save and mark each part when complete."""
    import ray

    ex = ctx.cfg.extraction
    n_actors = actor_count(ex.actors, ex.gpus_per_actor, ex.threads_per_actor)
    kwargs = {"teacher_dir": ctx.teacher, "vocab": vocab,
              "lang_offset": {lang: int(offsets[i]) for i, lang in enumerate(ctx.cfg.languages)},
              "token_budget": ex.token_budget, "mode": ex.mode,
              "threads": ex.threads_per_actor if not ex.gpus_per_actor else None,
              "trust_remote_code": ctx.cfg.trust_remote_code}
    t0, total_sent, total_vec = time.perf_counter(), 0, 0
    for w, (expected, make) in enumerate(waves):
        log.info("[extraction] job %d/%d: %d parts, %d sentences", w + 1, len(waves),
                 len(expected), sum(expected.values()))
        ds = make().map_batches(
            Extractor, batch_size=ex.batch_size, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=n_actors), num_cpus=ex.cpus_per_actor,
            num_gpus=ex.gpus_per_actor or None, fn_constructor_kwargs=kwargs)
        acc = {k: PartSums() for k in expected}
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            for key in acc_add(acc, batch):
                sent, vec = _finish_part(st, key, acc, expected[key])
                total_sent, total_vec = total_sent + sent, total_vec + vec
        if acc:
            raise RuntimeError(f"extraction ended with incomplete parts: {sorted(acc)}")
        log.info("[extraction] %d sentences done, %.1f sentences/s", total_sent,
                 total_sent / max(time.perf_counter() - t0, 1e-9))
    secs = time.perf_counter() - t0
    return {"actors": n_actors, "sentences": total_sent, "word_vectors": total_vec,
            "sentences_per_s": round(total_sent / max(secs, 1e-9), 1)}


def _finish_part(st: StageDir, key: str, acc: dict[str, PartSums],
                 expected: int) -> tuple[int, int]:
    """Save and mark a part once all its sentences are in; ``(sentences, vectors)`` saved."""
    part = acc[key]
    if part.sentences > expected:
        raise RuntimeError(f"part {key}: {part.sentences} sentences processed for "
                           f"{expected} rows (a retried batch counted twice?)")
    if part.sentences < expected:
        return 0, 0
    wid, sums, counts = part.result()
    storage.save_npz(st.path("partials", f"{key}.npz"), word_id=wid, sum=sums, count=counts)
    st.mark_shard(key, {"sentences": part.sentences, "vectors": int(counts.sum())})
    del acc[key]
    return part.sentences, int(counts.sum())


def acc_add(acc: dict[str, PartSums], batch: pa.Table) -> list[str]:
    """Add one output batch of the extractor to the per-part sums; the parts it touched."""
    parts = batch.column("part").to_pylist()
    wid = batch.column("word_id").to_numpy()
    cnt = batch.column("count").to_numpy()
    flat = batch.column("sum").combine_chunks()
    mat = flat.values.to_numpy().reshape(len(batch), -1)
    touched = []
    for key in set(parts):
        m = np.asarray([p == key for p in parts])
        sent = m & (wid < 0)
        acc[key].add(wid[m & ~sent], mat[m & ~sent], cnt[m & ~sent], int(cnt[sent].sum()))
        touched.append(key)
    return touched


def _assemble(st: StageDir, languages: list[str], vocab: dict[str, list[str]],
              offsets: np.ndarray) -> tuple[list[str], np.ndarray, int]:
    """Sum the partials → mean vectors; identical strings across languages are averaged.
    Returns ``(words, vectors, words without vectors)``."""
    total = int(offsets[-1])
    sums, counts = None, np.zeros(total, np.int64)
    for url in storage.find(st.path("partials")):
        z = storage.load_npz(url)
        if sums is None:
            sums = np.zeros((total, z["sum"].shape[1]))
        sums[z["word_id"]] += z["sum"]
        counts[z["word_id"]] += z["count"]
    if sums is None:
        raise ValueError("extraction produced no vectors: is the selection empty?")
    all_words = [w for lang in languages for w in vocab[lang]]
    merged: dict[str, list[int]] = {}
    for i, w in enumerate(all_words):
        if counts[i]:
            merged.setdefault(w, []).append(i)
    words = list(merged)
    vectors = np.stack([np.mean([sums[i] / counts[i] for i in merged[w]], axis=0)
                        for w in words]).astype(np.float32)
    return words, vectors, int((counts == 0).sum())


def length_batches(ntok: np.ndarray, budget: int, specials: int = 2) -> list[np.ndarray]:
    """Indices sorted by length, cut into batches whose padded size stays within ``budget``."""
    order = np.argsort(ntok, kind="stable")
    batches, cur, longest = [], [], 0
    for i in order:
        n = int(ntok[i]) + specials
        if cur and max(longest, n) * (len(cur) + 1) > budget:
            batches.append(np.asarray(cur))
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(np.asarray(cur))
    return batches


def align(spans: list[tuple[str, int, int]], targets: list[str], offsets: np.ndarray,
          mask: np.ndarray, shift: int = 0) -> dict[str, np.ndarray]:
    """Token indices of each target word's first occurrence.

    ``spans`` are the sentence's units ``(key, start, end)``; ``offsets``/``mask`` the teacher's
    token character offsets and attention mask for the (possibly prefixed) text, ``shift`` the
    prefix length. Tokens overlap a unit when their spans intersect; special tokens (empty
    spans) never do. Targets absent from the sentence are left out.
    """
    first: dict[str, tuple[int, int]] = {}
    for key, a, b in spans:
        first.setdefault(key, (a + shift, b + shift))
    valid = (mask > 0) & (offsets[:, 1] > offsets[:, 0])
    out = {}
    for t in targets:
        if t in first:
            a, b = first[t]
            idx = np.flatnonzero(valid & (offsets[:, 0] < b) & (offsets[:, 1] > a))
            if len(idx):
                out[t] = idx
    return out


FIXED_POINT = 2.0**36  # word vectors are summed as integers in units of 2^-36
_MAX_VALUE = 2.0**20  # |a hidden-state component| beyond this would risk int64 overflow


def to_fixed(v: np.ndarray) -> np.ndarray:
    """One sentence's word vector on the fixed-point grid (int64 units of 2^-36).

    Integer sums do not depend on the order or grouping of their terms, so however sentences
    are batched and whichever actor finishes first, the sums (and the step-1 model) are the same
    bit for bit; 2^-36 is far below float32 resolution at the scale of hidden states."""
    if not np.isfinite(v).all() or np.abs(v).max(initial=0) >= _MAX_VALUE:
        raise ValueError("the teacher's hidden states are not finite or not of a sane scale "
                         f"(max |value| {np.abs(v).max():.3g})")
    return np.rint(v * FIXED_POINT).astype(np.int64)


class PartSums:
    """Running per-word fixed-point sums and counts of one part (compacted as it grows)."""

    def __init__(self) -> None:
        self.ids: list[np.ndarray] = []
        self.sums: list[np.ndarray] = []  # int64, in units of 1 / FIXED_POINT
        self.counts: list[np.ndarray] = []
        self.rows = 0
        self.sentences = 0

    def add(self, ids: np.ndarray, sums: np.ndarray, counts: np.ndarray, sentences: int) -> None:
        """Add one batch's per-word rows (``sums`` from :func:`to_fixed`) and its sentences."""
        self.ids.append(ids)
        self.sums.append(np.asarray(sums, np.int64))
        self.counts.append(counts)
        self.rows += len(ids)
        self.sentences += sentences
        if self.rows > 100_000:
            ids, fixed, counts = self._merged()
            self.ids, self.sums, self.counts, self.rows = [ids], [fixed], [counts], len(ids)

    def _merged(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.concatenate(self.ids)
        uniq, inv = np.unique(ids, return_inverse=True)
        fixed = np.zeros((len(uniq), self.sums[0].shape[1]), np.int64)
        np.add.at(fixed, inv, np.concatenate(self.sums))
        counts = np.bincount(inv, weights=np.concatenate(self.counts)).astype(np.int64)
        return uniq, fixed, counts

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(word_ids, sums, counts)`` with one row per distinct word."""
        if not self.ids:
            return np.zeros(0, np.int64), np.zeros((0, 1)), np.zeros(0, np.int64)
        uniq, fixed, counts = self._merged()
        return uniq, fixed / FIXED_POINT, counts


class Extractor:
    """Ray Data actor: sentences + the word ids they serve → per-word (sum, count) per part.

    Output rows: ``(part, word_id, count, sum)`` with global word ids, plus one row per part
    with ``word_id = -1`` and ``count`` = sentences processed, so the driver knows when a part
    is complete.
    """

    def __init__(self, teacher_dir: str, vocab: dict[str, list[str]],
                 lang_offset: dict[str, int], token_budget: int, mode: str = "sentence",
                 threads: int = 1, trust_remote_code: bool = False):
        import torch

        from swe.build.teacher import Teacher

        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.teacher = Teacher(teacher_dir, device=device, threads=threads,
                               trust_remote_code=trust_remote_code)
        self.fast_tok = storage.load_tokenizer(teacher_dir)
        from swe.model import unk_token

        self.unk = unk_token(self.fast_tok)
        self.vocab = vocab
        self.lang_offset = lang_offset
        self.budget = token_budget
        self.mode = mode
        self.shift = len(self.teacher.spec.prefix)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Per-word sums and counts (and sentences per part) of one batch."""
        texts = batch.column("text").to_pylist()
        langs = batch.column("lang").to_pylist()
        col = "part" if "part" in batch.column_names else "path"
        parts = [p.rsplit("/", 1)[-1].removesuffix(".parquet")
                 for p in batch.column(col).to_pylist()]
        wids = batch.column("word_ids").to_pylist()
        ntok = batch.column("ntok").to_numpy()
        sums: dict[tuple[str, int], np.ndarray] = {}
        counts: dict[tuple[str, int], int] = {}
        for idx in length_batches(ntok, self.budget):
            sub = [texts[i] for i in idx]
            hidden, offsets, mask = self.teacher.hidden_states(sub)
            for j, i in enumerate(idx):
                if self.mode == "model2vec":  # the whole text is the word
                    valid = (mask[j] > 0) & (offsets[j, :, 1] > offsets[j, :, 0])
                    found = {0: np.flatnonzero(valid)}
                    targets = {0: wids[i][0]}
                else:
                    words = self.vocab[langs[i]]
                    keys = [words[w] for w in wids[i]]
                    spans = units(texts[i], language(langs[i]), self.fast_tok, self.unk)
                    pos = align(spans, keys, offsets[j], mask[j], self.shift)
                    found = pos
                    targets = {words[w]: w for w in wids[i]}
                off = self.lang_offset[langs[i]]
                for key, tok_idx in found.items():
                    if not len(tok_idx):
                        continue
                    w = (parts[i], targets[key] + off)
                    v = to_fixed(hidden[j, tok_idx].mean(axis=0, dtype=np.float64))
                    if w in sums:
                        sums[w] += v
                        counts[w] += 1
                    else:
                        sums[w] = v
                        counts[w] = 1
        for p in set(parts):  # sentences processed per part
            sums[(p, -1)] = np.zeros(self.teacher.dim, np.int64)
            counts[(p, -1)] = parts.count(p)
        mat = np.stack(list(sums.values()))
        return pa.table({
            "part": pa.array([k[0] for k in sums], pa.string()),
            "word_id": np.fromiter((k[1] for k in sums), dtype=np.int64, count=len(sums)),
            "count": np.fromiter(counts.values(), dtype=np.int64, count=len(counts)),
            "sum": pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1)),
                                                     self.teacher.dim),
        })


def actor_count(actors: int, gpus_per_actor: float, threads: int = 1) -> int:
    """Actors to start: as configured, else one per GPU, else one teacher per ``threads`` CPUs
    (each reserves only ``cpus_per_actor`` so reading tasks are never starved)."""
    import ray

    if actors:
        return actors
    res = ray.cluster_resources()
    if gpus_per_actor and res.get("GPU"):
        return max(1, int(res["GPU"] / gpus_per_actor))
    return max(1, math.floor(res.get("CPU", 1) / threads))
