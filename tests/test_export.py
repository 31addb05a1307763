"""`swe export`: the model2vec and sentence-transformers folders load in the real packages and
agree with our encoder."""

from __future__ import annotations

import numpy as np
import pytest

from swe.export import ExportError, export
from swe.model import StaticModel

pytestmark = pytest.mark.slow

SENTENCES = [
    "a man is playing a guitar",
    "the children sat on the floor",
    "stocks rose sharply in early trading on monday",
    "the government announced new rules for the city's schools",
    "she didn't know where the old house was",
    "two dogs are running through a field of grass",
]


@pytest.fixture(scope="module")
def tiny(glove) -> StaticModel:
    """5,000 real GloVe words with the MiniLM tokenizer for the OOV rule."""
    return StaticModel.from_vectors(glove.words[:5000], glove.vectors[:5000],
                                    tokenizer=glove.tokenizer, lowercase=True,
                                    provenance={"teacher": "glove-test"})


def test_sentences_are_in_vocabulary(tiny):
    """The two loading tests use in-vocabulary words; the rule's other parts are tested
    below."""
    for s in SENTENCES:
        assert all(entry is not None for _, entry in tiny.tokenize(s)), tiny.tokenize(s)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_model2vec_loads_and_agrees(tiny, tmp_path):
    import model2vec

    out = export(tiny, "model2vec", tmp_path / "m2v")
    theirs = model2vec.StaticModel.from_pretrained(out)
    assert theirs.dim == tiny.dim
    cos = _cosines(tiny.encode(SENTENCES), theirs.encode(SENTENCES))
    assert cos.min() > 0.99, cos


