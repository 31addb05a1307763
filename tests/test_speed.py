"""swe.eval.speed: a real measurement of a tiny model in a fresh process (no timing thresholds)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from swe.eval.encoders import model_files, size_bytes
from swe.eval.speed import main, measure, ratio_to, read_texts
from swe.model import StaticModel

TEXTS = ["the cat sat", "a dog ran far", "", "cats and dogs", "the the the"] * 20


@pytest.fixture()
def tiny(tmp_path):
    words = ["the", "cat", "sat", "a", "dog", "ran", "far", "cats", "and", "dogs"]
    rng = np.random.default_rng(0)
    path = tmp_path / "tiny"
    StaticModel.from_vectors(words, rng.standard_normal((len(words), 8))).save(path)
    return path


def test_size_is_the_files_bytes(tiny):
    files = model_files(str(tiny))
    assert sorted(p.name for p in files) == ["config.json", "model.safetensors", "vocab.txt"]
    expected = sum(len(p.read_bytes()) for p in tiny.iterdir())
    assert size_bytes(str(tiny)) == expected
    assert expected > 10 * 8 * 4  # the float32 matrix alone


def test_model_files_of_a_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError):
        model_files(str(tmp_path / "nope"))


def test_measure_tiny_model(tiny):
    r = measure(str(tiny), TEXTS, threads=1, repeats=2)
    assert r["spec"] == str(tiny) and r["sentences"] == len(TEXTS)
    assert r["threads"] == 1 and r["torch_threads"] is None  # torch never imported
    assert r["dim"] == 8
    assert r["sentences_per_s"] > 0 and r["cold_sentences_per_s"] > 0
    assert len(r["seconds"]) == 2 and all(s > 0 for s in r["seconds"])
    assert r["sentences_per_s"] == pytest.approx(len(TEXTS) / float(np.median(r["seconds"])))
    assert r["best_sentences_per_s"] == pytest.approx(len(TEXTS) / min(r["seconds"]))
    assert r["load_s"] > 0
    assert 0 < r["rss_start_bytes"] <= r["rss_after_load_bytes"]
    assert r["rss_after_load_bytes"] <= r["peak_rss_bytes"]
    assert r["size_bytes"] == size_bytes(str(tiny))
    assert r["files"] == [str(p) for p in model_files(str(tiny))]


def test_peak_memory_is_the_workers_own(tiny):
    """A parent holding 1 GB must not show up in the worker's peak RSS (``ru_maxrss`` survives
    fork + exec on Linux; the measure must not)."""
    ballast = np.ones(1 << 30, np.uint8)  # touched: resident in this process
    r = measure(str(tiny), TEXTS, threads=1, repeats=1)
    assert ballast[-1] == 1
    assert r["peak_rss_bytes"] < 600 * 2**20  # a tiny model in a fresh interpreter


def test_measure_reports_library_defaults_and_failures(tiny, tmp_path):
    r = measure(str(tiny), TEXTS[:5], threads=None, repeats=1)
    assert r["threads"] == "default" and len(r["seconds"]) == 1
    with pytest.raises(ValueError, match="threads"):
        measure(str(tiny), TEXTS, threads=0)
    with pytest.raises(ValueError, match="at least one"):
        measure(str(tiny), [])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "vocab.txt").write_text("x\n")
    with pytest.raises(RuntimeError, match=r"config\.json is missing"):
        measure(str(broken), TEXTS)


def test_thread_variables_reach_the_worker(tiny, monkeypatch):
    import swe.eval.speed as speed

    real, seen = speed._set_threads, []
    monkeypatch.setattr(speed, "_set_threads", lambda env, t: seen.append(real(env, t)) or seen[-1])
    measure(str(tiny), TEXTS[:5], threads=3, repeats=1)
    assert all(seen[0][v] == "3" for v in speed.THREAD_VARS)
    env = real({"OMP_NUM_THREADS": "7", "PATH": "x"}, None)
    assert "OMP_NUM_THREADS" not in env and env["PATH"] == "x"


def test_ratio_to():
    results = [{"spec": "teacher", "threads": 1, "sentences_per_s": 100.0},
               {"spec": "swe", "threads": 1, "sentences_per_s": 50_000.0},
               {"spec": "teacher", "threads": 2, "sentences_per_s": 180.0},
               {"spec": "swe", "threads": 2, "sentences_per_s": 54_000.0}]
    assert ratio_to(results, "teacher", 1) == {"teacher": 1.0, "swe": 500.0}
    assert ratio_to(results, "teacher", 2) == {"teacher": 1.0, "swe": 300.0}
    assert ratio_to(results[:2], "teacher") == {"teacher": 1.0, "swe": 500.0}
    with pytest.raises(ValueError, match="pass threads"):
        ratio_to(results, "teacher")
    with pytest.raises(ValueError, match="no result"):
        ratio_to(results, "glove")


def test_read_texts(tmp_path):
    sts = tmp_path / "s.tsv"
    sts.write_text("sentence1\tsentence2\tscore\na b\tc d\t1\ne f\tg h\t2\n")
    assert read_texts(sts) == ["a b", "e f", "c d", "g h"]
    assert read_texts(sts, 3) == ["a b", "e f", "c d"]
    import lzma

    xz = tmp_path / "t.txt.xz"
    with lzma.open(xz, "wt", encoding="utf-8") as f:
        f.write("one\ntwo\nthree\n")
    assert read_texts(xz, 2) == ["one", "two"]


def test_cli(tiny, tmp_path, capsys):
    texts = tmp_path / "t.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "speed.json"
    main(["--spec", str(tiny), "--texts", str(texts), "--sentences", "40", "--limit",
          f"{tiny}=10", "--threads", "1", "--threads", "2", "--repeats", "1", "--reference",
          str(tiny), "--json", str(out)])
    report = json.loads(out.read_text())
    assert [(r["threads"], r["sentences"]) for r in report["results"]] == [(1, 10), (2, 10)]
    assert report["ratios"] == {"1": {str(tiny): 1.0}, "2": {str(tiny): 1.0}}
    assert f"| {tiny} | 1 | 10 |" in capsys.readouterr().out
