"""Teacher runtimes (``extraction.runtime``) with the real MiniLM teacher: the ONNX forms are
made once into a cache keyed by the teacher's checksum, checked by sha256, give the torch
outputs (fp32) or close to them (int8), and int8 outputs never depend on a sentence's batch."""

import json
import lzma
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from swe import StaticModel
from swe.build import build, load_config
from swe.build.config import ConfigError
from swe.build.teacher import Teacher
from swe.build.teacher.runtime import TeacherRuntimeError, load_model_bytes, prepare

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def cache(minilm):
    """The teacher cache the builds use (``$SWE_CACHE``, default ~/.cache/swe), holding
    MiniLM's onnx and onnx-int8 forms: the quickstart config's int8 teacher made once."""
    from swe.build.teacher.runtime import cache_root

    for runtime in ("onnx", "onnx-int8"):
        prepare(str(minilm), runtime)
    return Path(cache_root())


@pytest.fixture(scope="module")
def sentences(data_dir):
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.02.txt.xz", "rt") as f:
        return [next(f).strip() for _ in range(300)]


def _states(teacher, texts):
    """Each text's token states, computed in the teacher's own length batches."""
    out = [None] * len(texts)
    for idx in teacher.batches(texts, 4096):
        hidden, _, mask = teacher.hidden_states([texts[i] for i in idx])
        for j, i in enumerate(idx):
            out[i] = hidden[j, mask[j] > 0]
    return out


def _token_cosine(a, b):
    cos = [np.mean((x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1))
           for x, y in zip(a, b, strict=True)]
    return float(np.mean(cos))


def test_onnx_forms_match_torch(cache, minilm, sentences):
    info = {rt: prepare(str(minilm), rt, str(cache)) for rt in ("onnx", "onnx-int8")}
    torch_ = _states(Teacher(str(minilm), threads=2), sentences)
    fp32 = _states(Teacher(str(minilm), threads=2, onnx=load_model_bytes(info["onnx"])),
                   sentences)
    int8 = _states(Teacher(str(minilm), threads=2, onnx=load_model_bytes(info["onnx-int8"])),
                   sentences)
    assert _token_cosine(torch_, fp32) > 0.99999
    assert 0.98 < _token_cosine(torch_, int8) < 0.99999  # quantised, and close
    assert info["onnx-int8"]["quantized"] == 30 and len(info["onnx-int8"]["kept_fp32"]) == 6


def test_int8_output_does_not_depend_on_the_batch(cache, minilm, sentences):
    """The same sentence in two different batches gives identical bytes (fixed scales; dynamic
    quantisation fails this: it scales each batch by its own range)."""
    teacher = Teacher(str(minilm), threads=2,
                      onnx=load_model_bytes(prepare(str(minilm), "onnx-int8", str(cache))))
    groups = [g for g in teacher.batches(sentences, 1 << 20) if len(g) >= 3]
    assert groups, "no three sentences of one token length"
    checked = 0
    for g in groups[:5]:
        texts = [sentences[i] for i in g]
        together = teacher.hidden_states(texts)[0]
        for k, text in enumerate(texts[:2]):
            alone = teacher.hidden_states([text])[0]
            others = teacher.hidden_states([text, *texts[k + 1:k + 2][::-1], texts[-1]])[0]
            assert together[k].tobytes() == alone[0].tobytes() == others[0].tobytes()
            checked += 1
    assert checked >= 2


