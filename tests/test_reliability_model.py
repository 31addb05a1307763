"""Hostile model folders and encode inputs: interrupted and mixed saves, files named outside the
folder, damaged files, and any text at all. Each case fails with one error naming the file, or
works; never a silently wrong model. Property-based where the inputs are open-ended."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

import swe.model
import swe.model_io
from swe import StaticModel, storage
from swe.ensemble import EnsembleModel
from swe.modelfiles import FORMAT_VERSION, ModelFileError, reseal, sealed

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far"]
HYPO = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _model(seed=0, words=WORDS, **kw):
    rng = np.random.default_rng(seed)
    return StaticModel.from_vectors(words, rng.standard_normal((len(words), 8)), **kw)


def _v1_folder(path, model, tokenizer_name=None, config=None):
    """A folder exactly as swe wrote it before checksums (format_version 1)."""
    os.makedirs(path, exist_ok=True)
    (path / "model.safetensors").write_bytes(st_save({"embeddings": model.vectors}))
    (path / "vocab.txt").write_text("\n".join(model.words) + "\n", encoding="utf-8")
    conf = {"format": "swe-static", "format_version": 1, "dim": model.dim,
            "vocab_size": len(model), "dtype": "float32", "pooling": "mean", "normalize": True,
            "lowercase": True, "languages": ["en"], "tokenizer": tokenizer_name,
            "provenance": {}, "swe_version": "0.1.0", **(config or {})}
    (path / "config.json").write_text(json.dumps(conf))
    return path


def _load_resealed(folder):
    """What a format-1 folder gives once its owner trusts it (``swe reseal``) and loads it."""
    reseal(str(folder))
    return StaticModel.load(folder)


# -- saves: complete or refused ----------------------------------------------------------------


def test_a_model_saved_by_the_first_format_loads_once_resealed(tmp_path, minilm):
    m = _model(tokenizer=minilm)
    folder = _v1_folder(tmp_path / "old", m, "tokenizer.json")
    (folder / "tokenizer.json").write_text(m.tokenizer.to_str())
    with pytest.raises(ModelFileError, match=r"carries no checksum of itself .*: swe reseal"):
        StaticModel.load(folder)
    loaded = _load_resealed(folder)
    np.testing.assert_array_equal(loaded.vectors, m.vectors)
    assert loaded.words == m.words and loaded.tokenizer is not None


def test_interrupted_overwrite_refuses_to_load(tmp_path, monkeypatch):
    """The issue's case: saving B over A, killed after model.safetensors, must not load as A's
    words paired with B's vectors."""
    _model(0).save(tmp_path / "m")
    real = storage.write_bytes

    def dies_after_the_tensors(url, data):  # written to a temporary name, then renamed
        real(url, data)
        if "model.safetensors" in url.rsplit("/", 1)[-1]:
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(storage, "write_bytes", dies_after_the_tensors)
    with pytest.raises(KeyboardInterrupt):
        _model(1, words=WORDS[::-1]).save(tmp_path / "m")
    monkeypatch.undo()
    with pytest.raises(FileNotFoundError, match=r"config\.json is missing \(was the save "
                                                r"interrupted"):
        StaticModel.load(tmp_path / "m")


@settings(HYPO, max_examples=10)
@given(swapped=st.sets(st.sampled_from(["model.safetensors", "vocab.txt", "tokenizer.json"]),
                       min_size=1))
def test_any_mix_of_two_saves_refuses_to_load_naming_a_file(tmp_path_factory, minilm, swapped):
    root = tmp_path_factory.mktemp("mix")
    a, b = _model(0, tokenizer=minilm), _model(1, words=WORDS[::-1], tokenizer=minilm)
    b.tokenizer.add_tokens(["zzz"])  # make B's tokenizer.json differ too
    a.save(root / "a")
    b.save(root / "b")
    for name in swapped:
        shutil.copy(root / "b" / name, root / "a" / name)
    with pytest.raises(ModelFileError, match="does not match the size and checksum") as e:
        StaticModel.load(root / "a")
    assert any(str(root / "a" / n) in str(e.value) for n in swapped)


