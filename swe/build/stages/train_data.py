"""Stage ``train_data``: the rows step 3 trains and validates on, made and written by Ray Data
(Parquet shards under ``train/`` and ``dev/``); the driver holds only metadata.

*Pairs* (``contrastive``, ``kd``): each ``[pairs.SRC-TGT]`` source (CCMatrix Moses zip or TSV,
headered TSV, aligned files; :mod:`swe.build.pairs.sources`) is streamed by a read task that
filters rows (score, length window, identical sides, bad lines) and counts drops by reason.
Duplicate pairs go to one block by a hash shuffle on the pair's hash, and the best-scored one stays;
``max_pairs`` keeps a pair's best-scored rows (a distributed sort). A global sort on a seed-keyed
hash of each pair shuffles them — a uniformly random order that is the same whatever the
cluster or block layout — and the last ``min(dev_max, 10%)`` rows are validation.

*Distillation*: the authors' recipe — for each word with at least ``min_sentences`` selected
sentences, ``train_per_word + dev_per_word`` random ones — drawn in one task per word partition
of the selection; a Ray Data pass over the selected sentences labels each drawn sentence
(training wins over validation), shuffles by the seed-keyed hash and caps validation at
``dev_max``. With ``refine.sentences = "selected"`` every selected sentence is used instead,
with the teacher embedding the extraction pass wrote beside it: shuffled by the seed-keyed hash
of its id, the last ``min(dev_max, 10%)`` validate.

``distill`` and ``kd`` rows get the teacher's sentence embedding of ``src`` in a ``teacher``
column from a Ray Data actor pool in the same stream, so training never runs the teacher.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds

from swe import inputs, storage
from swe.build.markers import StageDir, hashed
from swe.build.outputs import selected_parts, targets_url, writes_targets
from swe.build.pairs import sources as pairs
from swe.build.pairs.dataset import pair_splits
from swe.build.pairs.sources import PairsConfig
from swe.build.pairs.splits import split_last, where
from swe.build.shuffle import shuffle_key
from swe.build.stage import LogPhrases, Section, StageResult
from swe.build.tasks import actor_count, run_sharded
from swe.leftovers import remove_leftovers

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["PairsConfig", "Result", "TeacherEmbedder", "sample_partition"]

log = logging.getLogger("swe.build")
NAME = "train_data"
LAYOUT = 2  # train/ and dev/ Parquet shards (1: one train.parquet and dev.parquet)


SECTION = Section("pairs", PairsConfig, keyed="pairs.<src-tgt>",
                  example="language pairs, e.g. [pairs.en-de]")

#: The other stages' config sections this stage reads (its contract; tests/test_layout.py
#: checks the source names no other).
READS: tuple[str, ...] = ("extraction", "refine")


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Rows written per split; for pairs, kept rows per language pair and what was dropped."""

    LOG: ClassVar[LogPhrases] = {
        "train_rows": ("{} train rows", "rows"), "dev_rows": ("{} dev rows", None),
        "pairs": ("{} pairs kept", None), "duplicates": ("{} duplicates dropped", None),
        "over_max_pairs": ("{} over max_pairs dropped", None)}

    train_rows: int
    dev_rows: int
    pairs: dict[str, int] = field(default_factory=dict)
    read: dict[str, dict[str, int]] = field(default_factory=dict)
    duplicates: int = 0
    over_max_pairs: int = 0


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[pairs.*]``."""
    from swe.build.fields import check_readable

    for key, p in cfg.pairs.items():
        try:
            src, tgt = pairs.languages(key)
        except ValueError as e:
            errors.append(str(e))
        else:
            errors.extend(pairs.config_problems(key, p))
            if src not in cfg.languages or tgt not in cfg.languages:
                errors.append(f"[pairs.{key}]: both languages must be in languages = "
                              f"{cfg.languages}")
        if not p.paths:
            errors.append(f"[pairs.{key}] has no paths")
        if check_paths:
            check_readable(p.paths, f"pairs.{key}", errors)
            if p.dev_documents:
                check_readable([p.dev_documents], f"pairs.{key}.dev_documents", errors)
            _check_headers(key, p, errors)
    _check_unpaired(cfg, errors)


def _check_unpaired(cfg: BuildConfig, errors: list[str]) -> None:
    """A contrastive build aligns languages through their pairs: a language in none of the
    ``[pairs.*]`` sections would keep its words' unaligned vectors; refused, naming it."""
    if cfg.refine.objective != "contrastive" or not cfg.pairs:
        return
    paired = set()
    for key in cfg.pairs:
        with contextlib.suppress(ValueError):  # a bad key is reported above
            paired.update(pairs.languages(key))
    unpaired = [lang for lang in cfg.languages if lang not in paired]
    if unpaired:
        errors.append(f"refine.objective = 'contrastive' but {', '.join(map(repr, unpaired))} "
                      f"{'is' if len(unpaired) == 1 else 'are'} in no [pairs.*] section: "
                      "its words would never be aligned; add pairs (e.g. [pairs.en-"
                      f"{unpaired[0]}]) or leave it out of languages")


