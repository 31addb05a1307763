"""Stage ``train_data``: the rows step 3 trains and validates on, made and written by Ray Data
(Parquet shards under ``train/`` and ``dev/``); the driver holds only metadata.

*Pairs* (``contrastive``, ``kd``): each ``[pairs.SRC-TGT]`` source (CCMatrix Moses zip or TSV,
headered TSV, aligned files; :mod:`swe.build.pairs`) is streamed by a read task that filters rows
(score, length window, identical sides, bad lines) and counts drops by reason. Duplicate pairs
go to one block by a hash shuffle on the pair's hash, and the best-scored one stays;
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

import json
import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from swe import storage
from swe.build import pair_readers, pairs, pairtext
from swe.build.markers import StageDir
from swe.build.pairs import PairsConfig
from swe.build.runner import StageResult
from swe.build.shuffle import shuffle_key
from swe.build.stages.extraction import actor_count, length_batches, targets_url, writes_targets
from swe.build.stages.selection import selected_parts
from swe.build.tasks import run_sharded
from swe.raysetup import user_error

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["PairsConfig", "Result", "TeacherEmbedder", "pair_languages", "read_pairs",
           "sample_partition", "split_urls"]

log = logging.getLogger("swe.build")
NAME = "train_data"
LAYOUT = 2  # train/ and dev/ Parquet shards (1: one train.parquet and dev.parquet)


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Rows written per split; for pairs, kept rows per language pair and what was dropped."""

    train_rows: int
    dev_rows: int
    pairs: dict[str, int] = field(default_factory=dict)
    read: dict[str, dict[str, int]] = field(default_factory=dict)
    duplicates: int = 0
    over_max_pairs: int = 0


def pair_languages(key: str) -> tuple[str, str]:
    """``"en-de"`` → ``("en", "de")``."""
    src, _, tgt = key.partition("-")
    return src, tgt


def split_urls(ctx: BuildContext) -> tuple[str, str]:
    """The ``train/`` and ``dev/`` folders of Parquet shards this stage wrote."""
    return ctx.work(NAME, "train"), ctx.work(NAME, "dev")


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[pairs.*]``."""
    from swe.build.config import check_readable

    for key, p in cfg.pairs.items():
        src, tgt = pair_languages(key)
        if not src or not tgt or src == tgt:
            errors.append(f"[pairs.{key}]: name a pair as SRC-TGT, e.g. [pairs.en-de]")
        else:
            errors.extend(pairs.config_problems(key, p))
            if src not in cfg.languages or tgt not in cfg.languages:
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
    """Distillation samples the selection (or reads what extraction wrote); pair objectives
    read only the pair files."""
    if writes_targets(cfg):
        return ("selection", "extraction")
    return ("selection",) if cfg.refine.objective == "distill" else ()


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The pair sources and filters (pair objectives), teacher, seed and sampling settings."""
    r = cfg.refine
    srcs = () if r.objective == "distill" else (sorted(
        (k, asdict(p)) for k, p in cfg.pairs.items()),)
    if writes_targets(cfg):
        return (teacher, cfg.seed, r.objective, r.sentences, r.dev_max, {"layout": LAYOUT})
    return (*srcs, teacher, cfg.seed, r.objective, r.min_sentences, r.train_per_word,
            r.dev_per_word, r.dev_max, {"layout": LAYOUT})


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
            train, dev, extra = _pair_splits(ctx, st)
        n_train, n_dev = _write(ctx, train, "train"), _write(ctx, dev, "dev")
    finally:
        data.execution_options.preserve_order = order
    if n_train < r.batch_size or n_dev < 2:
        raise ValueError(f"only {n_train} training / {n_dev} validation rows for "
                         f"refine.batch_size = {r.batch_size}: use more corpus or pairs, or "
                         "lower refine.min_sentences / batch_size")
    return Result(train_rows=n_train, dev_rows=n_dev, **extra)


def _write(ctx: BuildContext, ds: Any, split: str) -> int:
    """Add teacher embeddings if the objective needs them and extraction did not write them;
    write ``split``'s shards; rows."""
    url = ctx.work(NAME, split)
    storage.remove_tree(url)
    if ctx.cfg.refine.objective in ("distill", "kd") and not writes_targets(ctx.cfg):
        ds = _with_teacher(ctx, ds)
    fs, path = storage.pyarrow_filesystem(url)
    ds.write_parquet(path, filesystem=fs, min_rows_per_file=50_000)
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
        fn_constructor_kwargs={"teacher_dir": ctx.teacher, "token_budget": ex.token_budget,
                               "threads": ex.threads_per_actor,
                               "trust_remote_code": ctx.cfg.trust_remote_code})


