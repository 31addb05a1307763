"""Smaller model files: float16 and int8 (per-row or global scales) saves of a real model
(GloVe 6B 50-d, 400k words) — sizes, error bounds, sentence-embedding agreement and STS-B quality
on real STS-B sentences, checksums, unknown schemes, older readers, export and S3."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from safetensors.numpy import load_file
from safetensors.numpy import save as st_save

from swe.eval.data import stsb_file
from swe.eval.similarity import read_sts, sts
from swe.export import export, export_arrays
from swe.model import StaticModel, dequantize_int8, quantize_int8
from swe.modelfiles import ModelFileError, ModelFolder, sealed
from swe.text import is_punctuation

pytestmark = pytest.mark.slow

SCHEMES = [("float32", "row"), ("float16", "row"), ("int8", "row"), ("int8", "global")]
# Bytes per matrix entry, and the bytes of the scales per row (row) or in all (global).
ENTRY = {"float32": 4, "float16": 2, "int8": 1}
# int8 error bound: half a step, plus float32 rounding of x / s and q * s (|x| <= 127 s, so
# 2 |x| 2^-24 <= s * 1.6e-5, well under the 1e-4 / 2 allowed here).
HALF_STEP = 1 + 1e-4


def _id(scheme: tuple[str, str]) -> str:
    return scheme[0] if scheme[0] != "int8" else f"int8-{scheme[1]}"


@pytest.fixture(scope="module")
def saved(glove, tmp_path_factory):
    """The GloVe model saved once per scheme: ``{scheme: folder}``."""
    root = tmp_path_factory.mktemp("quantized")
    out = {}
    for dtype, scale in SCHEMES:
        out[dtype, scale] = root / _id((dtype, scale))
        glove.save(out[dtype, scale], dtype=dtype, scale=scale)
    return out


@pytest.fixture(scope="module")
def dev_sentences():
    a, b, _ = read_sts(stsb_file("dev"))
    return a + b


def _bound(glove, dtype: str, scale: str, folder) -> np.ndarray:
    """The largest error each entry may have: half a float16 ulp, or half an int8 step."""
    x = glove.vectors.astype(np.float64)
    if dtype == "float32":
        return np.zeros_like(x)
    if dtype == "float16":
        return np.abs(x) * 2.0**-11 + 2.0**-25  # half an ulp; 2^-25: half the subnormal step
    scales = load_file(folder / "model.safetensors")["scales"].astype(np.float64)
    amax = np.abs(x).max(axis=1) if scale == "row" else np.abs(x).max(keepdims=True)[0]
    expect = amax / 127
    np.testing.assert_allclose(scales, expect, rtol=1e-6)
    return np.broadcast_to(scales.reshape(-1, 1) / 2 * HALF_STEP, x.shape)


@pytest.mark.parametrize("scheme", SCHEMES, ids=_id)
def test_each_scheme_round_trips_within_its_error_bound(glove, saved, scheme):
    dtype, scale = scheme
    folder = saved[scheme]
    loaded = StaticModel.load(folder)
    assert loaded.vectors.dtype == np.float32 and loaded.words == glove.words
    err = np.abs(loaded.vectors.astype(np.float64) - glove.vectors)
    assert (err <= _bound(glove, dtype, scale, folder)).all(), float(err.max())
    config = json.loads((folder / "config.json").read_text())
    assert config["dtype"] == dtype and config.get("scale") == (scale if dtype == "int8" else None)
    assert config["format_version"] == (3 if dtype == "int8" else 2)
    tensors = load_file(folder / "model.safetensors")
    assert tensors["embeddings"].dtype == np.dtype(dtype)


@pytest.mark.parametrize("scheme", SCHEMES, ids=_id)
def test_files_shrink_with_the_dtype(glove, saved, scheme):
    dtype, scale = scheme
    size = (saved[scheme] / "model.safetensors").stat().st_size
    v, d = glove.vectors.shape
    payload = v * d * ENTRY[dtype] + (4 * (v if scale == "row" else 1) if dtype == "int8" else 0)
    assert payload <= size <= payload + 512  # plus the safetensors header only
    full = (saved["float32", "row"] / "model.safetensors").stat().st_size
    assert size / full <= {"float32": 1, "float16": 0.51, "int8": 0.31}[dtype]


@pytest.mark.parametrize("scheme,least,mean", [
    (("float16", "row"), 0.9999, 0.99999),
    (("int8", "row"), 0.999, 0.9999),
    (("int8", "global"), 0.99, 0.999),
], ids=["float16", "int8-row", "int8-global"])
def test_sentence_embeddings_match_float32_on_stsb_dev(glove, saved, dev_sentences, scheme,
                                                       least, mean):
    ref = glove.encode(dev_sentences)
    got = StaticModel.load(saved[scheme]).encode(dev_sentences)
    zero = np.linalg.norm(ref, axis=1) == 0
    assert (np.linalg.norm(got, axis=1)[zero] == 0).all()
    cos = (ref * got).sum(1)[~zero]
    assert cos.min() > least and cos.mean() > mean, (cos.min(), cos.mean())


@pytest.mark.parametrize("scheme,points", [(("float16", "row"), 0.05), (("int8", "row"), 0.3),
                                           (("int8", "global"), 0.6)],
                         ids=["float16", "int8-row", "int8-global"])
def test_stsb_dev_spearman_barely_moves(glove, saved, scheme, points):
    ref = sts(glove, stsb_file("dev"))
    assert abs(sts(StaticModel.load(saved[scheme]), stsb_file("dev")) - ref) < points


@pytest.mark.parametrize("scale", ["row", "global"])
def test_dim_truncation_of_an_int8_model_keeps_the_first_columns(saved, scale):
    full = StaticModel.load(saved["int8", scale])
    cut = StaticModel.load(saved["int8", scale], dim=16)
    np.testing.assert_array_equal(cut.vectors, full.vectors[:, :16])
    with pytest.raises(ValueError, match="dim=51 exceeds the 50 dimensions"):
        StaticModel.load(saved["int8", scale], dim=51)


@pytest.fixture()
def small(glove, tmp_path):
    """20,000 real GloVe words saved as int8 with per-row scales."""
    model = StaticModel.from_vectors(glove.words[:20000], glove.vectors[:20000],
                                     tokenizer=glove.tokenizer)
    model.save(tmp_path / "m", dtype="int8")
    return model, tmp_path / "m"


def test_a_changed_int8_file_is_refused(small):
    _, folder = small
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 1  # the last per-row scale
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="does not match the size and checksum") as e:
        StaticModel.load(folder)
    assert "model.safetensors" in str(e.value) and "\n" not in str(e.value)


def _rewrite(folder, tensors: dict | None = None, **config) -> None:
    """Replace the matrix file and config keys, re-recording the checksums (a consistent
    folder from some other writer)."""
    conf = json.loads((folder / "config.json").read_text())
    if tensors is not None:
        data = st_save(tensors)
        (folder / "model.safetensors").write_bytes(data)
        conf["files"]["model.safetensors"] = {"bytes": len(data),
                                              "sha256": hashlib.sha256(data).hexdigest()}
    conf.update(config)
    (folder / "config.json").write_text(json.dumps(sealed(conf)))


@pytest.mark.parametrize("config,needle", [
    ({"dtype": "int4"}, "dtype = 'int4' is not one this swe reads .* upgrade swe"),
    ({"dtype": "bfloat16"}, "dtype = 'bfloat16' is not one this swe reads"),
    ({"scale": "block"}, "scale = 'block' is not one this swe reads .* upgrade swe"),
    ({"scale": 3}, "scale = 3 has the wrong type"),
    ({"dtype": "float32"}, "the matrix is int8 but config.json records dtype 'float32'"),
])
def test_an_unknown_or_wrong_scheme_is_one_line_naming_the_file(small, config, needle):
    _, folder = small
    _rewrite(folder, **config)
    with pytest.raises(ModelFileError, match=needle) as e:
        StaticModel.load(folder)
    assert str(folder) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("scales,found", [
    (None, "found none"), (np.ones(3, dtype=np.float32), r"found float32 \[3\]"),
    ("float64", r"found float64 \[20000\]"), ("negative", "negative or non-finite"),
    ("nan", "negative or non-finite"),
])
def test_bad_scales_are_refused_naming_the_file(small, scales, found):
    _, folder = small
    tensors = load_file(folder / "model.safetensors")
    if scales is None:
        del tensors["scales"]
    elif isinstance(scales, str):
        s = tensors["scales"].copy()
        if scales == "float64":
            s = s.astype(np.float64)
        else:
            s[7] = -1.0 if scales == "negative" else np.nan
        tensors["scales"] = s
    else:
        tensors["scales"] = scales
    _rewrite(folder, tensors)
    with pytest.raises(ModelFileError, match=found) as e:
        StaticModel.load(folder)
    assert f"{folder}/model.safetensors" in str(e.value) and "\n" not in str(e.value)


def test_a_swe_that_reads_version_2_refuses_int8_but_reads_float16(glove, saved):
    """int8 folders are written as format version 3, float ones as 2: an older swe says
    "upgrade swe" for int8 instead of misreading the codes."""
    with pytest.raises(ModelFileError, match="format version 3; this swe reads <= 2: upgrade"):
        ModelFolder(str(saved["int8", "row"]), version=2)
    assert ModelFolder(str(saved["float16", "row"]), version=2).config["dtype"] == "float16"


def test_float16_overflow_and_bad_arguments_are_refused(tmp_path):
    model = StaticModel.from_vectors(["big", "small"], np.array([[1e5, 0.0], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="does not fit float16"):
        model.save(tmp_path / "a", dtype="float16")
    with pytest.raises(ValueError, match="dtype must be one of float32, float16, int8"):
        model.save(tmp_path / "b", dtype="int4")
    with pytest.raises(ValueError, match="scale must be one of row, global"):
        model.save(tmp_path / "c", dtype="int8", scale="column")
    model.save(tmp_path / "d", dtype="int8")  # int8 holds any finite range
    np.testing.assert_allclose(StaticModel.load(tmp_path / "d").vectors, model.vectors,
                               atol=1e5 / 254 * 1.0001)
    assert not (tmp_path / "a").exists()  # refused before anything was written


def test_an_int8_model_exports_its_dequantised_rows(small, tmp_path):
    import model2vec

    _, folder = small
    loaded = StaticModel.load(folder)
    out = export(folder, "model2vec", tmp_path / "m2v")
    rows = load_file(f"{out}/model.safetensors")["embeddings"]
    assert rows.dtype == np.float32  # dequantised; punctuation rows zeroed as for any export
    np.testing.assert_array_equal(rows, export_arrays(loaded)[1])
    words = [not is_punctuation(w) for w in loaded.words]
    np.testing.assert_array_equal(rows[1:1 + len(loaded)][words], loaded.vectors[words])
    texts = ["a man is playing a guitar", "two dogs are running through a field of grass"]
    theirs = model2vec.StaticModel.from_pretrained(out).encode(texts)
    ours = loaded.encode(texts)
    cos = (theirs * ours).sum(1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() > 0.99, cos


def test_swe_info_reports_the_dtype_and_the_smaller_file(saved):
    from swe.cli import info

    facts = {s: info(str(saved[s])) for s in SCHEMES}
    assert [facts[s]["dtype"] for s in SCHEMES] == ["float32", "float16", "int8", "int8"]
    sizes = [facts[s]["files"]["model.safetensors"] for s in SCHEMES]
    assert sizes[0] > sizes[1] > sizes[2] > sizes[3]


def test_int8_on_s3(small, s3):
    model, _ = small
    url = f"{s3}/models/int8-global"
    model.save(url, dtype="int8", scale="global")
    loaded = StaticModel.load(url, dim=32)
    scale = np.abs(model.vectors).max() / 127
    assert np.abs(loaded.vectors - model.vectors[:, :32]).max() <= scale / 2 * HALF_STEP


FINITE = st.floats(-1e4, 1e4, width=32, allow_subnormal=False)


@settings(max_examples=60, deadline=None)
@given(x=arrays(np.float32, st.tuples(st.integers(1, 12), st.integers(1, 9)), elements=FINITE),
       scale=st.sampled_from(["row", "global"]))
def test_int8_error_is_at_most_half_a_step(x, scale):
    q, s = quantize_int8(x, scale)
    assert q.dtype == np.int8 and s.dtype == np.float32 and np.abs(q.astype(int)).max() <= 127
    assert s.shape == ((x.shape[0],) if scale == "row" else (1,))
    back = dequantize_int8(q, s)
    step = np.broadcast_to(s.reshape(-1, 1).astype(np.float64), x.shape)
    assert (np.abs(back.astype(np.float64) - x) <= step / 2 * HALF_STEP).all()
    amax = np.abs(x).max(axis=1) if scale == "row" else np.abs(x).max(keepdims=True)[0]
    assert ((np.abs(q.astype(int)).max(axis=1 if scale == "row" else None) == 127) | (amax == 0)
            ).all()