def test_the_cache_is_reused_and_a_corrupt_entry_is_made_again(cache, minilm, tmp_path):
    info = prepare(str(minilm), "onnx", str(cache))
    stamp = os.stat(info["path"]).st_mtime_ns
    assert prepare(str(minilm), "onnx", str(cache))["path"] == info["path"]
    assert os.stat(info["path"]).st_mtime_ns == stamp  # not made again
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    moved = Path(info["path"].replace(str(cache), str(copy)))
    data = bytearray(moved.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    moved.write_bytes(bytes(data))
    with pytest.raises(TeacherRuntimeError, match="does not match its checksum"):
        load_model_bytes({**info, "path": str(moved)})
    again = prepare(str(minilm), "onnx", str(copy))  # detected and made again
    assert again["sha256"] == info["sha256"] and load_model_bytes(again)


def test_a_teacher_that_will_not_export_is_a_clear_error(tmp_path):
    bad = tmp_path / "teacher"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(TeacherRuntimeError, match=r"could not be turned into the onnx runtime"):
        prepare(str(bad), "onnx", str(tmp_path / "cache"))
    assert not (tmp_path / "cache" / "teachers").exists() or not any(
        p.name.endswith("-v1") for p in (tmp_path / "cache" / "teachers").rglob("*"))


def test_a_second_process_waits_for_the_first_maker_and_reuses_its_entry(cache, minilm, tmp_path,
                                                                        monkeypatch, caplog):
    """Two builds (or two test workers) on a machine without the entry: the second waits on
    ``<entry>.lock`` for the first and takes its entry, instead of exporting the same teacher
    beside it (a minute of CPU on this box, for int8)."""
    import fcntl
    import logging
    import threading

    from swe.build.teacher import runtime

    made = prepare(str(minilm), "onnx", str(cache))
    folder = Path(made["path"].replace(str(cache), str(tmp_path))).parent
    folder.parent.mkdir(parents=True)
    calls = []
    monkeypatch.setattr(runtime, "_make", lambda *a: calls.append(a))
    with open(f"{folder}.lock", "w") as held:  # the first maker, still at work
        fcntl.flock(held, fcntl.LOCK_EX)
        got = {}
        waiter = threading.Thread(target=lambda: got.update(prepare(str(minilm), "onnx",
                                                                    str(tmp_path))))
        with caplog.at_level(logging.INFO, logger="swe.build"):
            waiter.start()
            deadline = time.time() + 60
            while "waiting for another process" not in caplog.text:
                assert waiter.is_alive() and time.time() < deadline, caplog.text
                time.sleep(0.05)
            shutil.copytree(Path(made["path"]).parent, folder)  # the first maker's rename
    waiter.join(timeout=60)
    assert got["path"] == str(folder / "model.onnx") and got["sha256"] == made["sha256"]
    assert calls == []  # not made a second time


def test_an_unwritable_cache_is_a_clear_error(minilm, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(TeacherRuntimeError, match="SWE_CACHE"):
        prepare(str(minilm), "onnx", str(blocker / "cache"))
    # a folder where the entry's lock file goes: named, with what to remove
    from swe.build.teacher.runtime import FORMAT, teacher_checksum

    lock = tmp_path / "c/teachers" / teacher_checksum(str(minilm))[:16] / f"onnx-v{FORMAT}.lock"
    lock.mkdir(parents=True)
    with pytest.raises(TeacherRuntimeError, match=rf"or remove {lock}$"):
        prepare(str(minilm), "onnx", str(tmp_path / "c"))


def test_unknown_runtime_is_refused_by_the_config():
    with pytest.raises(ConfigError, match=r"extraction\.runtime"):
        load_config("pipelines/configs/quickstart.toml", ["extraction.runtime='tensorrt'"],
                    output="out/x", check_paths=False)


def test_the_build_cli_names_a_teacher_that_will_not_export(tmp_path):
    bad = tmp_path / "teacher"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    env = {**os.environ, "SWE_CACHE": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, str(ROOT / "pipelines/build.py"), "--config",
                        str(ROOT / "pipelines/configs/quickstart.toml"), "--output",
                        str(tmp_path / "out"), "--set", f"teacher='{bad}'",
                        "--set", "extraction.runtime='onnx'", "--set",
                        f"corpus.en.paths=['{ROOT.parent}/shared/data/corpora/en_wikipedia/"
                        "enwiki_sents.00.txt.xz']"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 2, p.stderr  # a teacher that is wrong (swe.commands)
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: teacher ") and "extraction.runtime" in last, p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "out" / "work" / "corpus").exists()  # no work was started


@pytest.mark.usefixtures("ray_session")
def test_an_int8_build_extracts_through_the_object_store(cache, tmp_path, data_dir,
                                                         monkeypatch):
    """A small build with the int8 teacher: actors load the model from Ray's object store,
    step 1 lands, and the stage hash differs from torch's (runtime enters it)."""
    monkeypatch.setenv("SWE_CACHE", str(cache))
    corpus = data_dir / "corpora/en_wikipedia/enwiki_sents.03.txt.xz"
    small = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=2", "selection.n=4",
             "selection.candidates=40", "corpus.en.max_lines=2400", "corpus.en.shard_lines=1200",
             "extraction.batch_size=128", f"corpus.en.paths=['{corpus}']"]
    outs = {}
    for runtime in ("torch", "onnx-int8"):
        cfg = load_config("pipelines/configs/quickstart.toml",
                          [*small, f"extraction.runtime='{runtime}'"],
                          output=str(tmp_path / runtime))
        outs[runtime] = build(cfg, until="extraction")["extraction"]
    assert outs["onnx-int8"].sentences == outs["torch"].sentences > 0
    a = StaticModel.load(tmp_path / "torch" / "step1")
    b = StaticModel.load(tmp_path / "onnx-int8" / "step1")
    assert a.words == b.words
    va, vb = a.encode(a.words), b.encode(b.words)
    cos = (va * vb).sum(1)
    assert 0.97 < float(cos.mean()) < 0.99999, cos.mean()
    hashes = {rt: json.loads((tmp_path / rt / "work/extraction/_DONE.json").read_text())
              for rt in outs}
    assert hashes["torch"]["config_hash"] != hashes["onnx-int8"]["config_hash"]


def test_the_onnx_teacher_tokenises_as_transformers_without_importing_torch(cache, minilm,
                                                                           sentences):
    """The ONNX teacher reads tokenizer.json through ``tokenizers`` alone: the same ids, masks,
    types and offsets as the Hugging Face fast tokenizer (truncation at the model's maximum
    included), and a process that runs it never imports torch (an actor starts in ~1 s)."""
    from transformers import AutoTokenizer

    from swe.build.teacher import FastTokenizer

    texts = [*sentences, "", " ", "word " * 700, "Ünïcödé ñ 中文 日本語 🎉", "a\u200bb\tc"]
    want = AutoTokenizer.from_pretrained(str(minilm), use_fast=True)(
        texts, truncation=True, max_length=512, return_offsets_mapping=True).data
    got = FastTokenizer(str(minilm)).encode(texts, 512, list(want))
    assert set(got) == set(want)
    offsets = "offset_mapping"
    assert [list(map(tuple, r)) for r in got[offsets]] == [list(map(tuple, r))
                                                           for r in want[offsets]]
    assert all(got[key] == want[key] for key in want if key != offsets)
    code = ("import sys; from swe.build.teacher.runtime import prepare, load_model_bytes; "
            "from swe.build.teacher import Teacher, minilm_dir; p = str(minilm_dir()); "
            "t = Teacher(p, threads=1, onnx=load_model_bytes(prepare(p, 'onnx-int8'))); "
            "assert t.embed(['a test']).shape == (1, 384); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ)
