"""Stage ``train_data``: which sentences (or translation pairs) step 3 trains and validates on,
and the teacher's sentence embeddings for them, computed once so training never runs the teacher.

Distillation follows the authors' recipe: for each word with at least ``min_sentences``
selected sentences, ``train_per_word + dev_per_word`` random ones (2 + 1), the validation set
capped at ``dev_max``. Pairs (``[pairs.SRC-TGT]`` TSV files whose header names both languages):
shuffled with the build seed; the last ``min(dev_max, 10%)`` are validation. Writes
``train.parquet`` and ``dev.parquet`` (columns ``src``, ``tgt``/``pair`` for pairs, ``teacher``
for ``distill`` and ``kd``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from swe import storage
from swe.build.markers import StageDir
from swe.build.runner import StageResult
from swe.build.stages.extraction import actor_count, length_batches
from swe.build.stages.selection import read_selected, selected_parts
from swe.raysetup import get
from swe.storage import iter_lines, open_input

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["PairsConfig", "Result", "TeacherEmbedder", "pair_languages", "pick_texts",
           "read_pairs", "sample_sentences", "split_pairs"]

log = logging.getLogger("swe.build")
NAME = "train_data"


@dataclass
class PairsConfig:
    """Translation pairs for one language pair ``[pairs.en-de]``: gzip/plain TSV files whose
    header names the two languages' columns (``en<TAB>de``)."""

    paths: list[str] = field(default_factory=list, metadata={
        "help": "TSV files or globs (local or s3://), plain or gzip"})


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Rows written per split (and pairs read per language pair)."""

    train_rows: int
    dev_rows: int
    pairs_skipped: int = 0
    pairs: dict[str, int] = field(default_factory=dict)


def pair_languages(key: str) -> tuple[str, str]:
    """``"en-de"`` → ``("en", "de")``."""
    src, _, tgt = key.partition("-")
    return src, tgt


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[pairs.*]``."""
    from swe.build.config import check_readable

    for key, p in cfg.pairs.items():
        src, tgt = pair_languages(key)
        if not src or not tgt or src == tgt:
            errors.append(f"[pairs.{key}]: name a pair as SRC-TGT, e.g. [pairs.en-de]")
        elif src not in cfg.languages or tgt not in cfg.languages:
            errors.append(f"[pairs.{key}]: both languages must be in languages = "
                          f"{cfg.languages}")
        if not p.paths:
            errors.append(f"[pairs.{key}] has no paths")
        if check_paths:
            check_readable(p.paths, f"pairs.{key}", errors)