def _split_last(ds: Any, dev_max: int) -> tuple[Any, Any, int]:
    """Sort ``ds`` by its shuffle key ``k`` (a global shuffle); the last ``min(dev_max, 10%)``
    rows are validation. Returns ``(train, dev, rows)``."""
    ds = ds.materialize()
    n = ds.count()
    n_dev = min(dev_max, n // 10)
    shuffled = ds.sort("k")
    train, dev = shuffled.split_at_indices([n - n_dev])
    return train, dev, n


# -- translation pairs -------------------------------------------------------------------------


def _pair_splits(ctx: BuildContext, st: StageDir) -> tuple[Any, Any, dict]:
    """Read, filter, deduplicate, cap and shuffle every pair source; ``(train, dev, stats)``."""
    import ray

    cfg = ctx.cfg
    sources = [s for key, p in cfg.pairs.items() for s in pairs.plan_sources(key, p)]
    stats_dir = st.path("read")
    ds = read_pairs(sources, cfg.pairs, stats_dir, cfg.seed)
    if any(p.dedup for p in cfg.pairs.values()):
        parts = max(4, 2 * int(ray.cluster_resources().get("CPU", 1)))
        ds = ds.repartition(parts, keys=["h"], sort=True).map_batches(
            best_of_each_pair, batch_size=None, batch_format="pyarrow",
            fn_kwargs={"dedup": [k for k, p in cfg.pairs.items() if p.dedup]})
    ds = ds.materialize()
    deduplicated = ds.count()
    ds = _cap_pairs(ds, cfg.pairs)
    train, dev, n = _split_last(ds, cfg.refine.dev_max)
    read = _read_stats(stats_dir, len(sources), sources)
    if not n:
        raise ValueError("no translation pair kept from the [pairs] sources: "
                         f"{_describe(read)}")
    kept = {row["pair"]: row["count()"] for row in train.union(dev).groupby("pair").count()
            .take_all()}
    read_total = sum(s.get("kept", 0) for s in read.values())
    stats = {"pairs": {k: kept.get(k, 0) for k in cfg.pairs}, "read": read,
             "duplicates": read_total - deduplicated, "over_max_pairs": deduplicated - n}
    log.info("[train_data] pairs: %s; %d duplicates and %d over max_pairs dropped",
             _describe(read), stats["duplicates"], stats["over_max_pairs"])
    return train.drop_columns(["h", "rank"]), dev.drop_columns(["h", "rank"]), stats


def read_pairs(sources: list, configs: Mapping[str, PairsConfig], stats_dir: str,
               seed: int) -> Any:
    """Every source read and filtered by Ray Data tasks (one per source), with ``h``, ``k`` and
    ``rank`` columns; materialised in the object store. A bad file stops here: its error (the
    file named with what is wrong with it) is raised as itself, without Ray's traceback."""
    import ray

    items = [{"i": i, "source": json.dumps(asdict(s))} for i, s in enumerate(sources)]
    ds = ray.data.from_items(items, override_num_blocks=max(1, len(items))).map_batches(
        read_pair_source, batch_size=1, batch_format="pyarrow", num_cpus=0.5,
        fn_kwargs={"configs": {k: asdict(p) for k, p in configs.items()},
                   "stats_dir": stats_dir, "seed": seed})
    try:
        return ds.materialize()
    except Exception as e:
        raise user_error(e) from None


def _cap_pairs(ds: Any, cfg_pairs: Mapping[str, PairsConfig]) -> Any:
    """Each pair's ``max_pairs`` best-scored rows (ties, and unscored rows, by shuffle key)."""
    capped = {k: p.max_pairs for k, p in cfg_pairs.items() if p.max_pairs}
    if not capped:
        return ds
    parts = [_where(ds, "pair", list(capped), keep=False)] if len(capped) < len(cfg_pairs) \
        else []
    for key, m in capped.items():
        one = _where(ds, "pair", [key])
        parts.append(one.sort(["rank", "k"], descending=[True, False]).limit(m).materialize())
    return parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]


def _where(ds: Any, column: str, values: list, keep: bool = True) -> Any:
    """Rows of ``ds`` whose ``column`` is (``keep``) or is not in ``values`` (batch-wise)."""
    return ds.map_batches(rows_where, batch_format="pyarrow",
                          fn_kwargs={"column": column, "values": values, "keep": keep})


def rows_where(batch: pa.Table, column: str, values: list, keep: bool) -> pa.Table:
    """Ray Data UDF: the rows whose ``column`` is (``keep``) or is not in ``values``."""
    mask = pc.is_in(batch.column(column), value_set=pa.array(values))
    return batch.filter(mask if keep else pc.invert(mask))


