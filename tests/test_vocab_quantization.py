"""Vocabulary quantisation (``swe quantize``) on the session's real Ray, with a real model
(GloVe 6B 50-d, its 20k most frequent words, with the MiniLM OOV rule) and real STS-B dev."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from test_bulk import small_glove

from swe import StaticModel
from swe.clustering import quantize_model
from swe.eval.data import stsb_file
from swe.eval.similarity import sts

pytestmark = pytest.mark.usefixtures("ray_session")


@pytest.fixture(scope="module")
def source(glove, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vq") / "glove-20k"
    small_glove(glove).save(path)
    return str(path)


@pytest.fixture(scope="module")
def k1024(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("vq-out") / "k1024"
    return quantize_model(source, str(out), 1024, seed=0), str(out)


def test_a_clustered_model_is_smaller_loads_and_keeps_its_quality(source, k1024):
    report, out = k1024
    original, clustered = StaticModel.load(source), StaticModel.load(out)
    assert clustered.words == original.words and clustered.dim == original.dim == 50
    assert clustered.tokenizer is not None and clustered.oov == original.oov
    tensors = load_file(f"{out}/model.safetensors")
    assert tensors["embeddings"].shape == (1024, 50) and tensors["embeddings"].dtype == np.float16
    assert tensors["clusters"].dtype == np.uint16 and tensors["norms"].shape == (20_000,)
    assert (os.path.getsize(f"{out}/model.safetensors") * 10
            < os.path.getsize(f"{source}/model.safetensors"))
    # Each row keeps its norm, and points along its centroid: the cosines are the report's.
    a, b = original.vectors, clustered.vectors
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), np.linalg.norm(a, axis=1), rtol=2e-3)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert abs(cos.mean() - report.mean_cosine) < 2e-3 and 0.5 < report.mean_cosine < 1
    assert report.iterations >= 2 and report.empty_clusters == 0
    # STS-B dev: within 3 points of the float32 model (measured: 53.73 -> 51.51).
    full, ours = sts(original, stsb_file("dev")), sts(clustered, stsb_file("dev"))
    assert ours > full - 3, (full, ours)
    prov = json.loads(Path(out, "config.json").read_text())["provenance"]["quantization"]
    assert prov["clusters"] == 1024 and prov["seed"] == 0


def test_a_seed_fixes_the_result(source, k1024, tmp_path):
    again = quantize_model(source, str(tmp_path / "again"), 1024, seed=0)
    assert again.mean_cosine == k1024[0].mean_cosine
    assert (Path(k1024[1], "model.safetensors").read_bytes()
            == (tmp_path / "again/model.safetensors").read_bytes())
    other = quantize_model(source, str(tmp_path / "other"), 1024, seed=1, iterations=1)
    assert other.iterations == 1 and other.mean_cosine < k1024[0].mean_cosine - 0.005
    assert ((tmp_path / "other/model.safetensors").read_bytes()
            != (tmp_path / "again/model.safetensors").read_bytes())


def test_exact_rows_keep_their_own_direction(source, tmp_path):
    """``exact=N``: the N first (most frequent) words are their own centroid; the rest share."""
    report = quantize_model(source, str(tmp_path / "e"), 512, exact=100, iterations=3)
    original, clustered = StaticModel.load(source), StaticModel.load(tmp_path / "e")
    np.testing.assert_allclose(clustered.vectors[:100], original.vectors[:100], rtol=2e-3,
                               atol=2e-3)
    index = load_file(f"{tmp_path}/e/model.safetensors")["clusters"]
    assert index[:100].tolist() == list(range(100)) and index[100:].min() >= 0
    assert json.loads((tmp_path / "e/config.json").read_text())["provenance"][
        "quantization"]["exact"] == 100 and report.clusters == 512


def test_int8_centroids_from_an_int8_source_export_to_model2vec(source, tmp_path):
    import model2vec

    from swe.cli import info
    from swe.export import export

    StaticModel.load(source).save(tmp_path / "int8", dtype="int8")
    report = quantize_model(str(tmp_path / "int8"), str(tmp_path / "k"), 256, dtype="int8")
    facts = info(str(tmp_path / "k"))
    assert facts["clusters"] == 256 and facts["dtype"] == "int8"
    assert facts["total_bytes"] == report.output_bytes + facts["files"]["config.json"]
    out = export(str(tmp_path / "k"), "model2vec", tmp_path / "m2v", measure=False)
    texts = ["a man is playing a guitar", "two dogs are running through a field of grass"]
    theirs = model2vec.StaticModel.from_pretrained(out).encode(texts)
    ours = StaticModel.load(tmp_path / "k").encode(texts)
    cos = (theirs * ours).sum(1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() > 0.99, cos


@pytest.mark.parametrize("args, words", [
    (["--clusters", "1"], "at least 2"),
    (["--clusters", "20001"], "exceeds the model's 20000 words"),
    (["--clusters", "8", "--iterations", "0"], "--iterations must be a positive"),
    (["--clusters", "8", "--exact", "8"], "--exact must be an integer from 0 to"),
    (["--clusters", "8", "--output", "/"], "filesystem root"),
    (["--clusters", "8", "--output", "."], "current directory"),
    (["--clusters", "8", "--output", ".."], "above the current directory"),
    (["--clusters", "8", "--output", "~"], "home directory"),
    (["--clusters", "8", "--output", "SOURCE"], "overlaps the input model"),
    (["--clusters", "8", "--output", "SOURCE/inner"], "overlaps the input model"),
    (["--clusters", "8", "--output", "FULL"], "exists and is not empty"),
    (["--clusters", "8", "--output", "CLUSTERED", "--model", "CLUSTERED"], "already clustered"),
])
def test_bad_input_is_one_line_before_any_work(source, k1024, tmp_path, monkeypatch, capsys,
                                                args, words):
    from swe.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "full").mkdir()
    (tmp_path / "full/keep.txt").write_text("mine")
    names = {"SOURCE": source, "FULL": str(tmp_path / "full"), "CLUSTERED": k1024[1],
             "~": os.path.expanduser("~")}
    args = [names.get(a.split("/")[0], a.split("/")[0]) + a[len(a.split("/")[0]):]
            if a.split("/")[0] in names else a for a in args]
    model = args.pop(args.index("--model") + 1) if "--model" in args else source
    args = [a for a in args if a != "--model"]
    if "--output" not in args:
        args += ["--output", str(tmp_path / "new")]
    assert main(["quantize", model, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and words in err[0], err
    assert (tmp_path / "full/keep.txt").read_text() == "mine"
    assert not (tmp_path / "new").exists()
