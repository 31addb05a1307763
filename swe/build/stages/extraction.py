"""Stage ``extraction``: word vectors from the teacher → the step-1 model.

A Ray Data actor pool runs the teacher (one model per actor: per GPU on GPU clusters, fractional
CPUs otherwise). Each actor sorts its sentences by length and forms batches under a token budget;
for every vocabulary word a sentence serves it takes the raw last hidden states of the tokens
overlapping the word's *first* occurrence (character-span overlap, so "don't" aligns however the
teacher splits it), averages them, and emits per-word sums and counts for the batch. The driver
adds those up per selection part; each part's sums are saved with a shard marker as soon as all
its sentences are in, so a killed build resumes part by part. The partial sums then give each
word's mean vector; identical strings across languages are averaged.

With ``refine.sentences = "selected"`` the same forward pass also pools each sentence as the
teacher does (its prefix and pooling: :meth:`Teacher.pool`) and writes the embeddings beside the
sentences (``targets/``), so step 3 distils on every selected sentence at no extra teacher cost.

``mode = "model2vec"`` instead embeds every vocabulary entry alone (Model2Vec's extraction).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow.parquet as pq

from swe import storage
from swe.artifacts import holder_of
from swe.build.markers import StageDir
from swe.build.outputs import selected_parts, targets_url, vocab_url, vocab_words, writes_targets
from swe.build.shuffle import partition_ids, read_files
from swe.build.stage import LogPhrases, Section, StageResult
from swe.build.tasks import MiB, Progress, actor_count, node_id, remote, run_sharded
from swe.build.teacher.extractor import FIXED_POINT, Extractor, align, part_key, to_fixed
from swe.build.teacher.runtime import RUNTIMES
from swe.leftovers import remove_leftovers
from swe.resources import Request

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Extractor", "Result", "align", "assemble_step1",
           "reduce_sums", "to_fixed"]

log = logging.getLogger("swe.build")
NAME = "extraction"
MODES = ("sentence", "model2vec")


@dataclass
class ExtractionConfig:
    """``[extraction]``: the mode and the teacher actor pool."""

    mode: str = field(default="sentence", metadata={"choices": {
        "sentence": "the paper", "model2vec": "each word alone"}, "help": "extraction mode"})
    runtime: str = field(default="torch", metadata={"choices": RUNTIMES,
        "help": "how every teacher pass of the build runs (docs/teacher.md)"})
    store: str = field(default="", metadata={
        "help": "teacher-output store shared by builds (folder or s3:// prefix; '' = none): "
                "sentences it holds are not encoded again (docs/teacher.md)"})
    token_budget: int = field(default=16_384, metadata={
        "min": 512, "help": "padded tokens per teacher forward pass"})
    actors: int = field(default=0, metadata={
        "min": 0, "help": "teacher actors; 0 = one per GPU, else one per CPU"})
    threads_per_actor: int = field(default=1, metadata={
        "min": 1, "help": "torch threads of a CPU actor"})
    cpus_per_actor: float = field(default=0.5, metadata={
        "resource": True, "help": "Ray CPUs per actor"})
    gpus_per_actor: float = field(default=0.0, metadata={
        "resource": True,
        "help": "Ray GPUs per actor; 0.25 on GPU clusters (4 teachers per GPU)"})
    batch_size: int = field(default=1024, metadata={
        "min": 1, "help": "sentences handed to an actor at once"})
    job_sentences: int = field(default=100_000, metadata={
        "min": 1, "help": "sentences per wave, the unit of resumption (one job runs them all)"})
    partitions: int = field(default=0, metadata={
        "min": 0, "help": "word partitions of the sums; 0 = from V (the result is the same)"})


SECTION = Section("extraction", ExtractionConfig)


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Throughput of this run and the words that got vectors."""

    LOG: ClassVar[LogPhrases] = {
        "actors": ("{} actors", None), "sentences": ("{} sentences", "sentences"),
        "word_vectors": ("{} word vectors", None), "words": ("{} words", None),
        "words_without_vectors": ("{} words without a vector", None)}

    actors: int = 0  # 0 when every part was already done
    sentences: int = 0
    word_vectors: int = 0
    sentences_per_s: float = 0.0
    actor_busy: float = 0.0  # the share of the wall time the actors spent in their batches
    actor_processes: int = 0  # the actors that ran batches: one pool serves every wave
    teacher_passes: int = 0  # sentences this run sent through the teacher
    store_hits: int = 0  # sentences served by the teacher-output store
    store_bytes: int = 0  # the store namespace's size after this run
    words: int
    words_without_vectors: int


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[extraction]`` beyond its fields' declarations: the store's path."""
    store = cfg.extraction.store
    if not store:
        return
    if cfg.extraction.mode != "sentence":
        errors.append("extraction.store serves mode = 'sentence' only; leave it '' in "
                      f"mode = {cfg.extraction.mode!r}")
    try:
        storage.output_url(store, "extraction.store")
    except ValueError as e:
        errors.append(str(e))
        return
    if cfg.output and storage.overlaps(store, cfg.output):
        errors.append(f"extraction.store {store} overlaps the output {cfg.output}: a store is "
                      "shared by builds, so keep it outside every build's output")
    elif held := holder_of(store):
        errors.append(f"extraction.store {store} lies in {held}, which swe checksums, lists or "
                      "cleans (a build's rerun clears its work folder): keep the store outside")


def enabled(cfg: BuildConfig) -> bool:
    """Always runs."""
    return True


def requests(cfg: BuildConfig) -> list[Request]:
    """The teacher actors (train_data's teacher pass reuses these settings)."""
    ex = cfg.extraction
    return [Request("teacher actors", "lower extraction.cpus_per_actor, gpus_per_actor or actors",
                    count=max(1, ex.actors), cpus=ex.cpus_per_actor, gpus=ex.gpus_per_actor)]


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """The selected sentences, or in Model2Vec mode the vocabulary itself."""
    return ("vocab",) if cfg.extraction.mode == "model2vec" else ("selection",)


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The mode, whether it writes sentence embeddings, and the runtime unless it is torch (the
    actor pool's settings do not change the vectors)."""
    runtime = cfg.extraction.runtime
    from swe.build.teacher.store import VALUE_FORMAT

    return (cfg.extraction.mode,) + (("targets",) if writes_targets(cfg) else ()) + \
        ((("runtime", runtime),) if runtime != "torch" else ()) + \
        ((("store", VALUE_FORMAT),) if cfg.extraction.store else ())


def partitions(cfg: BuildConfig, words: int, dim: int = 1024) -> int:
    """``extraction.partitions``, or enough that a reduce task holds ~256 MiB of sums."""
    if cfg.extraction.partitions:
        return cfg.extraction.partitions
    return int(min(4096, max(1, -(-words * dim * 24 // (256 * MiB)))))


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Extract every unfinished wave (with a store: only the sentences it lacks), reduce the
    sums by word partition, save step 1 (tasks write and read everything: the driver sees only
    per-part sentence counts)."""
    sizes = [done["vocab"].sizes[lang] for lang in ctx.cfg.languages]
    total, p = sum(sizes), partitions(ctx.cfg, sum(sizes))
    offsets = dict(zip(ctx.cfg.languages, np.cumsum([0, *sizes[:-1]]).tolist(), strict=True))
    attempt = uuid.uuid4().hex[:12]  # this run's folders: a killed run's writers never reach them
    served: dict[str, int] = {}
    if ctx.cfg.extraction.mode == "model2vec":
        waves, source = _model2vec_waves(ctx)
    elif ctx.store is not None:
        served, misses = _serve_from_store(ctx, st, offsets, total, p, attempt)
        waves, source = _sentence_waves(ctx, misses)
    else:
        waves, source = _sentence_waves(ctx, selected_parts(ctx))
    stats = _extract(ctx, st, offsets, total, p, waves, source, attempt)
    sources = [wave_dir(st, w) for w in range(len(waves))] + \
        ([f"store-{attempt}"] if served else [])
    reduce = remote(reduce_sums, 256 * MiB + (total // p + 1) * 4096 * 3, "extraction (reduce)",
                    "extraction.partitions")
    reduced = run_sharded(st, [(f"reduce-{k:04d}", lambda k=k: reduce.remote(
        st.dir, k, p, total, sources)) for k in range(p)])
    assemble = remote(assemble_step1, 512 * MiB + total * 4096 * 3, "extraction (step 1)",
                      "vocab.size")
    (words,) = run_sharded(st, [("assemble", lambda: assemble.remote(
        st.dir, p, _vocab_urls(ctx), ctx.teacher, ctx.provenance("step1"), ctx.path("step1"),
        ctx.cfg.oov))])
    drop_stale(st, sources)  # what a killed run's orphaned actors wrote meanwhile
    if ctx.store is not None:
        from swe.build.teacher.store import size

        files, nbytes = size(ctx.store)
        served["store_bytes"] = nbytes
        log.info("[extraction] store %s: %s in %d files", ctx.store.url, _gb(nbytes), files)
    return Result(**stats, **served, word_vectors=sum(r["vectors"] for r in reduced),
                  words=words["words"], words_without_vectors=total - words["with_vectors"])


def _gb(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.1f} MB"


def _vocab_urls(ctx: BuildContext) -> dict[str, str]:
    return {lang: vocab_url(ctx, lang) for lang in ctx.cfg.languages}


def _serve_from_store(ctx: BuildContext, st: StageDir, offsets: dict[str, int], total: int,
                      p: int, attempt: str) -> tuple[dict[str, int], list[str]]:
    """Look every selected sentence up in the store, bucket by bucket in tasks; sums and
    targets of the stored ones are written like the actors' own. The store is the resume state:
    a rerun after a kill starts over here (in folders named by ``attempt``) and finds what the
    killed run stored."""
    from swe.build.teacher.store import BUCKETS
    from swe.build.teacher.store_lookup import lookup_bucket, split_requests

    for sub in ("req", "miss", "sums", "targets", "_shards"):
        remove_leftovers(st.path(sub), "a store build's extraction starts over")
    req = st.path("req", attempt)
    split = remote(split_requests, 512 * MiB, "extraction (store keys)", "selection parts")
    run_sharded(st, [(f"keys-{i:05d}", lambda u=u: split.remote(u, req))
                     for i, u in enumerate(selected_parts(ctx))])
    lookup = remote(lookup_bucket, 1024 * MiB, "extraction (store lookup)", "extraction.store")
    targets = storage.join(targets_url(st.dir), f"store-{attempt}") \
        if writes_targets(ctx.cfg) else None
    miss = st.path("miss", attempt)
    found = run_sharded(st, [(f"lookup-{k:x}", lambda k=k: lookup.remote(
        k, req, ctx.store, _vocab_urls(ctx), offsets, total, p,
        st.path("sums", f"store-{attempt}"), targets, storage.join(miss, f"b{k:x}.parquet")))
        for k in range(BUCKETS)])
    hits, misses = sum(r["hits"] for r in found), sum(r["misses"] for r in found)
    bad_rows, bad_files = sum(r["bad_rows"] for r in found), sum(r["bad_files"] for r in found)
    if bad_rows or bad_files:
        names = [n for r in found for n in r["bad_file_names"]][:3]
        st.warn(f"the store had {bad_files} unreadable file(s) {names} and {bad_rows} row(s) "
                "failing their checksum: those sentences are encoded again")
    log.info("[extraction] store: %d of %d sentences already encoded, %d to encode", hits,
             hits + misses, misses)
    urls = [storage.join(miss, f"b{k:x}.parquet") for k, r in enumerate(found) if r["misses"]]
    return {"store_hits": hits}, urls


Wave = dict[str, int]  # a group of parts (the unit of resumption): each part's sentence count
Source = Callable[[list[Wave]], Any]  # the waves → one Ray Data dataset of their sentences


def _model2vec_waves(ctx: BuildContext) -> tuple[list[Wave], Source]:
    """One wave over every vocabulary entry, each its own "sentence"."""
    import ray

    rows = []
    for lang in ctx.cfg.languages:
        for i, w in enumerate(vocab_words(vocab_url(ctx, lang))):
            rows.append({"sid": len(rows), "text": w, "lang": lang, "word_ids": [i],
                         "part": "m2v"})
    blocks = max(1, math.ceil(len(rows) / ctx.cfg.extraction.batch_size))
    return [{"m2v": len(rows)}], lambda _: ray.data.from_items(rows, override_num_blocks=blocks)


def _sentence_waves(ctx: BuildContext, urls: list[str]) -> tuple[list[Wave], Source]:
    """Waves of about ``extraction.job_sentences`` sentences over Parquet files of selected
    sentences, in a fixed order, and their source: one read of the files of the waves asked
    for, streamed in blocks of at most ``extraction.batch_size`` rows so that every actor stays
    busy (a part is one file, one block, otherwise)."""
    import ray

    sized, url_of = [], {}
    for url in urls:
        fs, path = storage.filesystem(url)
        with fs.open(path, "rb") as fh:
            sized.append((url, pq.ParquetFile(fh).metadata.num_rows))
        url_of[part_key(url)] = url
    waves, group = [], []
    for i, item in enumerate(sized):
        group.append(item)
        if sum(g[1] for g in group) >= ctx.cfg.extraction.job_sentences or i == len(sized) - 1:
            waves.append({part_key(u): n for u, n in group})
            group = []

    def source(todo: list[Wave]) -> Any:
        paths = [storage.pyarrow_filesystem(url_of[part])[1] for w in todo for part in w]
        return ray.data.read_parquet(
            paths, filesystem=storage.pyarrow_filesystem(urls[0])[0], include_paths=True,
        ).repartition(target_num_rows_per_block=ctx.cfg.extraction.batch_size)
    return waves, source


def wave_dir(st: StageDir, w: int) -> str:
    """The folder (under ``sums/`` and ``targets/``) of finished wave ``w``: the one its marker
    names (a marker written before attempts were named: ``wave<w>``)."""
    done = st.shard_done(f"wave-{w:05d}") or {}
    return done.get("dir", f"wave{w:05d}")


def drop_stale(st: StageDir, keep: list[str]) -> None:
    """Remove the folders under ``sums/`` and ``targets/`` that no finished wave of this run
    names: a killed attempt's, including files its orphaned actors wrote after the kill (a
    killed driver's actors live on for a moment and finish their batch)."""
    for sub in (st.path("sums"), targets_url(st.dir)):
        for name in storage.child_names(sub):
            if name not in keep:
                remove_leftovers(storage.join(sub, name), "it is a killed extraction's")


def _extract(ctx: BuildContext, st: StageDir, offsets: dict[str, int], total: int, p: int,
             waves: list[Wave], source: Source, attempt: str) -> dict:
    """Run the unfinished waves through one teacher actor pool, as one Ray Data job (one
    progress line with an ETA over all of them; the actors load the teacher once, not once per
    wave); mark each wave as soon as every sentence of its parts is accounted for."""
    import ray

    todo = [w for w in range(len(waves)) if not st.shard_done(f"wave-{w:05d}")]
    if len(todo) < len(waves):
        log.info("[extraction] %d of %d jobs already done", len(waves) - len(todo), len(waves))
    if not todo:
        return {}
    ex = ctx.cfg.extraction
    names = {w: f"wave{w:05d}-{attempt}" for w in todo}  # new to this run
    targets = targets_url(st.dir) if writes_targets(ctx.cfg) else None
    for name in names.values():
        storage.remove_tree(st.path("sums", name))
        storage.remove_tree(storage.join(targets_url(st.dir), name))
    n_actors = actor_count(ex.actors, ex.gpus_per_actor, ex.threads_per_actor)
    ds = source([waves[w] for w in todo]).map_batches(
        Extractor, batch_size=ex.batch_size, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=n_actors), num_cpus=ex.cpus_per_actor,
        num_gpus=ex.gpus_per_actor or None, fn_constructor_kwargs={
            "teacher_dir": ctx.teacher, "onnx": ctx.onnx_model(), "lang_offset": offsets,
            "total": total, "parts": p, "out": st.path("sums"), "targets": targets,
            "waves": {part: names[w] for w in todo for part in waves[w]},
            "vocab": {lang: vocab_url(ctx, lang) for lang in offsets},
            "token_budget": ex.token_budget, "mode": ex.mode,
            "threads": ex.threads_per_actor if not ex.gpus_per_actor else None,
            "trust_remote_code": ctx.cfg.trust_remote_code, "store": ctx.store})
    progress = Progress("extraction", sum(sum(waves[w].values()) for w in todo), "sentences")
    t0 = time.perf_counter()
    try:
        busy = _run_waves(st, ds, {w: waves[w] for w in todo}, names, progress)
    finally:
        progress.close()
    secs = time.perf_counter() - t0
    shares = sorted(round(b / max(secs, 1e-9), 3) for b in busy.values())
    log.info("[extraction] %d actors (%s, %d thread(s) each), busy %s of the wall time",
             n_actors, ex.runtime, ex.threads_per_actor, " / ".join(f"{x:.0%}" for x in shares))
    return {"actors": n_actors, "sentences": progress.done, "teacher_passes": progress.done,
            "sentences_per_s": round(progress.done / max(secs, 1e-9), 1),
            "actor_busy": round(sum(busy.values()) / max(secs * n_actors, 1e-9), 3),
            "actor_processes": len(busy)}


def _run_waves(st: StageDir, ds: Any, todo: dict[int, Wave], names: dict[int, str],
               progress: Progress) -> dict[str, float]:
    """Drain the job; mark wave ``w`` (naming its folders) once its parts' sentences are all
    accounted for, and check at the end that every sentence was processed exactly once. The
    seconds each actor was busy."""
    seen: dict[str, int] = {}
    busy: dict[str, float] = {}
    wave_of = {k: w for w, parts in todo.items() for k in parts}
    left = set(todo)
    for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        for actor, secs in zip(batch.column("actor").to_pylist(),
                               batch.column("busy_s").to_pylist(), strict=True):
            busy[actor] = busy.get(actor, 0.0) + secs
        touched = set()
        for part, n in zip(batch.column("part").to_pylist(),
                           batch.column("sentences").to_pylist(), strict=True):
            seen[part] = seen.get(part, 0) + n
            progress.add(n)
            touched.add(wave_of.get(part))  # an unknown part: the check at the end says so
        for w in sorted(left.intersection(touched)):  # only the waves this batch counted towards
            if all(seen.get(k) == n for k, n in todo[w].items()):
                st.mark_shard(f"wave-{w:05d}", {"sentences": sum(todo[w].values()),
                                                "dir": names[w]})
                left.discard(w)
    expected = {k: n for parts in todo.values() for k, n in parts.items()}
    if seen != expected:
        raise RuntimeError(f"extraction: sentences per part {seen} != {expected}")
    return busy


def reduce_sums(stage_dir: str, part: int, parts: int, total: int, sources: list[str]) -> dict:
    """One word partition: add the fixed-point sums of every source (a wave, or the store's
    lookups; exact, in any order) and write the mean vectors of its words that have any
    (``vectors/p<P>.npz``)."""
    ids = partition_ids(part, total, parts)
    lo = int(ids[0]) if len(ids) else 0
    sums: np.ndarray | None = None
    counts = np.zeros(len(ids), np.int64)
    for source in sources:
        z = read_files(storage.join(stage_dir, "sums", source, f"p{part:04d}"),
                       {"word_id": np.dtype(np.int64), "sum": np.dtype(np.int64),
                        "count": np.dtype(np.int64)})
        if not len(z["word_id"]):
            continue
        if sums is None:
            sums = np.zeros((len(ids), z["sum"].shape[1]), np.int64)
        np.add.at(sums, z["word_id"] - lo, z["sum"])
        np.add.at(counts, z["word_id"] - lo, z["count"])
    has = np.flatnonzero(counts)
    vectors = (sums[has] / FIXED_POINT) / counts[has, None] if sums is not None \
        else np.zeros((0, 1))
    storage.save_npz(storage.join(stage_dir, "vectors", f"p{part:04d}.npz"),
                     word_id=ids[has], vector=vectors)
    return {"vectors": int(counts.sum()), "words": len(has), "node": node_id()}


def assemble_step1(stage_dir: str, parts: int, vocab: dict[str, str], teacher: str,
                   provenance: dict, dst: str, oov: str = "subword") -> dict:
    """The step-1 model from the partitions' mean vectors (words in vocabulary order);
    identical strings across languages are averaged."""
    from swe.model import StaticModel

    z = read_files(storage.join(stage_dir, "vectors"), {"word_id": np.dtype(np.int64),
                                                        "vector": np.dtype(np.float64)})
    if not len(z["word_id"]):
        raise ValueError("extraction produced no vectors: is the selection empty?")
    all_words = [w for url in vocab.values() for w in vocab_words(url)]
    merged: dict[str, list[int]] = {}
    for row, gid in enumerate(z["word_id"].tolist()):
        merged.setdefault(all_words[gid], []).append(row)
    words = list(merged)
    vectors = np.stack([z["vector"][rows].mean(axis=0) for rows in merged.values()])
    StaticModel.from_vectors(words, vectors.astype(np.float32), tokenizer=teacher,
                             language=list(vocab), provenance=provenance, oov=oov).save(dst)
    return {"words": len(words), "with_vectors": len(z["word_id"]), "node": node_id()}
