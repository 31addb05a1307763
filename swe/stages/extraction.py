"""Stage 5: word vectors from the teacher.

A Ray Data actor pool runs the teacher (one model per actor: per GPU on GPU clusters, fractional
CPUs otherwise). Each actor sorts its sentences by length and forms batches under a token budget;
for every vocabulary word a sentence serves it takes the raw last hidden states of the tokens
overlapping the word's *first* occurrence (character-span overlap, so "don't" aligns however the
teacher splits it), averages them, and emits per-word sums and counts for the batch. The driver
adds those up; each selection part is one job whose partial sums are saved with a shard marker.

``mode = "model2vec"`` instead embeds every vocabulary entry alone (Model2Vec's extraction).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from swe.text import language, units

__all__ = ["Extractor", "PartSums", "align", "length_batches"]


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


class PartSums:
    """Running per-word sums and counts of one part (compacted as it grows)."""

    def __init__(self) -> None:
        self.ids: list[np.ndarray] = []
        self.sums: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.rows = 0
        self.sentences = 0

    def add(self, ids, sums, counts, sentences: int) -> None:
        self.ids.append(ids)
        self.sums.append(sums)
        self.counts.append(counts)
        self.rows += len(ids)
        self.sentences += sentences
        if self.rows > 100_000:
            ids, sums, counts = self.result()
            self.ids, self.sums, self.counts, self.rows = [ids], [sums], [counts], len(ids)

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(word_ids, sums, counts)`` with one row per distinct word."""
        if not self.ids:
            return np.zeros(0, np.int64), np.zeros((0, 1)), np.zeros(0, np.int64)
        ids = np.concatenate(self.ids)
        uniq, inv = np.unique(ids, return_inverse=True)
        sums = np.zeros((len(uniq), self.sums[0].shape[1]))
        np.add.at(sums, inv, np.concatenate(self.sums))
        counts = np.bincount(inv, weights=np.concatenate(self.counts)).astype(np.int64)
        return uniq, sums, counts


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

        from swe.stages.corpus import load_tokenizer
        from swe.teacher import Teacher

        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.teacher = Teacher(teacher_dir, device=device, threads=threads,
                               trust_remote_code=trust_remote_code)
        self.fast_tok = load_tokenizer(teacher_dir)
        from swe.model import unk_token

        self.unk = unk_token(self.fast_tok)
        self.vocab = vocab
        self.lang_offset = lang_offset
        self.budget = token_budget
        self.mode = mode
        self.shift = len(self.teacher.spec.prefix)

    def __call__(self, batch: pa.Table) -> pa.Table:
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
                    v = hidden[j, tok_idx].mean(axis=0, dtype=np.float64)
                    if w in sums:
                        sums[w] += v
                        counts[w] += 1
                    else:
                        sums[w] = v
                        counts[w] = 1
        for p in set(parts):  # sentences processed per part
            sums[(p, -1)] = np.zeros(self.teacher.dim)
            counts[(p, -1)] = parts.count(p)
        mat = np.stack(list(sums.values())).astype(np.float64)
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