def read_pair_source(batch: pa.Table, configs: dict, stats_dir: str,
                     seed: int) -> Iterator[pa.Table]:
    """Ray Data read task: stream one pair source's kept rows with their keys — ``h`` (the
    pair's hash, for deduplication), ``k`` (the seed-keyed shuffle key) and ``rank`` (score,
    ``-inf`` when unscored) — and write its per-reason counts to ``stats_dir``."""

    row = batch.to_pylist()[0]
    source = pairs.PairSource(**json.loads(row["source"]))
    cfg = PairsConfig(**configs[source.key])
    stats: Counter = Counter()
    salt = np.uint64(int.from_bytes(source.key.encode()[:8].ljust(8, b"\0"), "little"))
    for table in pair_readers.read_source(source, cfg, stats):
        h = pairtext.pair_hash(table.column("src"), table.column("tgt")) ^ salt
        score = table.column("score").to_numpy(zero_copy_only=False)
        yield table.append_column("h", pa.array(h.view(np.int64))).append_column(
            "k", pa.array(shuffle_key(h, seed))).append_column(
            "rank", pa.array(np.where(np.isnan(score), -np.inf, score)))
    storage.write_bytes_atomic(storage.join(stats_dir, f"{row['i']:06d}.json"),
                               json.dumps(dict(stats)).encode())


def best_of_each_pair(block: pa.Table, dedup: list[str]) -> pa.Table:
    """One row per duplicate pair (same ``h``; the block is sorted by ``h`` and holds every
    row of its hashes): the best-scored, ties by shuffle key; pairs not in ``dedup`` all stay."""
    if block.num_rows == 0:
        return block
    order = pc.sort_indices(block, [("h", "ascending"), ("rank", "descending"),
                                    ("k", "ascending")])
    block = block.take(order)
    h = block.column("h").to_numpy()
    first = np.ones(len(h), bool)
    first[1:] = h[1:] != h[:-1]
    keep = first | ~np.isin(block.column("pair").to_numpy(zero_copy_only=False), dedup)
    return block.filter(pa.array(keep))


def _read_stats(stats_dir: str, n: int, sources: list) -> dict[str, dict[str, int]]:
    """Per language pair: rows read, kept, and dropped by reason (summed over its sources)."""
    out: dict[str, Counter] = {}
    for i, source in enumerate(sources[:n]):
        counts = json.loads(storage.read_text(storage.join(stats_dir, f"{i:06d}.json")))
        out.setdefault(source.key, Counter()).update(counts)
    return {k: dict(v) for k, v in out.items()}


def _describe(read: Mapping[str, Mapping[str, int]]) -> str:
    return "; ".join(f"{k}: read {c.get('read', 0):,}, kept {c.get('kept', 0):,}" + "".join(
        f", {n:,} {why.replace('_', ' ')}" for why, n in sorted(c.items())
        if why not in ("read", "kept") and n) for k, c in read.items())


# -- distillation: every selected sentence -----------------------------------------------------


def _selected_splits(ctx: BuildContext) -> tuple[Any, Any, dict]:
    """Every selected sentence with the teacher embedding extraction wrote; shuffled, split."""
    import ray

    fs, path = storage.pyarrow_filesystem(targets_url(ctx.work("extraction")))
    ds = ray.data.read_parquet(path, filesystem=fs).map_batches(
        with_shuffle_key, batch_format="pyarrow", fn_kwargs={"seed": ctx.cfg.seed})
    train, dev, _ = _split_last(ds, ctx.cfg.refine.dev_max)
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
    train = _where(ds, "split", [0])
    dev = _where(ds, "split", [1]).sort("k").limit(r.dev_max)
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
                 device: str | None = None, trust_remote_code: bool = False) -> None:
        import torch

        from swe.build.teacher import Teacher

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.teacher = Teacher(teacher_dir, device=device,
                               threads=threads if device == "cpu" else None,
                               trust_remote_code=trust_remote_code)
        self.budget = token_budget

    def __call__(self, batch: pa.Table) -> pa.Table:
        """``batch`` with the ``teacher`` embedding of each row's ``src``."""
        texts = batch.column("src").to_pylist()
        ntok = np.array([len(ids) for ids in self.teacher.tokenizer(
            texts, add_special_tokens=False)["input_ids"]])
        out = np.zeros((len(texts), self.teacher.dim), np.float32)
        for idx in length_batches(ntok, self.budget, specials=8):  # + prefix
            out[idx] = self.teacher.embed([texts[k] for k in idx])
        flat = pa.array(out.reshape(-1))
        return batch.append_column("teacher",
                                   pa.FixedSizeListArray.from_arrays(flat, out.shape[1]))
