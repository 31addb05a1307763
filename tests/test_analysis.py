"""swe.eval.analysis on hand-built models whose answers are known."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest

from swe.eval.analysis import (
    frequency_ranks,
    norm_by_frequency_bins,
    norm_frequency_spearman,
    norm_frequency_table,
    quality_speed_plot,
    top_component_words,
)
from swe.model import StaticModel

WORDS = ["the", "of", "cat", "dog", "zebra", "quokka"]


def _save(tmp_path, vectors, words=WORDS, language="en", name="m"):
    path = tmp_path / name
    StaticModel.from_vectors(words, np.asarray(vectors, np.float32), language=language).save(path)
    return path


def _scaled(norms, dim=4, seed=0):
    """Rows of random direction with the given L2 norms."""
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((len(norms), dim))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return d * np.asarray(norms, float)[:, None]


def test_norm_grows_with_rank_gives_plus_one(tmp_path):
    path = _save(tmp_path, _scaled([1, 2, 3, 5, 8, 13]))
    assert norm_frequency_spearman(path) == pytest.approx(1.0)


def test_norm_shrinks_with_rank_gives_minus_one(tmp_path):
    path = _save(tmp_path, _scaled([9, 7, 5, 3, 2, 1]))
    assert norm_frequency_spearman(path) == pytest.approx(-1.0)


def test_norm_frequency_hand_computed_and_top(tmp_path):
    # norms ranked 1 3 2 4 6 5 against ranks 1..6: d² = 0+1+1+0+1+1 = 4, ρ = 1 - 6·4/(6·35)
    path = _save(tmp_path, _scaled([1, 3, 2, 4, 6, 5]))
    assert norm_frequency_spearman(path) == pytest.approx(1 - 24 / 210)
    # the three most frequent words only: norms 1 3 2 → ranks 1 3 2, ρ = 1 - 6·2/(3·8) = 0.5
    assert norm_frequency_spearman(path, top=3) == pytest.approx(0.5)
    bins = norm_by_frequency_bins(path, bins=3)
    assert [b["ranks"] for b in bins] == [[1, 2], [3, 4], [5, 6]]
    assert [b["mean_norm"] for b in bins] == pytest.approx([2.0, 3.0, 5.5])
    assert norm_frequency_table(path) == {"en": pytest.approx(1 - 24 / 210)}


def test_multilanguage_needs_a_language_and_its_frequency_list(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    # vocab.txt: en's list then de's, "die" shared; norms rise with rank within en, fall in de
    words = ["the", "of", "cat", "die", "der", "hund"]
    build = tmp_path / "build"
    path = _save(build, _scaled([1, 2, 3, 9, 8, 7]), words=words, language=["en", "de"],
                 name="step2")
    with pytest.raises(ValueError, match="pass language="):
        norm_frequency_spearman(path)
    assert norm_frequency_table(path) == {"en": None, "de": None}  # no work/vocab yet
    vocab = build / "work" / "vocab"
    vocab.mkdir(parents=True)
    pq.write_table(pa.table({"word": ["the", "of", "cat", "die"], "count": [9, 8, 7, 6]}),
                   vocab / "en.parquet")
    pq.write_table(pa.table({"word": ["die", "der", "hund", "nicht"], "count": [9, 8, 7, 6]}),
                   vocab / "de.parquet")
    model = StaticModel.load(path)
    rows, ranks = frequency_ranks(model, path, "de")
    assert rows.tolist() == [3, 4, 5] and ranks.tolist() == [1, 2, 3]  # "nicht" has no row
    assert norm_frequency_spearman(path, "en") == pytest.approx(1.0)
    assert norm_frequency_spearman(path, "de") == pytest.approx(-1.0)
    assert norm_frequency_table(path) == {"en": pytest.approx(1.0), "de": pytest.approx(-1.0)}


def test_top_component_words_on_a_known_first_component(tmp_path):
    # Axis 0 (values 10 -9 5 -5 1 -2, mean 0) dominates; axis 1 (±0.5, ∓1) comes second.
    vectors = np.array([[10, 0.5, 0], [-9, -0.5, 0], [5, -1, 0], [-5, 1, 0], [1, 0, 0.1],
                        [-2, 0, -0.1]], np.float32)
    # svd_flip: the largest |projection| ("the", +10 along axis 0) is made positive
    comps = top_component_words(_save(tmp_path, vectors), components=2, n=2)
    assert [c["component"] for c in comps] == [1, 2]
    first = comps[0]
    assert first["positive"] == ["the", "cat"]
    assert first["negative"] == ["of", "dog"]
    assert first["positive_scores"] == pytest.approx([10, 5], abs=0.05)
    assert first["negative_scores"] == pytest.approx([-9, -5], abs=0.05)
    assert first["explained_variance_ratio"] > 0.95
    assert sum(c["explained_variance_ratio"] for c in comps) <= 1.0 + 1e-9
    # the second component is ~axis 1, whose ends are "cat" (-1) and "dog" (+1)
    assert {comps[1]["positive"][0], comps[1]["negative"][0]} == {"cat", "dog"}


def test_top_component_words_is_not_the_row_order(tmp_path):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((6, 3)) * 0.01
    vectors[:, 2] += [0, 0, 0, -3, 0, 4]  # "quokka" and "dog" are the ends of the top PC
    (first,) = top_component_words(_save(tmp_path, vectors), components=1, n=1)
    assert first["positive"] == ["quokka"] and first["negative"] == ["dog"]


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    assert zlib.crc32(data[12:29]) == struct.unpack(">I", data[29:33])[0]
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def test_quality_speed_plot_writes_a_png(tmp_path):
    points = [{"name": "swe", "quality": 74.7, "sentences_per_s": 1.2e5, "size_bytes": 31e6},
              {"name": "teacher", "quality": 82.0, "sentences_per_s": 300, "size_bytes": 91e6},
              {"name": "no size", "quality": 41.7, "sentences_per_s": 9e4}]
    out = tmp_path / "sub" / "plot.png"
    quality_speed_plot(points, out, title="t")
    w, h = _png_size(out.read_bytes())
    assert w > 300 and h > 200


def test_quality_speed_plot_rejects_bad_points(tmp_path):
    with pytest.raises(ValueError, match="at least one"):
        quality_speed_plot([], tmp_path / "x.png")
    with pytest.raises(ValueError, match="sentences_per_s"):
        quality_speed_plot([{"name": "a", "quality": 1.0}], tmp_path / "x.png")
    with pytest.raises(ValueError, match="> 0"):
        quality_speed_plot([{"name": "a", "quality": 1.0, "sentences_per_s": 0}],
                           tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_analyze_cli(tmp_path, capsys):

    from swe.commands import analyze
    model = _save(tmp_path, _scaled([1, 2, 3, 5, 8, 13]))
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"results": [
        {"spec": str(model), "threads": 1, "sentences_per_s": 1e5, "size_bytes": 1000},
        {"spec": "teacher:minilm", "threads": 1, "sentences_per_s": 200, "size_bytes": 9000},
        {"spec": "teacher:minilm", "threads": 2, "sentences_per_s": 390, "size_bytes": 9000}]}))
    out = tmp_path / "a.json"
    png = tmp_path / "p.png"
    analyze.main(["--model", str(model), "--components", "1", "--words", "2", "--json", str(out),
                  "--png", str(png), "--speed", str(speed), "--quality", f"{model}=74.7",
                  "--quality", "teacher:minilm=82", "--name", "teacher:minilm=MiniLM"])
    text = capsys.readouterr().out
    assert f"| {model} | en | +1.000 |" in text
    report = json.loads(out.read_text())
    assert report["models"][str(model)]["norm_frequency_spearman"] == {"en": pytest.approx(1.0)}
    assert len(report["models"][str(model)]["top_components"]) == 1
    assert [p["sentences_per_s"] for p in report["plot"]["points"]] == [1e5, 200]
    assert report["plot"]["points"][1]["name"] == "MiniLM"
    _png_size(png.read_bytes())
