"""The build: corpus → sentences → vocab → selection → extraction → PCA → train_data → refine.

Each stage writes under ``<output>/work/<stage>/`` with a completion marker holding the hash of
the config that produced it (and of every upstream stage), so a rerun skips finished stages and,
inside long stages, finished shards. ``until`` stops after a stage. Step 1 (raw extracted vectors),
step 2 (after PCA) and step 3 (refined) are saved as StaticModels under ``<output>/step1``,
``<output>/step2`` and ``<output>/step3``; ``<output>/model`` is the last finished step, and
``<output>/refinement/`` holds the training curves.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from swe import storage
from swe.artifacts import Stage
from swe.config import BuildConfig, stage_hash
from swe.model import StaticModel
from swe.raysetup import get

__all__ = ["STAGES", "run_build"]

log = logging.getLogger("swe.build")
STAGES = ["corpus", "sentences", "vocab", "selection", "extraction", "pca", "train_data",
          "refine"]


def _sharded(stage: Stage, jobs: list[tuple[str, object]]) -> list[dict]:
    """Run ``(key, remote_call)`` jobs, skipping keys whose shard marker exists; mark each."""
    results: dict[str, dict] = {}
    pending = {}
    for key, launch in jobs:
        done = stage.shard_done(key)
        if done is not None:
            results[key] = done
        else:
            pending[key] = launch()
    if len(results):
        log.info("[%s] %d of %d shards already done", stage.name, len(results), len(jobs))
    _wait_logged(stage.name, pending, lambda key, res: (stage.mark_shard(key, res),
                                                        results.__setitem__(key, res)))
    return [results[k] for k, _ in jobs]


def _wait_logged(name: str, pending: dict, on_done) -> None:
    """Collect task results as they finish, logging progress and an ETA every ~15 s."""
    import ray

    by_ref = {ref: key for key, ref in pending.items()}
    start = last = time.perf_counter()
    total, done = len(by_ref), 0
    while by_ref:
        ready, _ = ray.wait(list(by_ref), num_returns=1)
        key = by_ref.pop(ready[0])
        on_done(key, get(ready[0]))
        done += 1
        now = time.perf_counter()
        if now - last > 15 or not by_ref:
            rate = done / (now - start)
            log.info("[%s] %d/%d shards, %.2f shards/s, ETA %.0fs", name, done, total, rate,
                     (total - done) / max(rate, 1e-9))
            last = now


def run_build(cfg: BuildConfig, until: str | None = None) -> dict:
    """Run (or resume) the build; returns every stage's stats."""
    import ray

    from swe.bulk import expand_inputs
    from swe.raysetup import init_ray
    from swe.stages import corpus as corpus_mod
    from swe.stages import extraction as ex_mod
    from swe.stages import pca as pca_mod
    from swe.stages import selection as sel_mod
    from swe.stages import vocab as vocab_mod

    if until is not None and until not in STAGES:
        raise ValueError(f"--until {until!r}: choose one of {', '.join(STAGES)}")
    # Absolute local paths: Ray Train workers do not run in the driver's directory.
    out = _absolute(cfg.output.rstrip("/"))
    storage.check_writable(storage.join(out, "work"))  # fail now, not after an hour of work
    init_ray()
    teacher = _absolute(cfg.teacher_dir())
    report: dict[str, dict] = {}
    m2v = cfg.extraction.mode == "model2vec"

    # -- corpus ---------------------------------------------------------------------------
    hashes = stage_hashes(cfg, teacher)
    st = Stage(out, "corpus", hashes["corpus"])
    if not st.done():
        with st.run():
            shard = ray.remote(num_cpus=0.5)(corpus_mod.shard_file)
            jobs = []
            for lang in cfg.languages:
                c = cfg.corpus[lang]
                for i, path in enumerate(expand_inputs(c.paths)):
                    prefix = st.path(lang, f"f{i:04d}")
                    fmt, col = corpus_mod.tsv_column(path, c.format, c.text_column, lang)
                    jobs.append((f"{lang}-f{i:04d}", lambda p=path, c=c, x=prefix, f=fmt, t=col:
                                 shard.remote(p, f, t, x, c.max_lines, c.shard_lines,
                                              c.on_bad_bytes)))
            results = _sharded(st, jobs)
            shards: dict[str, list] = {lang: [] for lang in cfg.languages}
            for (key, _), r in zip(jobs, results, strict=True):
                shards[key.split("-f")[0]].extend(r["shards"])
            for lang in cfg.languages:  # a language-wide cap, at shard granularity
                cap = cfg.corpus[lang].max_lines
                if cap:
                    kept, n = [], 0
                    for s in shards[lang]:
                        if n >= cap:
                            break
                        kept.append(s)
                        n += s["lines"]
                    shards[lang] = kept
            st.stats.update(shards=shards,
                            lines=sum(s["lines"] for v in shards.values() for s in v),
                            invalid_utf8_lines=sum(r["invalid_utf8_lines"] for r in results))
            _corpus_warnings(st, cfg, jobs, results)
            if not st.stats["lines"]:
                raise ValueError("the corpus has no non-blank lines: check [corpus] paths")
    report["corpus"] = st.done_stats()
    if until == "corpus":
        return report

    # -- sentences --------------------------------------------------------------------------
    st = Stage(out, "sentences", hashes["sentences"])
    if not st.done():
        with st.run():
            task = ray.remote(num_cpus=0.5)(corpus_mod.sentence_shard)
            jobs, langs = [], []
            sid_base = 0
            for lang in cfg.languages:
                split = cfg.corpus[lang].split_sentences
                for s in report["corpus"]["shards"][lang]:
                    name = s["path"].rsplit("/", 1)[-1]
                    dst = st.path(lang, name)
                    jobs.append((f"{sid_base:06d}", lambda a=s["path"], b=dst, k=sid_base, sp=split:
                                 task.remote(a, b, k, teacher, sp, cfg.sentences.min_tokens,
                                             cfg.sentences.max_tokens)))
                    langs.append(lang)
                    sid_base += 1
            t = time.perf_counter()
            results = _sharded(st, jobs)
            shards = {lang: [] for lang in cfg.languages}
            for lang, (key, _), r in zip(langs, jobs, results, strict=True):
                shards[lang].append({"path": r["path"], "sentences": r["sentences"],
                                     "shard_id": int(key)})
            total = sum(r["sentences"] for r in results)
            st.stats.update(shards=shards, sentences=total,
                            dropped_by_length=sum(r["dropped_by_length"] for r in results),
                            sentences_per_s=round(total / max(time.perf_counter() - t, 1e-9)))
            for lang in cfg.languages:
                if not sum(s["sentences"] for s in shards[lang]):
                    raise ValueError(
                        f"no {lang} sentence has {cfg.sentences.min_tokens}–"
                        f"{cfg.sentences.max_tokens} teacher tokens: widen [sentences]")
    report["sentences"] = st.done_stats()
    sent_shards = report["sentences"]["shards"]
    if until == "sentences":
        return report

    # -- vocab ------------------------------------------------------------------------------
    st = Stage(out, "vocab", hashes["vocab"])
    if not st.done():
        with st.run():
            P = cfg.vocab.partitions
            count = ray.remote(num_cpus=0.5, num_returns=P)(vocab_mod.count_shard)
            merge = ray.remote(num_cpus=0.5)(vocab_mod.merge_partition)
            for lang in cfg.languages:
                parts = [count.remote(s["path"], lang, teacher, P) for s in sent_shards[lang]]
                parts = [p if isinstance(p, list) else [p] for p in parts]
                tops = get([merge.remote(*[p[i] for p in parts], size=cfg.vocab.size,
                                          min_count=cfg.vocab.min_count) for i in range(P)])
                top = vocab_mod.top_words([wc for t in tops for wc in t], cfg.vocab.size,
                                          cfg.vocab.min_count)
                if not top:
                    raise ValueError(f"{lang}: no word occurs {cfg.vocab.min_count}+ times; "
                                     "lower vocab.min_count or add corpus")
                words, counts = zip(*top, strict=True)
                buf = io.BytesIO()
                pq.write_table(pa.table({"word": list(words), "count": list(counts)}), buf)
                storage.write_bytes(st.path(f"{lang}.parquet"), buf.getvalue())
                st.stats[lang] = {"size": len(words), "min_count_kept": int(counts[-1])}
                if len(words) < cfg.vocab.size:
                    _short_vocab(st, cfg, lang, len(words))
    report["vocab"] = st.done_stats()
    vocab: dict[str, list[str]] = {}
    vocab_counts: dict[str, np.ndarray] = {}
    for lang in cfg.languages:
        t = corpus_mod.read_parquet(st.path(f"{lang}.parquet"))
        vocab[lang] = t.column("word").to_pylist()
        vocab_counts[lang] = t.column("count").to_numpy()
    if until == "vocab":
        return report

    # -- selection (sentence mode only) -----------------------------------------------------
    sel = Stage(out, "selection", hashes["selection"])
    if not m2v:
        if not sel.done():
            with sel.run():
                _select(sel, cfg, teacher, vocab, sent_shards, sel_mod)
        report["selection"] = sel.done_stats()
    if until == "selection":
        return report

    # -- extraction -------------------------------------------------------------------------
    st = Stage(out, "extraction", hashes["extraction"])
    offsets = np.cumsum([0] + [len(vocab[lang]) for lang in cfg.languages])
    if not st.done():
        with st.run():
            _extract(st, cfg, teacher, vocab, offsets, sel, ex_mod)
            words, vectors = _assemble(st, cfg, vocab, offsets)
            StaticModel.from_vectors(words, vectors, tokenizer=teacher, language=cfg.languages,
                                     provenance=_provenance(cfg, "step1")).save(
                                         storage.join(out, "step1"))
    report["extraction"] = st.done_stats()
    if until == "extraction":
        return report

    # -- PCA --------------------------------------------------------------------------------
    st = Stage(out, "pca", hashes["pca"])
    if not st.done():
        with st.run():
            step1 = StaticModel.load(storage.join(out, "step1"))
            vectors = step1.vectors
            if cfg.pca.level != "none":
                if cfg.pca.level == "word":
                    stats = pca_mod.PCAStats.of(vectors)
                else:
                    stats = _sentence_stats(cfg, sel, out, offsets, pca_mod)
                pca = pca_mod.fit(stats, cfg.pca.dim, cfg.pca.abtt)
                vectors = pca.transform(vectors)
                st.stats.update(fitted_on=int(stats.n), dropped_top=pca.skipped,
                                dim=cfg.pca.dim, level=cfg.pca.level,
                                top_variances=[round(float(v), 4) for v in pca.explained[:5]])
            if m2v:  # SIF weights from the corpus counts
                counts = _word_counts(step1.words, vocab, vocab_counts)
                p = counts / counts.sum()
                vectors = vectors * (cfg.pca.sif_a / (cfg.pca.sif_a + p))[:, None]
                st.stats["sif_a"] = cfg.pca.sif_a
            model = StaticModel.from_vectors(step1.words, vectors, tokenizer=teacher,
                                             language=cfg.languages,
                                             provenance=_provenance(cfg, "step2"))
            model.save(storage.join(out, "step2"))
            model.save(storage.join(out, "model"))
    report["pca"] = st.done_stats()
    if until == "pca" or cfg.refine.objective == "none":
        return report

    # -- refinement data ----------------------------------------------------------------------
    st = Stage(out, "train_data", hashes["train_data"])
    if not st.done():
        with st.run():
            _train_data(st, cfg, teacher, sel)
    report["train_data"] = st.done_stats()
    data = st
    if until == "train_data":
        return report

    # -- refinement on Ray Train ----------------------------------------------------------------
    from swe.stages import refine as refine_mod

    st = Stage(out, "refine", hashes["refine"])
    if not st.done():
        with st.run():
            runs = cfg.refine.storage or st.path("runs")
            best, state = refine_mod.run_training(
                storage.join(out, "step2"), data.path("train.parquet"), data.path("dev.parquet"),
                runs, f"refine-{hashes['refine']}", cfg.refine, cfg.seed)
            step2 = StaticModel.load(storage.join(out, "step2"))
            model = StaticModel.from_vectors(step2.words, best, tokenizer=teacher,
                                             language=cfg.languages,
                                             provenance=_provenance(cfg, "step3"))
            model.save(storage.join(out, "step3"))
            model.save(storage.join(out, "model"))
            curves = storage.join(out, "refinement")
            storage.write_bytes(storage.join(curves, "history.json"),
                                json.dumps(state, indent=1).encode())
            refine_mod.plot_history(state, storage.join(curves, "loss.png"))
            h = state["history"]
            st.stats.update(steps=state["step"], best_step=state["best_step"],
                            best_dev_loss=round(state["best_loss"], 5),
                            initial_dev_loss=round(state["initial_dev_loss"], 5),
                            first_eval_dev_loss=round(h[0]["dev_loss"], 5),
                            resumed_at=state["resumed_at"], train_rows=state["train_rows"],
                            dev_rows=state["dev_rows"],
                            early_stopped=state["step"] < cfg.refine.max_steps)
    report["refine"] = st.done_stats()
    return report


