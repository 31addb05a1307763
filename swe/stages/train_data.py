"""Refinement data: which sentences (or translation pairs) step 3 trains and validates on, and
the teacher's sentence embeddings for them, computed once so training never runs the teacher.

Distillation follows the authors' recipe: for each word with at least ``min_sentences``
selected sentences, ``train_per_word + dev_per_word`` random ones (2 + 1), the validation set
capped at ``dev_max``. Pairs: shuffled with the build seed; the last ``dev_max`` are validation.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from swe.stages.corpus import read_parquet

__all__ = ["TeacherEmbedder", "pick_texts", "sample_sentences", "split_pairs"]


def sample_sentences(word_id: np.ndarray, sid: np.ndarray, min_sentences: int,
                     train_per_word: int, dev_per_word: int, dev_max: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(train_sids, dev_sids)`` from selection pairs sorted by ``word_id``. A sentence drawn
    for both sets stays in training only; both are unique and sorted."""
    per_word = np.bincount(word_id) if len(word_id) else np.zeros(0, np.int64)
    start = np.concatenate([[0], np.cumsum(per_word)[:-1]]).astype(np.int64)
    train, dev = [], []
    k = train_per_word + dev_per_word
    for w in np.flatnonzero(per_word >= min_sentences):
        picks = sid[start[w] + rng.choice(per_word[w], k, replace=False)]
        train.append(picks[:train_per_word])
        dev.append(picks[train_per_word:])
    tr = np.unique(np.concatenate(train)) if train else np.zeros(0, np.int64)
    dv = np.setdiff1d(np.concatenate(dev), tr) if dev else np.zeros(0, np.int64)
    if len(dv) > dev_max:
        dv = np.sort(rng.choice(dv, dev_max, replace=False))
    return tr, dv


def pick_texts(part_url: str, sids: np.ndarray) -> pa.Table:
    """Rows ``(sid, text)`` of one selection part whose sid is in ``sids``."""
    t = read_parquet(part_url, ["sid", "text"])
    return t.filter(pa.array(np.isin(t.column("sid").to_numpy(), sids)))


def split_pairs(src: list[str], tgt: list[str], pair: list[str], dev_max: int,
                rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    """Shuffle the pairs; the last ``min(dev_max, 10%)`` are validation, the rest training."""
    order = rng.permutation(len(src))
    n_dev = min(dev_max, len(src) // 10)
    t = pa.table({"src": pa.array(src), "tgt": pa.array(tgt), "pair": pa.array(pair)})
    t = t.take(pa.array(order))
    return t.slice(0, len(src) - n_dev), t.slice(len(src) - n_dev)


class TeacherEmbedder:
    """Ray Data actor: the teacher's pooled sentence embeddings for a batch's ``text`` column,
    in length-sorted sub-batches under a padded-token budget."""

    def __init__(self, teacher_dir: str, token_budget: int = 16_384, threads: int | None = 1,
                 device: str | None = None, trust_remote_code: bool = False) -> None:
        import torch

        from swe.teacher import Teacher

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.teacher = Teacher(teacher_dir, device=device,
                               threads=threads if device == "cpu" else None,
                               trust_remote_code=trust_remote_code)
        self.budget = token_budget

    def __call__(self, batch: pa.Table) -> pa.Table:
        from swe.stages.extraction import length_batches

        texts = batch.column("text").to_pylist()
        ntok = np.array([len(ids) for ids in self.teacher.tokenizer(
            texts, add_special_tokens=False)["input_ids"]])
        out = np.zeros((len(texts), self.teacher.dim), np.float32)
        for idx in length_batches(ntok, self.budget, specials=8):  # + prefix
            out[idx] = self.teacher.embed([texts[k] for k in idx])
        flat = pa.array(out.reshape(-1))
        return pa.table({"row": batch.column("row"),
                         "teacher": pa.FixedSizeListArray.from_arrays(flat, out.shape[1])})
