"""Issue 14 end to end on real Ray, the real MiniLM teacher and the moto S3 server: an en-de build
from CCMatrix-format pairs (an OPUS Moses zip with scores and a headerless CCMatrix TSV) on S3,
with filters, global deduplication, ``max_pairs`` by score and a reproducible global shuffle."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import pyarrow.dataset as pds
import pytest

from swe import StaticModel, storage
from swe.build import build, load_config

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=3", "selection.n=6",
         "selection.candidates=40", "pca.sample=200", "pca.dim=64",
         "extraction.batch_size=128", "extraction.job_sentences=1000", "refine.batch_size=32",
         "refine.eval_every=5", "refine.checkpoint_every=5", "refine.cpus_per_worker=0.5",
         "extraction.actors=1"]


def _fixture_module():
    spec = importlib.util.spec_from_file_location("ccmatrix_fixture",
                                                  ROOT / "tools/ccmatrix_fixture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pairs(data_dir):
    """3,000 real en-de pairs (Multi30k train), with CCMatrix-like scores for two releases."""
    with gzip.open(data_dir / "parallel/en-de/multi30k_train.tsv.gz", "rt") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    seen, en, de = set(), [], []
    for e, d in rows:
        if e.strip() and d.strip() and e.casefold() != d.casefold() and (e, d) not in seen:
            seen.add((e, d))
            en.append(e)
            de.append(d)
        if len(en) == 3000:
            break
    rng = np.random.default_rng(7)
    return en, de, rng.uniform(1.0, 1.3, 2000).round(7), rng.uniform(1.0, 1.3, 2000).round(7)


def _write_releases(tmp: Path, pairs) -> tuple[Path, Path]:
    """The zip holds pairs 0–1,999 (+ an untranslated copy), the TSV pairs 1,000–2,999: 1,000
    duplicates across the two sources, each with two scores."""
    fx = _fixture_module()
    en, de, s_zip, s_tsv = pairs
    zen, zde = [*en[:2000], "Hello world again"], [*de[:2000], "hello  WORLD again"]
    zip_path, tsv_path = tmp / "de-en.txt.zip", tmp / "de-en.tsv.xz"
    fx.write_moses_zip(zip_path, "en-de", zen, zde, np.append(s_zip, 1.25))
    fx.write_ccmatrix_tsv(tsv_path, "en-de", en[1000:], de[1000:], s_tsv)
    return zip_path, tsv_path


def _split(out: str, name: str):
    fs, path = storage.pyarrow_filesystem(f"{out}/work/train_data/{name}")
    return pds.dataset(path, filesystem=fs, format="parquet").to_table()


def test_en_de_build_from_ccmatrix_releases_on_s3(s3, tmp_path, pairs, data_dir):
    en, de, s_zip, s_tsv = pairs
    zip_path, tsv_path = _write_releases(tmp_path, pairs)
    fs, _ = storage.filesystem(s3)
    for p in (zip_path, tsv_path):
        fs.put(str(p), f"{s3}/ccmatrix/{p.name}")
    mono_en, mono_de = tmp_path / "en.txt", tmp_path / "de.txt"
    mono_en.write_text("\n".join(en) + "\n")
    mono_de.write_text("\n".join(de) + "\n")
    out = f"{s3}/builds/ccmatrix-en-de"
    cfg = load_config("pipelines/configs/quickstart.toml", [
        *SMALL, "languages=['en', 'de']", f"corpus.en.paths=['{mono_en}']",
        f"corpus.de.paths=['{mono_de}']", "corpus.en.split_sentences=false",
        "corpus.de.split_sentences=false",
        f"pairs.en-de.paths=['{s3}/ccmatrix/de-en.txt.zip', '{s3}/ccmatrix/de-en.tsv.xz']",
        "pairs.en-de.max_pairs=2500", "refine.objective='contrastive'", "refine.dev_max=100",
        "refine.max_steps=40", "refine.patience=100", "refine.kd_weight=0.5",
        # two Train workers: TorchTrainer's process group, the train split split between them
        # and each batch's vectors gathered (one worker runs without torch.distributed)
        "refine.workers=2"], output=out)
    report = build(cfg)
    data = report["train_data"]
    read = data.read["en-de"]
    assert read["read"] == 4001 and read["identical"] == 1 and read["kept"] == 4000
    assert data.duplicates == 1000 and data.over_max_pairs == 500
    assert data.pairs == {"en-de": 2500} and data.dev_rows == 100 and data.train_rows == 2400

    # Exactly the 2,500 best-scored distinct pairs (a duplicate's best score counts),
    # English on the src side whatever the files' column order.
    best = {}
    for i in range(3000):
        scores = ([s_zip[i]] if i < 2000 else []) + ([s_tsv[i - 1000]] if i >= 1000 else [])
        best[(en[i], de[i])] = max(scores)
    wanted = set(sorted(best, key=best.get, reverse=True)[:2500])
    train, dev = _split(out, "train"), _split(out, "dev")
    got = list(zip(train.column("src").to_pylist() + dev.column("src").to_pylist(),
                   train.column("tgt").to_pylist() + dev.column("tgt").to_pylist(), strict=True))
    assert len(got) == 2500 and set(got) == wanted
    kept_scores = train.column("score").to_pylist() + dev.column("score").to_pylist()
    assert sorted(kept_scores) == sorted(best[p] for p in wanted)
    # refine.kd_weight: train_data ran the teacher over every pair's source.
    assert len(train.column("teacher")[0]) == len(dev.column("teacher")[0]) == 384
    # The global shuffle: validation is the tail of one seed-keyed order.
    assert dev.column("k").to_numpy().min() > train.column("k").to_numpy().max()
    r = report["refine"]
    assert r.best_dev_loss < r.initial_dev_loss and r.steps == 40
    model = StaticModel.load(f"{out}/model")
    assert model.languages == ["en", "de"] and report["vocab"].sizes == {"en": 150, "de": 150}
    # Both languages' words; a string in both vocabularies is one row (as in the paper).
    assert len(model) < 300 and "Mann" in model.words and "man" in model.words
    # Held-out pairs (Multi30k validation): translation retrieval improves over step 2.
    with gzip.open(data_dir / "parallel/en-de/multi30k_val.tsv.gz", "rt") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:301]
    val_en, val_de = [r[0] for r in rows], [r[1] for r in rows]
    from swe.eval.metrics import top_k

    acc = [float(np.mean(top_k(m.encode(val_de), m.encode(val_en), 1)[1][:, 0] == np.arange(300)))
           for m in (StaticModel.load(f"{out}/step2"), model)]
    assert acc[1] > acc[0]


def test_aligned_files_of_different_lengths_stop_with_one_line_naming_both(ray_session,
                                                                          tmp_path, pairs):
    """Two aligned files of different lengths, read by the stage's Ray Data tasks: one line
    naming both files and both counts, no traceback."""
    from swe.build.pairs.dataset import read_pairs
    from swe.build.pairs.sources import PairsConfig, plan_sources

    en, de, _, _ = pairs
    _fixture_module().write_aligned(tmp_path / "train", "en-de", en[:500], de[:500])
    (tmp_path / "train.de").write_text("\n".join(de[:499]) + "\n")
    cfg = PairsConfig(paths=[str(tmp_path / "train.en"), str(tmp_path / "train.de")])
    with pytest.raises(ValueError) as info:
        read_pairs(plan_sources("en-de", cfg), {"en-de": cfg}, str(tmp_path / "stats"), 0)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message, message
    assert "train.en" in message and "train.de" in message
    assert "500" in message and "499" in message


def test_kept_pairs_are_counted_per_language_pair_in_both_split_kinds(ray_session):
    """The stage's per-pair counts, block by block in tasks, equal a group-by over the rows
    the splits keep: the last-by-key split and the held-out-documents one (dev capped)."""
    import ray

    from swe.build.pairs.dataset import pair_counts, split_by_document
    from swe.build.pairs.splits import split_last, where

    rng = np.random.default_rng(0)
    rows = [{"pair": str(rng.choice(["en-de", "en-fr", "en-ja"])), "dev": bool(rng.random() < .2),
             "k": int(rng.integers(1 << 60))} for _ in range(3000)]
    ds = ray.data.from_items(rows, override_num_blocks=5).materialize()
    for kind in ("last", "documents"):
        if kind == "last":
            train, dev, n = split_last(ds, 200)
            got = pair_counts(train, dev)
        else:
            train, dev, n = split_by_document(ds, 200)
            got = pair_counts(where(ds, "dev", [False]), dev)
        want = {r["pair"]: r["count()"] for r in train.union(dev).groupby("pair").count()
                .take_all()}
        assert got == want and sum(got.values()) == train.count() + dev.count(), kind
        assert dev.count() == 200 and (kind == "documents" or n == 3000)