def _train_data(st: Stage, cfg: BuildConfig, teacher: str, sel: Stage) -> None:
    """Training/validation rows for the objective, with teacher embeddings where it needs them."""
    import ray

    from swe.bulk import expand_inputs
    from swe.config import pair_languages
    from swe.stages import train_data as td
    from swe.stages.corpus import read_pairs, write_parquet

    r = cfg.refine
    rng = np.random.default_rng(cfg.seed)
    if r.objective == "distill":
        train_sids, dev_sids = [], []
        for lang in cfg.languages:
            z = storage.load_npz(sel.path(f"pairs-{lang}.npz"))
            tr, dv = td.sample_sentences(z["word_id"], z["sid"], r.min_sentences,
                                         r.train_per_word, r.dev_per_word, r.dev_max, rng)
            train_sids.append(tr)
            dev_sids.append(dv)
        tr, dv = np.concatenate(train_sids), np.concatenate(dev_sids)
        if len(dv) > r.dev_max:
            dv = np.sort(rng.choice(dv, r.dev_max, replace=False))
        task = ray.remote(num_cpus=0.5)(td.pick_texts)
        wanted = np.union1d(tr, dv)
        found = pa.concat_tables(get([task.remote(u, wanted)
                                      for u in storage.find(sel.path("parts"))]))
        sid = found.column("sid").to_numpy()
        train = pa.table({"src": found.filter(pa.array(np.isin(sid, tr))).column("text")})
        dev = pa.table({"src": found.filter(pa.array(np.isin(sid, dv))).column("text")})
    else:
        read = ray.remote(num_cpus=0.5)(read_pairs)
        jobs = [(key, read.remote(path, *pair_languages(key)))
                for key, p in cfg.pairs.items() for path in expand_inputs(p.paths)]
        src, tgt, which, skipped = [], [], [], 0
        for key, ref in jobs:
            xs, ys, bad = get(ref)
            src += xs
            tgt += ys
            which += [key] * len(xs)
            skipped += bad
        if not src:
            raise ValueError("no translation pair found in [pairs] files")
        train, dev = td.split_pairs(src, tgt, which, r.dev_max, rng)
        st.stats.update(pairs_skipped=skipped,
                        pairs={k: which.count(k) for k in cfg.pairs})
    if r.objective in ("distill", "kd"):
        train, dev = _with_teacher(cfg, teacher, train, dev, td)
    write_parquet(st.path("train.parquet"), train)
    write_parquet(st.path("dev.parquet"), dev)
    st.stats.update(train_rows=len(train), dev_rows=len(dev))
    if len(train) < r.batch_size or len(dev) < 2:
        raise ValueError(f"only {len(train)} training / {len(dev)} validation rows for "
                         f"refine.batch_size = {r.batch_size}: use more corpus or pairs, or "
                         "lower refine.min_sentences / batch_size")


