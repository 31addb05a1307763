"""End-to-end builds on real Ray with the real MiniLM teacher."""

import json
import lzma
import shutil

import numpy as np
import pytest

from swe import StaticModel
from swe.build import build, load_config

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]

SMALL = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=3", "selection.n=4",
         "selection.candidates=40", "pca.sample=200", "pca.dim=64", "corpus.en.max_lines=2400",
         "corpus.en.shard_lines=800", "extraction.batch_size=128", "extraction.job_sentences=250",
         "extraction.actors=1"]


@pytest.fixture(scope="module")
def corpus_lines(data_dir):
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.03.txt.xz", "rt") as f:
        return [next(f) for _ in range(2400)]


def _cfg(output, corpus, extra=()):
    return load_config("pipelines/configs/quickstart.toml",
                       [*SMALL, f"corpus.en.paths=['{corpus}']", *extra], output=output)


def test_resume_after_interruption_gives_the_same_model(tmp_path, corpus_lines):
    src = tmp_path / "corpus.txt"
    src.write_text("".join(corpus_lines))
    out = tmp_path / "build"
    cfg = _cfg(str(out), str(src), ["extraction.actors=2"])  # the resume: a pool of two
    build(cfg, until="selection")
    assert not (out / "work" / "extraction").exists()
    # One actor (the pool's size is not part of any stage's hash): one teacher actor pool
    # serves every extraction wave, so one process ran them all (a pool per wave: one each).
    first = build(_cfg(str(out), str(src)))
    model_a = StaticModel.load(out / "model")
    # Every stage states the driver's peak RSS during it (its own, not the process's so far).
    assert all(r.driver_peak_mib > 0 for r in first.values())
    waves = list((out / "work" / "extraction" / "_shards").glob("wave-*.json"))
    assert len(waves) >= 2 and first["extraction"].actor_processes == 1
    done = {s: (out / "work" / s / "_DONE.json").read_text() for s in ("corpus", "vocab")}

    # Simulate a kill in the middle of extraction: the stage and its reduce never finished, the
    # second job's marker is gone, and its killed attempt left a file (of other batching) behind,
    # which would be counted twice if it were not cleared.
    ex = out / "work" / "extraction"
    (ex / "_DONE.json").unlink()
    for marker in [*(ex / "_shards").glob("reduce-*"), ex / "_shards" / "assemble.json",
                   ex / "_shards" / "wave-00001.json"]:
        marker.unlink()
    (wave1,) = (ex / "sums").glob("wave00001*")  # wave<w>-<attempt>
    left = sorted(wave1.rglob("*.npz"))
    shutil.copy(left[0], left[0].with_name("b99999999999999999999.npz"))
    (out / "work" / "pca" / "_DONE.json").unlink()
    second = build(cfg)
    model_b = StaticModel.load(out / "model")
    assert {s: (out / "work" / s / "_DONE.json").read_text() for s in done} == done
    assert model_a.words == model_b.words
    # Exact fixed-point sums: the same model bit for bit, not approximately.
    assert np.array_equal(model_a.vectors, model_b.vectors)
    assert first["selection"] == second["selection"]

    # A changed PCA setting reruns only the PCA stage.
    third = build(_cfg(str(out), str(src), ["pca.abtt=false"]))
    assert third["pca"].dropped_top == 0
    assert json.loads((out / "work" / "extraction" / "_DONE.json").read_text())

    # A moved output is self-contained: its markers name work files relative to the output, so
    # with the original gone, a changed selection reads the moved folder's sentence shards.
    assert str(out) not in (out / "work" / "sentences" / "_DONE.json").read_text()
    moved = tmp_path / "moved"
    shutil.move(out, moved)
    fourth = build(_cfg(str(moved), str(src), ["pca.abtt=false", "selection.n=3"]),
                   until="selection")
    assert all(s["path"].startswith(str(moved))
               for v in fourth["sentences"].shards.values() for s in v)
    assert fourth["selection"].naive_encodes < first["selection"].naive_encodes


def test_model2vec_mode(tmp_path, corpus_lines):
    src = tmp_path / "corpus.txt"
    src.write_text("".join(corpus_lines))
    cfg = _cfg(str(tmp_path / "m2v"), str(src), ["extraction.mode='model2vec'",
                                                  "pca.level='word'"])
    report = build(cfg)
    assert "selection" not in report and report["pca"].level == "word"
    model = StaticModel.load(tmp_path / "m2v" / "model")
    assert len(model) == 150 and model.dim == 64
