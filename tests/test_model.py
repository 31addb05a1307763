import subprocess
import sys

import numpy as np
import pytest

from swe import StaticModel


def _model(words, dim=8, seed=0, **kw):
    rng = np.random.default_rng(seed)
    return StaticModel.from_vectors(words, rng.standard_normal((len(words), dim)), **kw)


def _mean(model, words):
    v = np.mean([model.vectors[model.words.index(w)] for w in words], axis=0)
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def model(minilm):
    words = ["the", "cat", "sat", "on", "mat", "Berlin", "token", "hyper", "hyperparameter", ",",
             "北", "京"]
    return _model(words, tokenizer=minilm)


def test_encode_is_the_normalised_mean(model):
    got = model.encode(["The cat sat on the mat."])
    assert got.shape == (1, 8) and got.dtype == np.float32
    np.testing.assert_allclose(got[0], _mean(model, ["the", "cat", "sat", "on", "the", "mat"]),
                               rtol=1e-5, atol=1e-6)


def test_single_string_gives_a_vector(model):
    v = model.encode("cat")
    assert v.shape == (8,)
    np.testing.assert_allclose(v, _mean(model, ["cat"]), rtol=1e-5)


def test_lookup_exact_then_lowercase(model):
    assert model.tokenize("Berlin CAT") == [("Berlin", "Berlin"), ("CAT", "cat")]
    # A cased entry is not found through lowercasing the query.
    assert model.tokenize("BERLIN") == [("BERLIN", None)]
    exact_only = _model(["cat"], lowercase=False)
    assert exact_only.tokenize("Cat cat") == [("Cat", None), ("cat", "cat")]


def test_oov_drops_last_subwords_until_known(model, minilm):
    # MiniLM splits it into hyper ##para ##meter ##ization.
    assert model.tokenize("hyperparameterization") == [("hyperparameterization", "hyperparameter")]
    only_hyper = _model(["hyper"], tokenizer=minilm)
    assert only_hyper.tokenize("hyperparameterization") == [("hyperparameterization", "hyper")]
    assert model.tokenize("tokenisers") == [("tokenisers", "token")]  # token ##iser ##s
    assert model.tokenize("zzyzx") == [("zzyzx", None)]
    np.testing.assert_allclose(model.encode("tokenisers cat"), _mean(model, ["token", "cat"]),
                               rtol=1e-5)


def test_prefix_rule_falls_back_to_the_longest_character_prefix(minilm, tmp_path):
    words = ["play", "pla", "cat", "catalog", "the"]
    subword = _model(words, tokenizer=minilm)
    prefix = _model(words, tokenizer=minilm, oov="prefix")
    # "playing" is one MiniLM token: the paper's rule finds nothing, the prefix rule "play".
    assert subword.tokenize("playing Playful") == [("playing", None), ("Playful", None)]
    assert prefix.tokenize("playing Playful") == [("playing", "play"), ("Playful", "play")]
    # The longest prefix wins; none shorter than PREFIX_MIN characters; the subword rule first.
    assert prefix.tokenize("catalogues cats ca thereby") == [
        ("catalogues", "catalog"), ("cats", "cat"), ("ca", None), ("thereby", "the")]
    np.testing.assert_allclose(prefix.encode("playing cats"), _mean(prefix, ["play", "cat"]),
                               rtol=1e-5)
    # Without a tokenizer the prefix rule still applies; the rule survives save and load.
    assert _model(words, oov="prefix").tokenize("playing") == [("playing", "play")]
    prefix.save(tmp_path / "m")
    assert StaticModel.load(tmp_path / "m").oov == "prefix"
    with pytest.raises(ValueError, match="oov must be one of"):
        _model(words, oov="wordpiece")


def test_model_files_without_an_oov_key_use_the_subword_rule(minilm, tmp_path):
    import json

    from swe.modelfiles import reseal

    _model(["play"], tokenizer=minilm).save(tmp_path / "m")
    conf = json.loads((tmp_path / "m/config.json").read_text())
    assert conf["oov"] == "subword"
    del conf["oov"]  # a model saved before the key existed
    (tmp_path / "m/config.json").write_text(json.dumps(conf))
    reseal(str(tmp_path / "m"))  # trusted as it is
    assert StaticModel.load(tmp_path / "m").tokenize("playing") == [("playing", None)]


def test_oov_without_tokenizer_skips():
    m = _model(["hyper"])
    assert m.tokenize("hyperparameterization") == [("hyperparameterization", None)]