def _with_teacher(cfg: BuildConfig, teacher: str, train: pa.Table, dev: pa.Table, td):
    """Add the teacher's sentence embedding of ``src`` as a ``teacher`` column (one Ray Data
    actor job over both splits)."""
    import ray

    from swe.stages.extraction import actor_count

    ex = cfg.extraction
    texts = train.column("src").to_pylist() + dev.column("src").to_pylist()
    items = pa.table({"row": np.arange(len(texts)), "text": pa.array(texts, pa.string())})
    blocks = max(1, math.ceil(len(texts) / ex.batch_size))
    ds = ray.data.from_arrow(items).repartition(blocks).map_batches(
        td.TeacherEmbedder, batch_size=ex.batch_size, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(
            size=actor_count(ex.actors, ex.gpus_per_actor, ex.threads_per_actor)),
        num_cpus=ex.cpus_per_actor, num_gpus=ex.gpus_per_actor or None,
        fn_constructor_kwargs={"teacher_dir": teacher, "token_budget": ex.token_budget,
                               "threads": ex.threads_per_actor,
                               "trust_remote_code": cfg.trust_remote_code})
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


def _corpus_warnings(st: Stage, cfg: BuildConfig, jobs: list, results: list[dict]) -> None:
    """Warn (log and ``_DONE.json``) about empty input files and lines that were not UTF-8."""
    for (key, _), r in zip(jobs, results, strict=True):
        lang = key.split("-f")[0]
        if not r["lines"]:
            st.warn(f"{r.get('path', key)}: no non-blank lines (empty file?)")
        if r["invalid_utf8_lines"]:
            policy = cfg.corpus[lang].on_bad_bytes
            st.warn(f"{r.get('path', key)}: {r['invalid_utf8_lines']} line(s) not valid UTF-8, "
                    f"{'skipped' if policy == 'skip' else 'decoded with U+FFFD'} "
                    f"(corpus.{lang}.on_bad_bytes = {policy!r})")