def _is_number(text: str) -> bool:
    """A CCMatrix TSV starts with its score, not a header."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_headers(key: str, p: pairs.PairsConfig, errors: list[str]) -> None:
    """Before any task starts: each TSV's header names both languages of the section."""
    try:
        src, tgt = pairs.languages(key)
        files = inputs.expand_inputs(p.paths)
    except (OSError, ValueError):
        return  # reported elsewhere
    for path in files:
        if p.format not in ("auto", "tsv") or ".tsv" not in path.rsplit("/", 1)[-1]:
            continue
        try:
            lines = inputs.peek_lines(path, 1, f"pairs.{key}.format")
        except OSError as e:
            errors.append(f"pairs.{key}: cannot read {path} ({e})")
            return
        header = [h.strip() for h in lines[0].decode("utf-8", "replace").split("\t")] \
            if lines else []
        if len(header) > 1 and not _is_number(header[0]) and not (src in header and
                                                                 tgt in header):
            errors.append(f"pairs.{key}: {path} has the columns {header}, not {src!r} and "
                          f"{tgt!r}: name the section after its file's languages")
            return


def enabled(cfg: BuildConfig) -> bool:
    """Only with a refinement objective."""
    return cfg.refine.objective != "none"


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Distillation samples the selection (or reads what extraction wrote); pair objectives
    read only the pair files."""
    if writes_targets(cfg):
        return ("selection", "extraction")
    return ("selection",) if cfg.refine.objective == "distill" else ()


def needs_teacher(cfg: BuildConfig) -> bool:
    """Whether the rows carry the teacher's embedding of ``src`` (distill, kd, or contrastive
    with ``refine.kd_weight``)."""
    r = cfg.refine
    return r.objective in ("distill", "kd") or (r.objective == "contrastive" and r.kd_weight > 0)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The pair sources and filters (pair objectives), teacher, seed and sampling settings."""
    r = cfg.refine
    srcs = () if r.objective == "distill" else (sorted(
        (k, hashed(p, dev_documents="", dev_share=0.0)) for k, p in cfg.pairs.items()),)
    if writes_targets(cfg):
        return (teacher, cfg.seed, r.objective, r.sentences, r.dev_max, {"layout": LAYOUT})
    with_teacher = ("teacher",) if r.objective == "contrastive" and needs_teacher(cfg) else ()
    if needs_teacher(cfg) and cfg.extraction.runtime != "torch":  # this stage runs the teacher
        with_teacher += (("runtime", cfg.extraction.runtime),)
    return (*srcs, teacher, cfg.seed, r.objective, r.min_sentences, r.train_per_word,
            r.dev_per_word, r.dev_max, {"layout": LAYOUT}, *with_teacher)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Make both splits on the cluster, with teacher embeddings where the objective needs them."""
    import ray

    r = ctx.cfg.refine
    data = ray.data.DataContext.get_current()
    order = data.execution_options.preserve_order
    data.execution_options.preserve_order = True  # a sort's order survives to the writes
    try:
        if writes_targets(ctx.cfg):
            train, dev, extra = _selected_splits(ctx)
        elif r.objective == "distill":
            train, dev, extra = _distill_splits(ctx, st)
        else:
            train, dev, extra = pair_splits(ctx.cfg, st.path("read"))
        n_train, n_dev = _write(ctx, train, "train"), _write(ctx, dev, "dev")
    finally:
        data.execution_options.preserve_order = order
    if n_train < r.batch_size or n_dev < 2:
        raise ValueError(f"only {n_train} training / {n_dev} validation rows for "
                         f"refine.batch_size = {r.batch_size}: use more corpus or pairs, or "
                         "lower refine.min_sentences (a word needs that many selected "
                         "sentences) / batch_size")
    return Result(train_rows=n_train, dev_rows=n_dev, **extra)


def _write(ctx: BuildContext, ds: Any, split: str) -> int:
    """Add teacher embeddings if the objective needs them and extraction did not write them;
    write ``split``'s shards; rows."""
    url = ctx.work(NAME, split)
    remove_leftovers(url, f"the {split} split is written again")
    if needs_teacher(ctx.cfg) and not writes_targets(ctx.cfg):
        ds = _with_teacher(ctx, ds)
    fs, path = storage.pyarrow_filesystem(url)
    ds.write_parquet(path, filesystem=fs, min_rows_per_file=50_000)
    if not storage.child_names(url):  # an empty split writes no file (the caller says why)
        return 0
    return pds.dataset(path, filesystem=fs, format="parquet").count_rows()  # footers only