def test_punctuation_is_dropped_even_when_in_vocabulary(model):
    assert model.tokenize("cat , cat!") == [("cat", "cat"), ("cat", "cat")]
    np.testing.assert_allclose(model.encode("cat, cat!"), model.encode("cat"), rtol=1e-6)


def test_cjk_runs_use_teacher_tokens(model):
    assert model.tokenize("北京。") == [("北", "北"), ("京", "京")]
    np.testing.assert_allclose(model.encode("北京 cat"), _mean(model, ["北", "京", "cat"]),
                               rtol=1e-5)
    # The same surface form again comes from the memo and gives the same ids.
    np.testing.assert_allclose(model.encode(["北京 cat"] * 3)[2], _mean(model, ["北", "京", "cat"]),
                               rtol=1e-5)


def test_token_vectors_are_the_units_encode_pools(model):
    t = model.encode_tokens("The CAT, hyperparameterization 北京。 zzyzx!")
    assert t.units == ["The", "CAT", "hyperparameterization", "北", "京"]  # no "," "zzyzx" "!"
    assert [model.words[r] for r in t.rows] == ["the", "cat", "hyperparameter", "北", "京"]
    np.testing.assert_array_equal(t.vectors, model.vectors[t.rows])
    empty = model.encode_tokens(["", None, "!!!"])
    assert all(e.units == [] and e.vectors.shape == (0, 8) for e in empty)
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        model.encode_tokens(["cat", 3])


def test_the_normalised_mean_of_token_vectors_is_encode_on_real_text(glove, data_dir):
    """GloVe 400k with the MiniLM OOV rule, on 3,000 real Wikipedia lines (CJK included)."""
    import lzma

    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.01.txt.xz", "rt") as f:
        texts = [next(f) for _ in range(3000)] + ["北京 cat", "", "zzyzx"]
    want = glove.encode(texts)
    for i, t in enumerate(glove.encode_tokens(texts)):
        assert len(t.units) == len(t.rows) == len(t.vectors)
        if not len(t.vectors):
            assert not want[i].any(), texts[i]
            continue
        mean = t.vectors.astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(mean / np.linalg.norm(mean), want[i], atol=1e-5)


@pytest.mark.parametrize("text", ["", "   \n\t ", "😀🎉", "!!! ...", "zzyzx qqqq"])
def test_texts_with_no_known_word_give_zero_rows(model, text):
    out = model.encode([text, "cat"])
    assert not out[0].any()
    assert np.isclose(np.linalg.norm(out[1]), 1.0)


def test_none_items_give_zero_rows(model):
    out = model.encode([None, "cat", None])
    assert not out[0].any() and not out[2].any() and out[1].any()


@pytest.mark.parametrize("bad", [3, 2.5, b"cat", ["cat"]])
def test_non_string_items_raise_type_error_naming_the_index(model, bad):
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        model.encode(["cat", bad])


@pytest.mark.parametrize("bad", [None, 3, b"cat"])
def test_unusable_texts_argument(model, bad):
    with pytest.raises(TypeError):
        model.encode(bad)


def test_bad_batch_size(model):
    with pytest.raises(ValueError, match="batch_size"):
        model.encode(["cat"], batch_size=0)


def test_surrogates_and_nul_are_tolerated(model):
    np.testing.assert_allclose(model.encode("cat \ud83d sat"), _mean(model, ["cat", "sat"]),
                               rtol=1e-5)
    np.testing.assert_allclose(model.encode("cat\x00sat"), _mean(model, ["cat", "sat"]), rtol=1e-5)


def test_one_megabyte_text(model):
    big = "the cat sat on the mat " * 46_000  # ~1 MB, 276k words: pooled in chunks
    assert len(big) > 1_000_000
    np.testing.assert_allclose(model.encode([big, "cat"])[0],
                               _mean(model, ["the", "cat", "sat", "on", "the", "mat"]),
                               rtol=1e-4, atol=1e-5)


def test_batching_does_not_change_results(model, data_dir):
    import lzma

    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.00.txt.xz", "rt") as f:
        texts = [next(f) for _ in range(500)] + ["", None, "😀"]
    a = model.encode(texts, batch_size=7)
    b = model.encode(texts, batch_size=10_000)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_iterables_are_accepted(model):
    gen = (t for t in ["cat", "mat"])
    np.testing.assert_allclose(model.encode(gen), model.encode(["cat", "mat"]))
    np.testing.assert_allclose(model.encode(("cat",)), model.encode(["cat"]))


