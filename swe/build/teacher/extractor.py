"""The extraction stage's teacher actor: sentences and the word ids they serve → fixed-point
per-word sums (and, with a store, every unit's vector as a store row), plus the two exact
helpers it relies on: character-span alignment of units to teacher tokens, and the fixed-point
grid that makes sums independent of batching."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pyarrow as pa

from swe import storage
from swe.build.outputs import vocab_words
from swe.build.shuffle import by_partition, id_partition, write_groups
from swe.build.tasks import node_id
from swe.text import language, units

__all__ = ["FIXED_POINT", "Extractor", "align", "part_key", "to_fixed"]


def part_key(path: str) -> str:
    """A selection part's (or store bucket's) name from its file path."""
    return path.rsplit("/", 1)[-1].removesuffix(".parquet")


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


class Extractor:
    """Ray Data actor: sentences + the word ids they serve → fixed-point per-word sums.

    One actor pool serves every wave of an extraction run (a wave is a group of parts, the unit
    of resumption; ``waves`` maps each part to its wave's folder name). The rows of each batch
    that belong to wave folder ``W`` have their sums written by word partition to
    ``<out>/W/p<P>/b<first sid>.npz`` (a retried batch rewrites the same files); with
    ``targets`` (a folder) also each sentence's pooled teacher embedding to
    ``<targets>/W/b<first sid>.parquet``. The actor returns only ``(part, sentences)`` rows, so
    the driver can check that every sentence of every part was processed exactly once.
    """

    def __init__(self, teacher_dir: str, vocab: dict[str, str], lang_offset: dict[str, int],
                 total: int, parts: int, out: str, waves: dict[str, str], token_budget: int,
                 mode: str = "sentence", threads: int | None = 1, trust_remote_code: bool = False,
                 targets: str | None = None, onnx: Any = None, store: Any = None) -> None:
        from swe.build.teacher.model import open_teacher
        from swe.text import unk_token

        self.teacher = open_teacher(teacher_dir, onnx, threads, trust_remote_code)
        self.fast_tok = storage.load_tokenizer(teacher_dir)
        self.unk = unk_token(self.fast_tok)
        self.vocab = {lang: vocab_words(url) for lang, url in vocab.items()}
        self.lang_offset = lang_offset
        self.total, self.parts, self.out, self.waves = total, parts, out, waves
        self.budget = token_budget
        self.mode = mode
        self.shift = len(self.teacher.spec.prefix)
        self.targets = targets
        self.store = store  # a store.Namespace: every sentence's units are kept there
        self.actor = f"{node_id()}:{os.getpid()}"

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Write one batch's per-word sums, wave by wave; its sentences per part, and the
        seconds this actor spent on it (on the first row)."""
        start = time.perf_counter()
        col = "part" if "part" in batch.column_names else "path"
        parts = [part_key(p) for p in batch.column(col).to_pylist()]
        rows: dict[str, list[int]] = {}
        for i, part in enumerate(parts):
            rows.setdefault(self.waves[part], []).append(i)
        for wave, idx in rows.items():
            self._write(batch if len(rows) == 1 else batch.take(idx), wave)
        keys = sorted(set(parts))
        busy = [time.perf_counter() - start] + [0.0] * (len(keys) - 1)
        return pa.table({"part": pa.array(keys, pa.string()),
                         "sentences": pa.array([parts.count(k) for k in keys], pa.int64()),
                         "actor": pa.array([self.actor] * len(keys), pa.string()),
                         "busy_s": pa.array(busy, pa.float64())})

    def _write(self, batch: pa.Table, wave: str) -> None:
        """The sums (and targets, and store rows) of ``batch``, all of one wave's parts."""
        texts = batch.column("text").to_pylist()
        langs = batch.column("lang").to_pylist()
        sums: dict[int, np.ndarray] = {}
        counts: dict[int, int] = {}
        keep = self.targets or self.store is not None
        pooled = np.zeros((len(texts), self.teacher.dim), np.float32) if keep else None
        stored = []
        for idx, hidden, offsets, mask in self.teacher.forward_batches(texts, self.budget):
            if pooled is not None:
                pooled[idx] = self.teacher.pool(hidden, mask)
            for j, i in enumerate(idx):
                if self.store is not None:
                    found, row = self._stored_units(batch, i, texts[i], langs[i], hidden[j],
                                                    offsets[j], mask[j], pooled[i])
                    stored.append(row)
                else:
                    found = [(gid, hidden[j, tok].mean(axis=0, dtype=np.float64)) for gid, tok
                             in self._targets(batch, i, texts[i], langs[i], offsets[j], mask[j])]
                for gid, vector in found:
                    v = to_fixed(vector)
                    sums[gid] = sums[gid] + v if gid in sums else v
                    counts[gid] = counts.get(gid, 0) + 1
        first_sid = int(batch.column("sid").to_numpy().min())
        first = f"b{first_sid:020d}"
        if stored:
            from swe.build.teacher.store import write_rows

            write_rows(self.store, stored, first_sid)
        if self.targets:
            storage.write_parquet(storage.join(self.targets, wave, first + ".parquet"), pa.table({
                "sid": batch.column("sid"), "src": batch.column("text"),
                "teacher": pa.FixedSizeListArray.from_arrays(pa.array(pooled.reshape(-1)),
                                                             pooled.shape[1])}))
        if sums:
            gids = np.fromiter(sums, np.int64, len(sums))
            name = first + ".npz"
            write_groups(by_partition(id_partition(gids, self.total, self.parts), word_id=gids,
                                      sum=np.stack(list(sums.values())),
                                      count=np.fromiter(counts.values(), np.int64, len(gids))),
                         lambda k: storage.join(self.out, wave, f"p{k:04d}", name))

    def _stored_units(self, batch: pa.Table, i: int, text: str, lang: str, hidden: np.ndarray,
                      offsets: np.ndarray, mask: np.ndarray, pooled: np.ndarray
                      ) -> tuple[list[tuple[int, np.ndarray]], tuple]:
        """Every unit's vector of row ``i`` rounded to the store's float16 (its store row), and
        the vectors of the words the row serves, taken from those rounded values so a word's
        sum is the same whether its sentence was encoded now or read from the store."""
        from swe.build.teacher.store import sentence_key

        spans = units(text, language(lang), self.fast_tok, self.unk)
        keys = list(dict.fromkeys(k for k, _, _ in spans))
        pos = align(spans, keys, offsets, mask, self.shift)
        vecs = {k: hidden[pos[k]].mean(axis=0, dtype=np.float64).astype(np.float16)
                for k in keys if k in pos and len(pos[k])}
        words, off = self.vocab[lang], self.lang_offset[lang]
        found = [(w + off, vecs[words[w]].astype(np.float64))
                 for w in batch.column("word_ids")[i].as_py() if words[w] in vecs]
        matrix = np.stack(list(vecs.values())) if vecs else np.zeros((0, self.teacher.dim),
                                                                       np.float16)
        row = (sentence_key(lang, text), lang, list(vecs), matrix.tobytes(),
               pooled.astype(np.float32).tobytes())
        return found, row

    def _targets(self, batch: pa.Table, i: int, text: str, lang: str, offsets: np.ndarray,
                 mask: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """``(global word id, token indices)`` of each word row ``i`` serves."""
        wids = batch.column("word_ids")[i].as_py()
        off = self.lang_offset[lang]
        if self.mode == "model2vec":  # the whole text is the word
            valid = (mask > 0) & (offsets[:, 1] > offsets[:, 0])
            found = [(wids[0] + off, np.flatnonzero(valid))]
        else:
            words = self.vocab[lang]
            spans = units(text, language(lang), self.fast_tok, self.unk)
            pos = align(spans, [words[w] for w in wids], offsets, mask, self.shift)
            found = [(w + off, pos[words[w]]) for w in wids if words[w] in pos]
        return [(g, t) for g, t in found if len(t)]