def _short_vocab(st: Stage, cfg: BuildConfig, lang: str, found: int) -> None:
    """Fewer words than ``vocab.size`` reach ``min_count``: stop or warn per ``vocab.on_short``."""
    v = cfg.vocab
    msg = (f"{lang}: only {found} words occur {v.min_count}+ times, fewer than vocab.size = "
           f"{v.size}; add corpus, or lower vocab.size or vocab.min_count")
    if v.on_short == "error":
        raise ValueError(f"{msg} (or set vocab.on_short = 'warn' to build with {found} words)")
    st.warn(msg)


def _absolute(url: str) -> str:
    import os

    return os.path.abspath(url) if storage.is_local(url) else url


def stage_hashes(cfg: BuildConfig, teacher: str) -> dict[str, str]:
    """Each stage's config hash, chained through its upstream stages. Only settings that change
    a stage's result count: resources (actors, batch sizes, token budget) do not."""
    corpus = {lang: _hashed(c, on_bad_bytes="skip") for lang, c in cfg.corpus.items()}
    h = {"corpus": stage_hash("corpus", cfg.languages, corpus)}
    h["sentences"] = stage_hash("sentences", h["corpus"], cfg.sentences, teacher, corpus)
    h["vocab"] = stage_hash("vocab", h["sentences"], _hashed(cfg.vocab, on_short="warn"))
    h["selection"] = stage_hash("selection", h["vocab"], cfg.selection)
    upstream = h["vocab"] if cfg.extraction.mode == "model2vec" else h["selection"]
    h["extraction"] = stage_hash("extraction", upstream, cfg.extraction.mode)
    h["pca"] = stage_hash("pca", h["extraction"], cfg.pca, cfg.seed)
    r = cfg.refine
    data_from = h["selection"] if r.objective == "distill" else sorted(cfg.pairs.items())
    h["train_data"] = stage_hash("train_data", data_from, teacher, cfg.seed, r.objective,
                                 r.min_sentences, r.train_per_word, r.dev_per_word, r.dev_max)
    h["refine"] = stage_hash("refine", h["pca"], h["train_data"], r.batch_size, r.lr, r.clip,
                             r.tau, r.max_steps, r.eval_every, r.patience, r.workers)
    return h