def test_interrupted_ensemble_overwrite_refuses_to_load(tmp_path, monkeypatch):
    EnsembleModel([_model(0), _model(1)]).save(tmp_path / "e")
    real = StaticModel.save

    def dies_after_first(self, path, *a):
        real(self, path, *a)
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(StaticModel, "save", dies_after_first)
    with pytest.raises(KeyboardInterrupt):
        EnsembleModel([_model(2), _model(3)]).save(tmp_path / "e")
    monkeypatch.undo()
    with pytest.raises(FileNotFoundError, match=r"ensemble\.json is missing"):
        EnsembleModel.load(tmp_path / "e")


@pytest.mark.parametrize(("meta", "needle"), [
    ({"members": "two", "weights": [1]}, "members = 'two' has the wrong type"),
    ({"members": 10**9, "weights": [1]}, "members = 1000000000 should be 1 to 64"),
    ({"members": 1, "weights": ["x"]}, r"weights must be positive and finite numbers, got \['x'\]"),
    ({"weights": [1]}, "lacks the key 'members'"),
])
def test_bad_ensemble_json_names_the_file(tmp_path, meta, needle):
    EnsembleModel([_model(0)]).save(tmp_path / "e")
    (tmp_path / "e" / "ensemble.json").write_text(json.dumps(sealed(
        {"format": "swe-ensemble", "files": {}, **meta})))
    with pytest.raises(ModelFileError, match=needle) as e:
        EnsembleModel.load(tmp_path / "e")
    assert str(tmp_path / "e" / "ensemble.json") in str(e.value)


# -- confinement: files named by config.json stay inside the folder --------------------------


@pytest.mark.parametrize("name", ["../../x", "/etc/passwd", "/dev/zero", "sub/../../x",
                                  "s3://bucket/tok.json", "a\\..\\..\\b"])
@pytest.mark.parametrize("version", [1, 2])
def test_tokenizer_outside_the_folder_is_refused(tmp_path, name, version):
    m = _model()
    if version == 1:
        folder = _v1_folder(tmp_path / "m", m, name)
    else:
        m.save(tmp_path / "m")
        folder = tmp_path / "m"
        conf = json.loads((folder / "config.json").read_text())
        conf["tokenizer"] = name
        conf["files"][name] = {"bytes": 1, "sha256": "0"}
        (folder / "config.json").write_text(json.dumps(sealed(conf)))
    with pytest.raises(ModelFileError, match="must name a file inside the model folder"):
        _load_resealed(folder) if version == 1 else StaticModel.load(folder)


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/hostname", "outside"])
def test_a_symlink_out_of_the_folder_is_refused(tmp_path, target):
    outside = tmp_path / "outside"
    outside.write_text("{}")
    folder = _v1_folder(tmp_path / "m", _model(), "tokenizer.json")
    os.symlink(outside if target == "outside" else target, folder / "tokenizer.json")
    with pytest.raises(ModelFileError, match="link that leads outside the model folder"):
        _load_resealed(folder)


def test_special_and_oversized_files_are_refused(tmp_path, monkeypatch, minilm):
    folder = _v1_folder(tmp_path / "m", _model(), ".")
    with pytest.raises(ModelFileError, match=r"m/\. is not a regular file"):
        _load_resealed(folder)  # the folder itself
    folder = _v1_folder(tmp_path / "m", _model(), "tokenizer.json")
    os.mkfifo(folder / "tokenizer.json")  # would block a reader forever
    with pytest.raises(ModelFileError, match="is not a regular file"):
        _load_resealed(folder)
    os.remove(folder / "tokenizer.json")
    shutil.copy(minilm / "tokenizer.json", folder / "tokenizer.json")
    monkeypatch.setattr(swe.model_io, "MAX_TOKENIZER_BYTES", 1000)
    with pytest.raises(ModelFileError, match=r"tokenizer\.json is [\d,]+ bytes, over the "
                                             r"1,000-byte limit"):
        _load_resealed(folder)