def test_sentence_transformers_loads_and_agrees(tiny, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = export(tiny, "sentence-transformers", tmp_path / "st")
    theirs = SentenceTransformer(str(out), device="cpu")
    assert type(theirs[0]).__name__ == "StaticEmbedding"
    cos = _cosines(tiny.encode(SENTENCES), theirs.encode(SENTENCES, convert_to_numpy=True))
    assert cos.min() > 0.99, cos


def test_export_from_a_saved_folder_via_the_command(tiny, tmp_path, capsys):
    from swe.cli import main

    tiny.save(tmp_path / "model")
    assert main(["export", str(tmp_path / "model"), "--to", "model2vec",
                 str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "model.safetensors").is_file()
    printed = capsys.readouterr().out  # the agreement measured at export time is printed
    assert "agreement with swe on 3,000 held-out lines" in printed
    assert "mean cosine" in printed and "README.md" in printed
    # a non-empty output is refused, naming the path
    assert main(["export", str(tmp_path / "model"), "--to", "model2vec",
                 str(tmp_path / "out")]) == 2  # a wrong input (swe.commands)
    assert str(tmp_path / "out") in capsys.readouterr().err


def test_unknown_target_is_refused(tiny, tmp_path):
    with pytest.raises(ExportError, match="choose one of"):
        export(tiny, "onnx", tmp_path / "x")


def test_model_cards_in_every_saved_step(tiny, minilm, tmp_path):
    """BuildContext writes a README.md card into each saved model dir; loading ignores it."""
    from swe.build import load_config
    from swe.build.context import BuildContext

    cfg = load_config("pipelines/configs/quickstart.toml", [], output=str(tmp_path))
    ctx = BuildContext(cfg, str(tmp_path), str(minilm))
    tiny.save(tmp_path / "step1")  # saved by a task, as extraction does
    ctx.save_step("step3", tiny.words, tiny.vectors)  # step3 and model
    ctx.close()
    for step in ("step1", "step3", "model"):
        card = (tmp_path / step / "README.md").read_text()
        assert f"| teacher | `{cfg.teacher}` |" in card
        assert f"| V (words) | {len(tiny):,}" in card
        assert "SentenceTransformer(" in card and "from_pretrained(" in card
        assert len(StaticModel.load(tmp_path / step)) == len(tiny)  # the checksums still pass
    assert not (tmp_path / "step2").exists()


def test_load_keeps_leading_dimensions(tiny, tmp_path):
    tiny.save(tmp_path / "m")
    small = StaticModel.load(tmp_path / "m", dim=8)
    assert small.dim == 8
    np.testing.assert_array_equal(small.vectors, tiny.vectors[:, :8])
    assert StaticModel.load(tmp_path / "m", dim=tiny.dim).dim == tiny.dim
    with pytest.raises(ValueError, match=f"dim={tiny.dim + 1} exceeds.*{tmp_path / 'm'}"):
        StaticModel.load(tmp_path / "m", dim=tiny.dim + 1)
    with pytest.raises(ValueError, match="positive int"):
        StaticModel.load(tmp_path / "m", dim=0)


def test_no_cards_once_the_output_is_lost(tiny, tmp_path):
    from swe.build import load_config
    from swe.build.card import write_cards

    cfg = load_config("pipelines/configs/quickstart.toml", [], output=str(tmp_path))
    tiny.save(tmp_path / "model")

    def lost() -> None:
        raise OSError("lease lost")

    assert write_cards(str(tmp_path), cfg, check=lost) == []
    assert not (tmp_path / "model" / "README.md").exists()
    assert write_cards(str(tmp_path), cfg) == [str(tmp_path / "model" / "README.md")]


# The rule's parts, each in a sentence: the teacher's first subword (``tofu`` -> ``to``) and a
# prefix of 3+ characters only (``slicing``: never ``s``, as WordPiece alone would take);
# ``onions`` -> ``onion``; accents stripped as the uncased teacher does (``México`` -> ``mexico``);
# BlingFire's units (``I|'|m``, ``can|not``, ``9,837.94``, ``U.S|.`` at the end, ``do|n't``,
# ``Klarman|'s``).
RULE_WORDS = ["a", "man", "is", "the", "to", "co", "on", "s", "k", "i", "m", "can", "not", "do",
              "n't", "it", "'s", "9,837.94", "u.s.", "mexico", "eats", "couch", "slice",
              "playing", "play", "in", "onion", "skate", "skateboard"]
RULE_SENTENCES = ["A man eats tofu on the couch", "The man is slicing onions",
                  "I'm playing in México", "It cannot be 9,837.94 in the U.S.",
                  "Skateboarders don't play", "Klarman's man"]


@pytest.fixture(scope="module")
def rule_model(minilm) -> StaticModel:
    vectors = np.random.default_rng(0).standard_normal((len(RULE_WORDS), 16))
    return StaticModel.from_vectors(RULE_WORDS, vectors.astype(np.float32), tokenizer=minilm,
                                    lowercase=True, oov="prefix")


def test_the_export_follows_our_out_of_vocabulary_rule(rule_model, tmp_path):
    import model2vec

    assert rule_model.tokenize("tofu slicing onions México") == [
        ("tofu", "to"), ("slicing", None), ("onions", "onion"), ("México", "mexico")]
    out = export(rule_model, "model2vec", tmp_path / "m2v")
    theirs = model2vec.StaticModel.from_pretrained(out).encode(RULE_SENTENCES)
    cos = _cosines(rule_model.encode(RULE_SENTENCES), theirs)
    assert cos.min() > 0.9999, dict(zip(RULE_SENTENCES, cos.round(4), strict=True))


def test_a_cased_vocabulary_keeps_the_lowercased_lookup(tmp_path):
    """An en+de vocabulary (cased German words, lowercase English ones, lowercase=True): exact
    first (``Die``), then lowercased (``The``, ``THE`` -> ``the``; ``HAUS`` finds no ``haus``)."""
    from sentence_transformers import SentenceTransformer

    words = ["the", "house", "Die", "die", "Mann", "Haus", "T", "man", "is", "big"]
    vectors = np.random.default_rng(1).standard_normal((len(words), 8)).astype(np.float32)
    model = StaticModel.from_vectors(words, vectors, lowercase=True, language=["en", "de"],
                                     oov="prefix")
    texts = ["The man", "THE HOUSE IS BIG", "Die Mann", "DIE Haus", "HAUS", "Houses",
             "The Mannschaft"]
    assert model.tokenize("The HAUS Mannschaft") == [("The", "the"), ("HAUS", None),
                                                      ("Mannschaft", "Mann")]
    out = export(model, "sentence-transformers", tmp_path / "st")
    theirs = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_numpy=True)
    ours = model.encode(texts)
    zero = np.linalg.norm(ours, axis=1) == 0
    np.testing.assert_array_equal(np.linalg.norm(theirs, axis=1) == 0, zero)
    assert _cosines(ours[~zero], theirs[~zero]).min() > 0.9999


@pytest.mark.parametrize("text", [
    "I'm sure it's 9,837.94 (not 3,50) in the U.S.", "He can't, she cannot; we'll see.",
    "O'Neil met Brink‘s staff at 10:30 e.g. in the U.S. today", "AT&T's .NET 4.2pc e-mail",
    "Die Männer sind's. z.B. am 3. Mai 12.03.2019", "\"Hi!\" -- said 'Dr. Smith'..."])
def test_the_pre_tokeniser_splits_like_blingfire(text, tmp_path_factory):
    """The exported tokenizer's units (its end marker U+E000 removed) are BlingFire's."""
    from tokenizers import Tokenizer

    from swe.text import words

    out = tmp_path_factory.getbasetemp() / "pretok"
    if not out.exists():
        model = StaticModel.from_vectors(["Die", "the"], np.eye(2, dtype=np.float32))
        export(model, "model2vec", out)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    pieces = tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text)
                                                if tok.normalizer else text)
    assert [p.replace("\ue000", "") for p, _ in pieces] == words(text)


def test_the_agreement_is_returned_printed_and_in_the_card(tiny, tmp_path):
    printed: list[str] = []
    out = export(tiny, "model2vec", tmp_path / "m2v", report=printed.append)
    assert out == str(tmp_path / "m2v") and out.agreement.sentences == 3000
    assert out.agreement.mean > 0.99 and out.agreement.not_measured == []
    assert len(printed) == 1 and f"mean cosine {out.agreement.mean:.4f}" in printed[0]
    card = (tmp_path / "m2v" / "README.md").read_text()
    assert "## Agreement with swe" in card and f"| {out.agreement.mean:.4f} |" in card
    german = StaticModel.from_vectors(tiny.words, tiny.vectors, language=["en", "de"])
    out = export(german, "model2vec", tmp_path / "de", report=None, table_lines=0)
    assert out.agreement.not_measured == ["de"]
    assert "Not measured for language de" in (tmp_path / "de" / "README.md").read_text()