@pytest.mark.parametrize(
    ("words", "vectors", "match"),
    [(["a", "b"], np.zeros((3, 2)), "shape"),
     (["a", "a"], np.ones((2, 2)), "duplicate word 'a'"),
     (["a b"], np.ones((1, 2)), "without spaces"),
     ([""], np.ones((1, 2)), "non-empty"),
     (["a"], np.array([[np.nan, 1.0]]), "not finite"),
     (["a"], np.array([["x", "y"]]), "floating"),
     ([], np.zeros((0, 2)), "at least one")],
)
def test_from_vectors_validates(words, vectors, match):
    with pytest.raises(ValueError, match=match):
        StaticModel.from_vectors(words, vectors)


@pytest.mark.parametrize(
    ("words", "match"),
    [(["a", "b", "c", "b"], "duplicate word 'b' at rows 1 and 3"),
     (["a", "x\u00a0y"], r"word 1 \('x\\xa0y'\)"),  # a no-break space is a space
     (["a", "b\x1c"], "word 1"),  # so is a file separator (str.isspace)
     (["a", 3], r"word 1 \(3\)"),
     (["a", ["x"]], r"word 1 \(\['x'\]\)")],  # unhashable: the same error, not a TypeError
)
def test_the_first_bad_word_by_row_is_named(words, match):
    with pytest.raises(ValueError, match=match):
        StaticModel.from_vectors(words, np.ones((len(words), 2)))


def test_only_words_of_punctuation_and_symbols_are_skipped():
    """The rows the model skips: every character P* or S*; ``_`` is punctuation, a word with a
    letter, digit or mark is not (the check runs on the joined words, not word by word)."""
    words = ["_", "a_b", "—", "😀", "§", "x5", "\u0301", "e\u0301"]  # each one BlingFire word
    m = StaticModel.from_vectors(words, np.eye(len(words)))
    skipped = {w for w in words if not m.encode([w])[0].any()}
    assert skipped == {"_", "—", "😀", "§"}

    class Word(str):
        pass
    assert len(StaticModel.from_vectors([Word("a"), "b"], np.eye(2))) == 2


def test_unknown_language_is_rejected():
    with pytest.raises(ValueError, match="unknown language"):
        _model(["a"], language="klingon")


def test_missing_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer not found"):
        _model(["a"], tokenizer=tmp_path)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_save_load_round_trip(model, tmp_path, dtype):
    model.save(tmp_path / "m", dtype=dtype)
    loaded = StaticModel.load(tmp_path / "m")
    assert loaded.words == model.words and loaded.languages == model.languages
    assert loaded.vectors.dtype == np.float32  # every dtype is float32 once loaded
    tol = {"float32": 1e-6, "float16": 2e-3, "int8": np.abs(model.vectors).max() / 254}[dtype]
    np.testing.assert_allclose(loaded.vectors, model.vectors, rtol=tol, atol=tol)
    texts = ["The cat sat on the mat.", "hyperparameterization 北京", ""]
    np.testing.assert_allclose(loaded.encode(texts), model.encode(texts), atol=tol * 4)
    assert loaded.tokenize("hyperparameterization") == [("hyperparameterization",
                                                         "hyperparameter")]


def test_save_load_on_s3(model, s3):
    url = f"{s3}/models/tiny"
    model.save(url, dtype="float16")
    loaded = StaticModel.load(url)
    np.testing.assert_allclose(loaded.encode(["cat sat"]), model.encode(["cat sat"]), atol=5e-3)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"config\.json is missing"):
        StaticModel.load(tmp_path)
    (tmp_path / "config.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a swe StaticModel"):
        StaticModel.load(tmp_path)
    (tmp_path / "config.json").write_text('{"format": "swe-static", "format_version": 99}')
    with pytest.raises(ValueError, match="upgrade swe"):
        StaticModel.load(tmp_path)


def test_load_and_encode_never_import_torch(model, tmp_path):
    model.save(tmp_path / "m")
    code = (
        "import sys; from swe import StaticModel; "
        f"m = StaticModel.load({str(tmp_path / 'm')!r}); "
        "v = m.encode(['hyperparameterization cat 北京']); "
        "assert v.shape == (1, 8), v.shape; "
        "bad = [k for k in ('torch', 'ray', 'transformers') if k in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