def _hashed(section, **neutral) -> dict:
    """A config section as hashed, without the keys added later that are at their default, so
    adding such a key keeps the markers of earlier builds valid."""
    d = dataclasses.asdict(section)
    for key, value in neutral.items():
        if d.get(key) == value:
            d.pop(key)
    return d


def _provenance(cfg: BuildConfig, step: str) -> dict:
    return {"step": step, "teacher": cfg.teacher, "build": cfg.name,
            "extraction": cfg.extraction.mode, "vocab_size": cfg.vocab.size,
            "n": cfg.selection.n, "candidates": cfg.selection.candidates,
            "pca": {"level": cfg.pca.level, "dim": cfg.pca.dim, "abtt": cfg.pca.abtt}}


def _word_counts(words, vocab, vocab_counts) -> np.ndarray:
    lookup: dict[str, float] = {}
    for lang, ws in vocab.items():
        for w, c in zip(ws, vocab_counts[lang], strict=True):
            lookup[w] = lookup.get(w, 0) + float(c)
    return np.array([lookup.get(w, 1.0) for w in words])


def _select(st: Stage, cfg: BuildConfig, teacher, vocab, sent_shards, sel_mod) -> None:
    import ray

    df = ray.remote(num_cpus=0.5)(sel_mod.shard_df)
    heaps = ray.remote(num_cpus=0.5)(sel_mod.shard_heaps)
    emit = ray.remote(num_cpus=0.5)(sel_mod.emit_selected)
    n, c = cfg.selection.n, cfg.selection.candidates
    total_unique = 0
    below = 0
    missing = 0
    pairs_all = []
    for lang in cfg.languages:
        shards = sent_shards[lang]
        words = vocab[lang]
        words_ref = ray.put(words)
        pairs = [st.path("candidates", f"{s['shard_id']:06d}.npz") for s in shards]
        dfs = get([df.remote(s["path"], lang, teacher, words_ref, pp)
                    for s, pp in zip(shards, pairs, strict=True)])
        quotas = sel_mod.quotas(dfs, c)
        parts = get([heaps.remote(s["path"], lang, teacher, words_ref, q, n, pp)
                      for s, q, pp in zip(shards, quotas, pairs, strict=True)])
        wid, _, sid = sel_mod.merge_heaps(parts, n)
        per_word = np.bincount(wid, minlength=len(words))
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
        total_unique += sum(get(emits))
        pairs_all.append((lang, wid, sid))
    for lang, wid, sid in pairs_all:
        storage.save_npz(st.path(f"pairs-{lang}.npz"), word_id=wid, sid=sid)
    naive = sum(len(vocab[lang]) for lang in cfg.languages) * n
    st.stats.update(unique_sentences=total_unique, naive_encodes=naive,
                    encode_ratio=round(total_unique / max(naive, 1), 3),
                    words_below_n=below, words_without_sentence=missing)


