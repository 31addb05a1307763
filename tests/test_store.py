"""The teacher-output store (``extraction.store``) on real Ray with the real MiniLM teacher:
a warm store serves every sentence (no teacher pass) and gives the same model files as a cold
one; a larger V encodes only the sentences its new words bring; a kill mid-write, a damaged
row or file, a store of another teacher or a path that cannot be written are all handled."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from procs import joined_env

from swe.build import build, load_config
from swe.build.config import ConfigError
from swe.build.teacher.store import (
    StoreError,
    descriptor,
    list_store,
    open_namespace,
    prune,
    restore_descriptor,
)
from swe.lease import live_uses

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


def _small(corpus, store, size=150):
    return [f"vocab.size={size}", "vocab.min_count=3", "vocab.partitions=2", "selection.n=4",
            "selection.candidates=40", "corpus.en.max_lines=2400", "corpus.en.shard_lines=1200",
            "extraction.batch_size=128", "extraction.job_sentences=200",
            f"corpus.en.paths=['{corpus}']", f"extraction.store='{store}'"]


@pytest.fixture(scope="module")
def corpus(data_dir):
    return data_dir / "corpora/en_wikipedia/enwiki_sents.03.txt.xz"


def _build(out, corpus, store, size=150):
    cfg = load_config("pipelines/configs/quickstart.toml", _small(corpus, store, size),
                      output=str(out))
    return build(cfg, until="extraction")["extraction"]


def _digests(model_dir):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(model_dir).iterdir()) if p.name != "README.md"}


@pytest.fixture(scope="module")
def cold(tmp_path_factory, corpus):
    """A build into an empty store: its result, step-1 digests, the store and the output."""
    root = tmp_path_factory.mktemp("store-cold")
    result = _build(root / "out", corpus, root / "store")
    return result, _digests(root / "out" / "step1"), root / "store", root / "out"


def _seeded(cold, dst: Path) -> Path:
    """``dst`` holding the cold build's finished stages before extraction (reused as they are:
    same config, same corpus), so a build into it runs the extraction stage, the one that reads
    and writes the store, without repeating corpus, vocabulary and selection."""
    shutil.copytree(cold[3], dst, ignore=shutil.ignore_patterns("extraction", "step1"))
    return dst


def test_warm_store_serves_everything_and_gives_the_same_model(tmp_path, corpus, cold,
                                                               monkeypatch):
    result, digests, store, _ = cold
    assert result.teacher_passes == result.sentences > 0 and result.store_hits == 0
    assert result.store_bytes > 0
    [ns] = list_store(str(store))
    assert ns["sentences"] == result.teacher_passes and ns["runtime"] == "onnx-int8"
    # The warm build holds a use of the namespace until it closes: a prune then refuses it,
    # and a descriptor a prune removed under it is written again (round 14).
    seen = []

    def closing(namespace):
        with pytest.raises(StoreError, match=r"is in use by .*build quickstart into .*warm"):
            prune(str(store), teacher=namespace.descriptor["teacher_sha256"][:6])
        (Path(namespace.url) / "_NAMESPACE.json").unlink()
        seen.append(live_uses(namespace.url))
        restore_descriptor(namespace)

    monkeypatch.setattr("swe.build.teacher.store.restore_descriptor", closing)
    warm = _build(_seeded(cold, tmp_path / "warm"), corpus, store)
    monkeypatch.undo()
    assert len(seen) == 1 and len(seen[0]) == 1
    assert list_store(str(store))[0]["sentences"] == ns["sentences"]  # listed again, whole
    assert live_uses(str(store / ns["namespace"])) == []  # given back
    assert warm.teacher_passes == 0 and warm.store_hits == result.teacher_passes
    assert _digests(tmp_path / "warm" / "step1") == digests

    # A larger V pays only for the sentences its new words bring.
    shutil.copytree(store, tmp_path / "grown-store")
    grown = _build(_seeded(cold, tmp_path / "grown"), corpus, tmp_path / "grown-store",
                   size=200)
    fresh = _build(_seeded(cold, tmp_path / "fresh"), corpus, tmp_path / "fresh-store",
                   size=200)
    assert grown.store_hits > 0 and grown.teacher_passes == fresh.teacher_passes - grown.store_hits
    assert _digests(tmp_path / "grown" / "step1") == _digests(tmp_path / "fresh" / "step1")


def test_a_damaged_row_and_a_cut_file_are_encoded_again(tmp_path, corpus, cold):
    result, digests, source, _ = cold
    store = tmp_path / "store"
    shutil.copytree(source, store)
    files = sorted(store.rglob("*.parquet"))
    t = pq.read_table(files[0])
    vec = bytearray(t.column("vectors")[0].as_py())
    vec[0] ^= 0xFF  # one flipped byte in one stored vector
    t = t.set_column(t.column_names.index("vectors"), "vectors",
                     pa.array([bytes(vec), *t.column("vectors").to_pylist()[1:]], pa.binary()))
    pq.write_table(t, files[0])
    files[1].write_bytes(files[1].read_bytes()[:100])  # a write cut short
    again = _build(_seeded(cold, tmp_path / "again"), corpus, store)
    assert 1 <= again.teacher_passes < result.teacher_passes
    assert any("encoded again" in w for w in again.warnings)
    assert _digests(tmp_path / "again" / "step1") == digests


def test_a_build_killed_while_writing_the_store_resumes_to_the_same_model(tmp_path, corpus,
                                                                          cold):
    result, digests, _, _ = cold
    store, out = tmp_path / "store", _seeded(cold, tmp_path / "killed")
    sets = [a for s in _small(corpus, store) for a in ("--set", s)]
    cmd = [sys.executable, str(ROOT / "pipelines/build.py"), "--config",
           str(ROOT / "pipelines/configs/quickstart.toml"), "--output", str(out), *sets,
           "--until", "extraction"]
    p = subprocess.Popen(cmd, env=joined_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and not list(store.rglob("*.parquet")):
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)  # mid-extraction: some batches stored, others not
    p.wait()
    stored = sum(pq.read_metadata(f).num_rows for f in store.rglob("*.parquet")
                 if f.stat().st_size > 100)
    assert stored > 0
    resumed = _build(out, corpus, store)
    assert resumed.store_hits >= stored and \
        resumed.teacher_passes + resumed.store_hits == result.teacher_passes
    [ns] = list_store(str(store))
    assert ns["sentences"] <= result.teacher_passes + 128  # at most the batches in flight twice
    assert _digests(out / "step1") == digests


def test_two_builds_writing_one_store_at_once(tmp_path, corpus, cold):
    """Concurrent writers never clobber each other: both builds finish with the cold model, and
    a third build finds every sentence."""

    result, digests, _, _ = cold
    store = tmp_path / "store"
    # Both drivers join this session's Ray (two clients of one cluster, one teacher actor
    # each, so the two builds fit its 2 CPUs side by side) rather than start one each.
    env = joined_env()
    procs = []
    for name in ("a", "b"):
        sets = [a for s in [*_small(corpus, store), "extraction.actors=1"]
                for a in ("--set", s)]
        procs.append(subprocess.Popen(
            [sys.executable, str(ROOT / "pipelines/build.py"), "--config",
             str(ROOT / "pipelines/configs/quickstart.toml"), "--output",
             str(_seeded(cold, tmp_path / name)),
             *sets, "--until", "extraction"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True))
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()
    for name in ("a", "b"):
        assert _digests(tmp_path / name / "step1") == digests
        stats = json.loads((tmp_path / name / "work/extraction/_DONE.json").read_text())
        assert stats["stats"]["store_hits"] < result.teacher_passes  # neither found all stored
    third = _build(_seeded(cold, tmp_path / "c"), corpus, store)
    assert third.teacher_passes == 0 and third.store_hits == result.teacher_passes


def test_a_store_of_another_teacher_or_a_foreign_folder_is_refused(tmp_path):
    store = tmp_path / "store"
    desc = descriptor("a" * 64, "torch", 512, 384)
    ns = open_namespace(str(store), desc)
    meta = Path(ns.url) / "_NAMESPACE.json"
    meta.write_text(json.dumps({**desc, "dim": 768}))  # rows of another teacher under this id
    with pytest.raises(StoreError, match=r"another teacher or runtime.*dim"):
        open_namespace(str(store), desc)
    foreign = tmp_path / "thesis"
    foreign.mkdir()
    (foreign / "chapter1.tex").write_text("keep")
    with pytest.raises(StoreError, match="not a teacher store"):
        open_namespace(str(foreign), desc)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot be written"):
        open_namespace(str(blocker / "store"), desc)


def test_list_and_prune(tmp_path):
    store = str(tmp_path / "store")
    for teacher, runtime in [("a" * 64, "torch"), ("b" * 64, "onnx-int8")]:
        open_namespace(store, descriptor(teacher, runtime, 512, 384))
    assert sorted(n["runtime"] for n in list_store(store)) == ["onnx-int8", "torch"]
    with pytest.raises(StoreError, match="needs"):
        prune(store)
    assert [n["runtime"] for n in prune(store, runtime="onnx-int8")] == ["onnx-int8"]
    assert [n["teacher_sha256"][:1] for n in list_store(store)] == ["a"]
    assert prune(store, teacher="a", older_than_days=1) == []  # written just now


def test_the_config_refuses_a_store_inside_the_output_or_at_the_root(tmp_path):
    with pytest.raises(ConfigError, match="overlaps the output"):
        load_config("pipelines/configs/quickstart.toml",
                    [f"extraction.store='{tmp_path}/out/store'"], output=str(tmp_path / "out"),
                    check_paths=False)
    with pytest.raises(ConfigError, match=r"extraction\.store / resolves"):
        load_config("pipelines/configs/quickstart.toml", ["extraction.store='/'"],
                    output=str(tmp_path / "out"), check_paths=False)


def test_swe_store_list_and_prune_commands(tmp_path, capsys):
    from swe.cli import main

    store = str(tmp_path / "store")
    open_namespace(store, descriptor("c" * 64, "onnx", 512, 384))
    assert main(["store", "list", store]) == 0
    assert "teacher cccccccccccc  onnx" in capsys.readouterr().out
    assert main(["store", "prune", store, "--runtime", "onnx"]) == 0
    assert "removed ns-" in capsys.readouterr().out and list_store(store) == []
    assert main(["store", "list", str(tmp_path)]) == 2  # a wrong input (swe.commands)
    assert "not a teacher store" in capsys.readouterr().err