def enabled(cfg: BuildConfig) -> bool:
    """Only with a refinement objective."""
    return cfg.refine.objective != "none"


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Distillation samples the selection; pair objectives read only the pair files."""
    return ("selection",) if cfg.refine.objective == "distill" else ()


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The pair files (pair objectives), teacher, seed and sampling settings."""
    r = cfg.refine
    pairs = () if r.objective == "distill" else (sorted(cfg.pairs.items()),)
    return (*pairs, teacher, cfg.seed, r.objective, r.min_sentences, r.train_per_word,
            r.dev_per_word, r.dev_max)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Sample sentences or read pairs, add teacher embeddings if needed, write both splits."""
    r = ctx.cfg.refine
    rng = np.random.default_rng(ctx.cfg.seed)
    extra: dict = {}
    if r.objective == "distill":
        train, dev = _distill_rows(ctx, rng)
    else:
        train, dev, extra = _pair_rows(ctx, rng)
    if r.objective in ("distill", "kd"):
        train, dev = _with_teacher(ctx, train, dev)
    storage.write_parquet(st.path("train.parquet"), train)
    storage.write_parquet(st.path("dev.parquet"), dev)
    if len(train) < r.batch_size or len(dev) < 2:
        raise ValueError(f"only {len(train)} training / {len(dev)} validation rows for "
                         f"refine.batch_size = {r.batch_size}: use more corpus or pairs, or "
                         "lower refine.min_sentences / batch_size")
    return Result(train_rows=len(train), dev_rows=len(dev), **extra)


def _distill_rows(ctx: BuildContext, rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    """Sampled selected sentences as ``src`` rows of both splits."""
    import ray

    r = ctx.cfg.refine
    train_sids, dev_sids = [], []
    for lang in ctx.cfg.languages:
        wid, sid = read_selected(ctx, lang)
        tr, dv = sample_sentences(wid, sid, r.min_sentences, r.train_per_word, r.dev_per_word,
                                  r.dev_max, rng)
        train_sids.append(tr)
        dev_sids.append(dv)
    tr, dv = np.concatenate(train_sids), np.concatenate(dev_sids)
    if len(dv) > r.dev_max:
        dv = np.sort(rng.choice(dv, r.dev_max, replace=False))
    task = ray.remote(num_cpus=0.5)(pick_texts)
    wanted = np.union1d(tr, dv)
    found = pa.concat_tables(get([task.remote(u, wanted) for u in selected_parts(ctx)]))
    sid = found.column("sid").to_numpy()
    return (pa.table({"src": found.filter(pa.array(np.isin(sid, tr))).column("text")}),
            pa.table({"src": found.filter(pa.array(np.isin(sid, dv))).column("text")}))


def _pair_rows(ctx: BuildContext, rng: np.random.Generator) -> tuple[pa.Table, pa.Table, dict]:
    """Every ``[pairs.*]`` file read in a task, shuffled and split; stats of what was read."""
    import ray

    read = ray.remote(num_cpus=0.5)(read_pairs)
    jobs = [(key, read.remote(path, *pair_languages(key)))
            for key, p in ctx.cfg.pairs.items() for path in storage.expand_inputs(p.paths)]
    src, tgt, which, skipped = [], [], [], 0
    for key, ref in jobs:
        xs, ys, bad = get(ref)
        src += xs
        tgt += ys
        which += [key] * len(xs)
        skipped += bad
    if not src:
        raise ValueError("no translation pair found in [pairs] files")
    train, dev = split_pairs(src, tgt, which, ctx.cfg.refine.dev_max, rng)
    return train, dev, {"pairs_skipped": skipped,
                        "pairs": {k: which.count(k) for k in ctx.cfg.pairs}}


def _with_teacher(ctx: BuildContext, train: pa.Table, dev: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Add the teacher's sentence embedding of ``src`` as a ``teacher`` column (one Ray Data
    actor job over both splits)."""
    import ray

    ex = ctx.cfg.extraction
    texts = train.column("src").to_pylist() + dev.column("src").to_pylist()
    items = pa.table({"row": np.arange(len(texts)), "text": pa.array(texts, pa.string())})
    blocks = max(1, math.ceil(len(texts) / ex.batch_size))
    ds = ray.data.from_arrow(items).repartition(blocks).map_batches(
        TeacherEmbedder, batch_size=ex.batch_size, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(
            size=actor_count(ex.actors, ex.gpus_per_actor, ex.threads_per_actor)),
        num_cpus=ex.cpus_per_actor, num_gpus=ex.gpus_per_actor or None,
        fn_constructor_kwargs={"teacher_dir": ctx.teacher, "token_budget": ex.token_budget,
                               "threads": ex.threads_per_actor,
                               "trust_remote_code": ctx.cfg.trust_remote_code})
    t0 = time.perf_counter()
    got = pa.concat_tables(list(ds.iter_batches(batch_format="pyarrow", batch_size=None)))
    got = got.sort_by("row")
    if got.num_rows != len(texts) or got.column("row").to_numpy()[-1] != len(texts) - 1:
        raise RuntimeError(f"teacher embeddings: {got.num_rows} rows back for {len(texts)}")
    log.info("[train_data] teacher embedded %d sentences in %.0fs", len(texts),
             time.perf_counter() - t0)
    emb = got.column("teacher").combine_chunks()
    n = len(train)
    return (train.append_column("teacher", emb.slice(0, n)),
            dev.append_column("teacher", emb.slice(n)))


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
    t = storage.read_parquet(part_url, ["sid", "text"])
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

        from swe.build.teacher import Teacher

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.teacher = Teacher(teacher_dir, device=device,
                               threads=threads if device == "cpu" else None,
                               trust_remote_code=trust_remote_code)
        self.budget = token_budget

    def __call__(self, batch: pa.Table) -> pa.Table:
        """The ``teacher`` embedding of each row's ``text``, keyed by ``row``."""
        texts = batch.column("text").to_pylist()
        ntok = np.array([len(ids) for ids in self.teacher.tokenizer(
            texts, add_special_tokens=False)["input_ids"]])
        out = np.zeros((len(texts), self.teacher.dim), np.float32)
        for idx in length_batches(ntok, self.budget, specials=8):  # + prefix
            out[idx] = self.teacher.embed([texts[k] for k in idx])
        flat = pa.array(out.reshape(-1))
        return pa.table({"row": batch.column("row"),
                         "teacher": pa.FixedSizeListArray.from_arrays(flat, out.shape[1])})


def read_pairs(path: str, src: str, tgt: str) -> tuple[list[str], list[str], int]:
    """Translation pairs from a TSV file (plain or compressed) whose header names ``src`` and
    ``tgt`` columns; returns ``(sources, targets, skipped)`` — rows with an empty side or
    invalid UTF-8 are skipped and counted."""
    xs: list[str] = []
    ys: list[str] = []
    skipped = 0
    cols = None
    with open_input(path) as f:
        for raw in iter_lines(f):
            try:
                fields = raw.decode("utf-8").rstrip("\r\n").split("\t")
            except UnicodeDecodeError:
                skipped += 1
                continue
            if cols is None:
                if src not in fields or tgt not in fields:
                    raise ValueError(f"{path}: the header {fields} must name columns {src!r} "
                                     f"and {tgt!r} (e.g. 'en<TAB>de')")
                cols = fields.index(src), fields.index(tgt)
                continue
            x = fields[cols[0]].strip() if cols[0] < len(fields) else ""
            y = fields[cols[1]].strip() if cols[1] < len(fields) else ""
            if x and y:
                xs.append(x)
                ys.append(y)
            else:
                skipped += 1
    return xs, ys, skipped