def _extract(st: Stage, cfg: BuildConfig, teacher, vocab, offsets, sel: Stage, ex_mod) -> None:
    """Ray Data jobs ("waves") of about ``extraction.job_sentences`` sentences over the unfinished
    parts; each part's sums are saved (and marked) as soon as all its sentences are in, so a
    killed build resumes part by part."""
    import ray

    from swe.raysetup import pyarrow_filesystem

    ex = cfg.extraction
    waves: list[tuple[dict, object]] = []
    if ex.mode == "model2vec":
        if not st.shard_done("m2v"):
            from swe.stages.corpus import load_tokenizer

            tok = load_tokenizer(teacher)
            rows = [{"text": w, "lang": lang, "word_ids": [i], "part": "m2v",
                     "ntok": len(tok.encode(w, add_special_tokens=False).ids)}
                    for lang in cfg.languages for i, w in enumerate(vocab[lang])]
            blocks = max(1, math.ceil(len(rows) / ex.batch_size))
            waves.append(({"m2v": len(rows)}, ray.data.from_items(rows,
                                                                  override_num_blocks=blocks)))
    else:
        fs, _ = storage.filesystem(sel.dir)
        pending = []
        for url in storage.find(sel.path("parts")):
            key = url.rsplit("/", 1)[-1].removesuffix(".parquet")
            if not st.shard_done(key):
                with fs.open(storage.filesystem(url)[1], "rb") as fh:
                    pending.append((key, url, pq.ParquetFile(fh).metadata.num_rows))
        group: list = []
        for i, item in enumerate(pending):
            group.append(item)
            if sum(g[2] for g in group) >= ex.job_sentences or i == len(pending) - 1:
                expected = {k: n for k, _, n in group}
                pafs, _ = pyarrow_filesystem(group[0][1])
                paths = [pyarrow_filesystem(u)[1] for _, u, _ in group]
                # Enough blocks that every actor stays busy (a part is one file otherwise).
                blocks = max(len(paths), math.ceil(sum(expected.values()) / ex.batch_size))
                waves.append((expected, lambda p=paths, fs_=pafs, nb=blocks: ray.data.read_parquet(
                    p, filesystem=fs_, include_paths=True, override_num_blocks=nb
                ).repartition(nb)))
                group = []
    if not waves:
        log.info("[extraction] every part already done")
        return
    n_actors = ex_mod.actor_count(ex.actors, ex.gpus_per_actor, ex.threads_per_actor)
    threads = ex.threads_per_actor if not ex.gpus_per_actor else None
    t0, total_sent, total_vec = time.perf_counter(), 0, 0
    for w, (expected, ds) in enumerate(waves):
        log.info("[extraction] job %d/%d: %d parts, %d sentences", w + 1, len(waves),
                 len(expected), sum(expected.values()))
        ds = ds() if callable(ds) else ds
        ds = ds.map_batches(
            ex_mod.Extractor, batch_size=ex.batch_size, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=n_actors), num_cpus=ex.cpus_per_actor,
            num_gpus=ex.gpus_per_actor or None,
            fn_constructor_kwargs={"teacher_dir": teacher, "vocab": vocab,
                                   "lang_offset": {lang: int(offsets[i]) for i, lang
                                                   in enumerate(cfg.languages)},
                                   "token_budget": ex.token_budget, "mode": ex.mode,
                                   "threads": threads,
                                   "trust_remote_code": cfg.trust_remote_code})
        acc: dict[str, ex_mod.PartSums] = {k: ex_mod.PartSums() for k in expected}
        for b in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            for key, _ in acc_add(acc, b):
                part = acc[key]
                if part.sentences > expected[key]:
                    raise RuntimeError(f"part {key}: {part.sentences} sentences processed for "
                                       f"{expected[key]} rows (a retried batch counted twice?)")
                if part.sentences == expected[key]:
                    wid, sums, counts = part.result()
                    storage.save_npz(st.path("partials", f"{key}.npz"), word_id=wid, sum=sums,
                              count=counts)
                    st.mark_shard(key, {"sentences": part.sentences,
                                        "vectors": int(counts.sum())})
                    total_sent += part.sentences
                    total_vec += int(counts.sum())
                    del acc[key]
        if acc:
            raise RuntimeError(f"extraction ended with incomplete parts: {sorted(acc)}")
        secs = time.perf_counter() - t0
        log.info("[extraction] %d sentences done, %.1f sentences/s", total_sent,
                 total_sent / max(secs, 1e-9))
    secs = time.perf_counter() - t0
    st.stats.update(actors=n_actors, sentences=total_sent, word_vectors=total_vec,
                    sentences_per_s=round(total_sent / max(secs, 1e-9), 1))