def _with_teacher(ctx: BuildContext, ds: Any) -> Any:
    """``ds`` with the teacher's sentence embedding of ``src`` (a Ray Data actor pool)."""
    import ray

    ex = ctx.cfg.extraction
    return ds.map_batches(
        TeacherEmbedder, batch_size=ex.batch_size, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(  # from 1: a small split needs no second teacher
            min_size=1, max_size=actor_count(ex.actors, ex.gpus_per_actor,
                                             ex.threads_per_actor)),
        num_cpus=ex.cpus_per_actor, num_gpus=ex.gpus_per_actor or None,
        fn_constructor_kwargs={"teacher_dir": ctx.teacher, "onnx": ctx.onnx_model(),
                               "token_budget": ex.token_budget,
                               "threads": ex.threads_per_actor,
                               "trust_remote_code": ctx.cfg.trust_remote_code})


# -- distillation: every selected sentence -----------------------------------------------------


def _selected_splits(ctx: BuildContext) -> tuple[Any, Any, dict]:
    """Every selected sentence with the teacher embedding extraction wrote; shuffled, split."""
    import ray

    fs, path = storage.pyarrow_filesystem(targets_url(ctx.work("extraction")))
    ds = ray.data.read_parquet(path, filesystem=fs).map_batches(
        with_shuffle_key, batch_format="pyarrow", fn_kwargs={"seed": ctx.cfg.seed})
    train, dev, _ = split_last(ds, ctx.cfg.refine.dev_max)
    return train.drop_columns(["sid", "k"]), dev.drop_columns(["sid", "k"]), {}


def with_shuffle_key(batch: pa.Table, seed: int) -> pa.Table:
    """Ray Data UDF: ``batch`` with the seed-keyed shuffle key ``k`` of its ``sid``."""
    return batch.append_column("k", pa.array(shuffle_key(batch.column("sid").to_numpy(), seed)))


# -- drawn distillation sentences ------------------------------------------------------------------


def _distill_splits(ctx: BuildContext, st: StageDir) -> tuple[Any, Any, dict]:
    """Draw sentences per word in tasks, then label, shuffle and split the selected sentences."""
    import ray

    r, seed = ctx.cfg.refine, ctx.cfg.seed
    draw = ray.remote(num_cpus=0.5)(sample_partition)
    jobs = []
    for li, lang in enumerate(ctx.cfg.languages):
        for url in storage.find(ctx.work("selection", lang, "pairs")):
            out = st.path("drawn", f"{lang}-{url.rsplit('/', 1)[1]}")
            jobs.append((f"draw-{lang}-{url.rsplit('/', 1)[1]}", lambda u=url, o=out, li=li:
                         draw.remote(u, o, (r.min_sentences, r.train_per_word,
                                           r.dev_per_word), [seed, li, _part_no(u)])))
    run_sharded(st, jobs)
    fs, paths = _parquet_paths(selected_parts(ctx))
    ds = ray.data.read_parquet(paths, filesystem=fs).select_columns(["sid", "text"]).map_batches(
        label_drawn, batch_format="pyarrow", num_cpus=0.5,
        fn_kwargs={"drawn": storage.find(st.path("drawn")), "seed": seed})
    ds = ds.materialize()
    train = where(ds, "split", [0])
    dev = where(ds, "split", [1]).sort("k").limit(r.dev_max)
    cols = ["sid", "split", "k"]
    return train.sort("k").drop_columns(cols), dev.drop_columns(cols), {}