# -- damaged files: one line naming the file ---------------------------------------------------


@pytest.mark.parametrize(("damage", "needle"), [
    (lambda f: (f / "vocab.txt").write_bytes(b"the\ncat\xff\n" + b"x\n" * 6),
     r"vocab\.txt is not UTF-8 \(bad byte at offset 7\)"),
    (lambda f: (f / "config.json").write_text('{"format": "swe-static"'), "not valid UTF-8 JSON"),
    (lambda f: (f / "config.json").write_text("[1, 2]"), "is not a swe StaticModel"),
    (lambda f: (f / "config.json").write_text('{"format": "swe-static", "format_version": 99}'),
     f"has format version 99; this swe reads <= {FORMAT_VERSION}: upgrade swe"),
    (lambda f: (f / "config.json").write_text('{"format": "swe-static", "format_version": "2"}'),
     "format_version = '2' is not a positive integer"),
    (lambda f: (f / "config.json").write_text('{"format": "swe-static", "format_version": 1}'),
     "lacks the key 'lowercase'"),
    (lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 40), "is not a safetensors file"),
    (lambda f: (f / "model.safetensors").write_bytes(st_save({"other": np.ones((8, 8))})),
     "has no 'embeddings' tensor"),
    (lambda f: (f / "vocab.txt").write_text("the\ncat\n"), r"vectors must be a \[len\(words\)"),
    (lambda f: (f / "vocab.txt").write_text("\n".join(["the"] * 8) + "\n"), "duplicate word"),
    (lambda f: (f / "config.json").unlink() or (f / "config.json").mkdir(),
     "is not a regular file"),
])
def test_damaged_v1_files_fail_in_one_line_naming_the_file(tmp_path, damage, needle):
    folder = _v1_folder(tmp_path / "m", _model())
    damage(folder)
    with pytest.raises(ValueError, match=needle) as e:
        _load_resealed(folder)
    assert str(folder) in str(e.value) and "\n" not in str(e.value)


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
JSONISH = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=6)
KEYS = ["format", "format_version", "lowercase", "languages", "tokenizer", "provenance", "files",
        "dtype", "scale", "oov"]


@HYPO
@given(overrides=st.dictionaries(st.sampled_from(KEYS), JSONISH, max_size=4))
def test_any_config_json_loads_or_fails_with_a_model_error(tmp_path_factory, overrides):
    folder = tmp_path_factory.mktemp("cfg")
    _model().save(folder)
    conf = json.loads((folder / "config.json").read_text())
    conf.update(overrides)
    (folder / "config.json").write_text(json.dumps(sealed(conf)))
    try:
        StaticModel.load(folder)
    except (ModelFileError, FileNotFoundError) as e:
        assert "\n" not in str(e)


@HYPO
@given(dtype=st.sampled_from(["int8", "float16", "float32"]),
       scale=st.sampled_from(["row", "global"]),
       overrides=st.dictionaries(st.sampled_from(["dtype", "scale", "format_version"]), JSONISH,
                                 max_size=2))
def test_any_dtype_and_scale_in_config_loads_or_fails_in_one_line(tmp_path_factory, dtype, scale,
                                                                   overrides):
    folder = tmp_path_factory.mktemp("dtype")
    _model().save(folder, dtype=dtype, scale=scale)
    conf = json.loads((folder / "config.json").read_text())
    conf.update(overrides)
    (folder / "config.json").write_text(json.dumps(sealed(conf)))
    loaded = _load_or_one_line_error(folder)
    if loaded is not None:
        assert loaded.vectors.dtype == np.float32 and np.isfinite(loaded.vectors).all()