def acc_add(acc: dict, batch: pa.Table):
    """Add one output batch of the extractor to the per-part sums; yield parts it touched."""
    parts = batch.column("part").to_pylist()
    wid = batch.column("word_id").to_numpy()
    cnt = batch.column("count").to_numpy()
    flat = batch.column("sum").combine_chunks()
    mat = flat.values.to_numpy().reshape(len(batch), -1)
    touched = {}
    for key in set(parts):
        m = np.asarray([p == key for p in parts])
        sent = m & (wid < 0)
        acc[key].add(wid[m & ~sent], mat[m & ~sent], cnt[m & ~sent], int(cnt[sent].sum()))
        touched[key] = acc[key].sentences
    return touched.items()


def _assemble(st: Stage, cfg: BuildConfig, vocab, offsets):
    """Sum the partials → mean vectors; identical strings across languages are averaged."""
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
    all_words = [w for lang in cfg.languages for w in vocab[lang]]
    merged: dict[str, list[int]] = {}
    for i, w in enumerate(all_words):
        if counts[i]:
            merged.setdefault(w, []).append(i)
    words = list(merged)
    vectors = np.stack([np.mean([sums[i] / counts[i] for i in merged[w]], axis=0)
                        for w in words]).astype(np.float32)
    st.stats.update(words=len(words), words_without_vectors=int((counts == 0).sum()))
    return words, vectors