def _part_no(url: str) -> int:
    return int(url.rsplit("/p", 1)[1].split(".")[0])


def _parquet_paths(urls: list[str]) -> tuple[Any, list[str]]:
    fs, _ = storage.pyarrow_filesystem(urls[0])
    return fs, [storage.pyarrow_filesystem(u)[1] for u in urls]


def sample_partition(pairs_url: str, out: str, counts: tuple[int, int, int],
                     seed: list[int]) -> dict:
    """Draw ``train_per_word + dev_per_word`` sentences for every word of one selection word
    partition with at least ``min_sentences``; writes ``train``/``dev`` sid arrays to ``out``."""
    z = storage.load_npz(pairs_url)
    tr, dv = sample_sentences(z["word_id"], z["sid"], *counts, np.random.default_rng(seed))
    storage.save_npz(out, train=tr, dev=dv)
    return {"train": len(tr), "dev": len(dv)}


def sample_sentences(word_id: np.ndarray, sid: np.ndarray, min_sentences: int,
                     train_per_word: int, dev_per_word: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(train_sids, dev_sids)`` from selection pairs sorted by ``word_id``: random
    ``train_per_word + dev_per_word`` sentences of each word with at least ``min_sentences``."""
    _, start, per_word = np.unique(word_id, return_index=True, return_counts=True)
    train, dev = [], []
    k = train_per_word + dev_per_word
    for w in np.flatnonzero(per_word >= min_sentences):
        picks = sid[start[w] + rng.choice(per_word[w], k, replace=False)]
        train.append(picks[:train_per_word])
        dev.append(picks[train_per_word:])
    empty = np.zeros(0, np.int64)
    return (np.unique(np.concatenate(train)) if train else empty,
            np.unique(np.concatenate(dev)) if dev else empty)


def label_drawn(batch: pa.Table, drawn: list[str], seed: int) -> pa.Table:
    """The drawn rows of a batch of selected sentences, with ``split`` (0 train, 1 dev; a
    sentence drawn for both trains) and the seed-keyed shuffle key ``k``."""
    train, dev = _drawn_sids(tuple(drawn))
    sid = batch.column("sid").to_numpy()
    split = np.where(np.isin(sid, train), 0, np.where(np.isin(sid, dev), 1, -1))
    keep = split >= 0
    out = batch.filter(pa.array(keep)).rename_columns(["sid", "src"])
    return out.append_column("split", pa.array(split[keep], pa.int8())).append_column(
        "k", pa.array(shuffle_key(sid[keep], seed)))


_DRAWN: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}


def _drawn_sids(urls: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Every partition's drawn sids (3 per word: O(V), read once per worker process)."""
    if urls not in _DRAWN:
        z = [storage.load_npz(u) for u in urls]
        _DRAWN.clear()
        _DRAWN[urls] = (np.unique(np.concatenate([d["train"] for d in z])),
                        np.unique(np.concatenate([d["dev"] for d in z])))
    return _DRAWN[urls]


# -- the teacher ---------------------------------------------------------------------------------


class TeacherEmbedder:
    """Ray Data actor: the teacher's pooled sentence embedding of each row's ``src`` appended
    as ``teacher``, in length-sorted sub-batches under a padded-token budget."""

    def __init__(self, teacher_dir: str, token_budget: int = 16_384, threads: int | None = 1,
                 trust_remote_code: bool = False, onnx: Any = None) -> None:
        from swe.build.teacher.model import open_teacher

        self.teacher = open_teacher(teacher_dir, onnx, threads, trust_remote_code)
        self.budget = token_budget

    def __call__(self, batch: pa.Table) -> pa.Table:
        """``batch`` with the ``teacher`` embedding of each row's ``src``."""
        texts = batch.column("src").to_pylist()
        out = np.zeros((len(texts), self.teacher.dim), np.float32)
        for idx, hidden, _, mask in self.teacher.forward_batches(texts, self.budget):
            out[idx] = self.teacher.pool(hidden, mask)
        flat = pa.array(out.reshape(-1))
        return batch.append_column("teacher",
                                   pa.FixedSizeListArray.from_arrays(flat, out.shape[1]))