@HYPO
@given(scales=st.lists(st.floats(width=32), max_size=10), scale=st.sampled_from(["row", "global"]))
def test_any_scales_tensor_loads_or_fails_in_one_line(tmp_path_factory, scales, scale):
    """An int8 folder whose scales were replaced (checksums re-recorded, as another writer
    would): a finite model or one error naming the file."""
    folder = tmp_path_factory.mktemp("scales")
    _model().save(folder, dtype="int8", scale=scale)
    tensors = st_load((folder / "model.safetensors").read_bytes())
    tensors["scales"] = np.asarray(scales, dtype=np.float32)
    data = st_save(tensors)
    (folder / "model.safetensors").write_bytes(data)
    conf = json.loads((folder / "config.json").read_text())
    conf["files"]["model.safetensors"] = {"bytes": len(data),
                                          "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "config.json").write_text(json.dumps(sealed(conf)))
    loaded = _load_or_one_line_error(folder)
    if loaded is not None:
        assert np.isfinite(loaded.vectors).all() and len(scales) == (8 if scale == "row" else 1)


@HYPO
@given(name=st.sampled_from(["model.safetensors", "vocab.txt"]), data=st.binary(max_size=200))
def test_any_bytes_in_a_v1_file_load_or_fail_with_a_model_error(tmp_path_factory, name, data):
    folder = _v1_folder(tmp_path_factory.mktemp("bytes"), _model())
    (folder / name).write_bytes(data)
    try:
        _load_resealed(folder)
    except ModelFileError as e:
        assert str(folder / name) in str(e) or str(folder) in str(e)


# -- encode: any text ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(minilm):
    return _model(tokenizer=minilm, words=[*WORDS, "北", "京", "hyper"])


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.one_of(st.none(), st.text(max_size=60),
                                st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
                                st.sampled_from(["\x00cat", "\ud800cat", "😀😀", "北京", " \t\n"])),
                      max_size=6))
def test_any_text_encodes_to_a_unit_or_zero_vector(model, texts):
    out = model.encode(texts)
    assert out.shape == (len(texts), model.dim) and out.dtype == np.float32
    assert np.isfinite(out).all()
    norms = np.linalg.norm(out, axis=1)
    assert np.all((np.abs(norms - 1) < 1e-4) | (norms == 0))


@settings(max_examples=20, deadline=None)
@given(bad=st.one_of(st.integers(), st.binary(min_size=1), st.floats(), st.lists(st.text())),
       at=st.integers(0, 3))
def test_a_non_text_item_is_a_type_error_naming_its_index(model, bad, at):
    texts = ["cat", "dog", "mat"]
    texts.insert(at, bad)
    with pytest.raises(TypeError, match=rf"texts\[{at}\] is {type(bad).__name__}"):
        model.encode(texts)


@settings(max_examples=30, deadline=None)
@given(words=st.lists(st.sampled_from([*WORDS, "Cat", "unknown", "hyperparameter", "北京", ",",
                                       "😀"]), min_size=1, max_size=80),
       seps=st.lists(st.sampled_from([" ", "\n", "\t", "  ", " \r\n"]), min_size=1),
       piece=st.integers(16, 64))
def test_huge_texts_streamed_in_pieces_encode_as_one(model, words, seps, piece):
    """A text longer than ``text_piece`` is encoded piece by piece (cut at whitespace): the same
    vector as encoding it whole."""
    text = "".join(w + seps[i % len(seps)] for i, w in enumerate(words))
    whole = model.encode(text)
    try:
        model.text_piece = piece
        streamed = model.encode([text, "cat", text])
    finally:
        del model.text_piece  # back to the class default
    np.testing.assert_allclose(streamed[0], whole, atol=1e-5)
    np.testing.assert_allclose(streamed[2], whole, atol=1e-5)
    np.testing.assert_allclose(streamed[1], model.encode("cat"), atol=1e-6)
    raw = model.encode(text, normalize=False)
    model.text_piece = piece
    try:
        np.testing.assert_allclose(model.encode(text, normalize=False), raw, atol=1e-5)
    finally:
        del model.text_piece


def _load_or_one_line_error(folder):
    """The model at ``folder``, or ``None`` after checking its error is one line naming it."""
    try:
        return StaticModel.load(folder)
    except ModelFileError as e:
        assert str(folder) in str(e) and "\n" not in str(e)
        return None