def _sentence_stats(cfg: BuildConfig, sel: Stage, out: str, offsets, pca_mod):
    """Sentence-level PCA statistics: one random sentence per word with >= 3 sentences, at most
    ``pca.sample`` of them, each embedded as the mean of its words' step-1 vectors."""
    import ray

    rng = np.random.default_rng(cfg.seed)
    chosen = []
    for lang in cfg.languages:
        z = storage.load_npz(sel.path(f"pairs-{lang}.npz"))
        wid, sid = z["word_id"], z["sid"]
        per_word = np.bincount(wid)
        start = np.searchsorted(wid, np.arange(len(per_word)))
        for w in np.flatnonzero(per_word >= 3):
            chosen.append(sid[start[w] + rng.integers(per_word[w])])
    chosen = np.unique(np.asarray(chosen, dtype=np.int64))
    if len(chosen) > cfg.pca.sample:
        chosen = np.sort(rng.choice(chosen, cfg.pca.sample, replace=False))
    if len(chosen) < 2:
        raise ValueError("too few words with >= 3 sentences for sentence-level PCA; use "
                         "pca.level = 'word' or a larger corpus")
    task = ray.remote(num_cpus=0.5)(_pca_part)
    refs = [task.remote(url, storage.join(out, "step1"), chosen)
            for url in storage.find(sel.path("parts"))]
    parts = get(refs)
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def _pca_part(part_url: str, model_path: str, chosen: np.ndarray):
    from swe.stages.corpus import read_parquet
    from swe.stages.pca import PCAStats, sentence_stats

    t = read_parquet(part_url, ["sid", "text"])
    keep = np.isin(t.column("sid").to_numpy(), chosen)
    texts = [x for x, k in zip(t.column("text").to_pylist(), keep, strict=True) if k]
    if not texts:
        return PCAStats(0, 0.0, 0.0)
    return sentence_stats(model_path, texts)
