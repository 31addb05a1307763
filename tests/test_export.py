"""`swe export`: the model2vec and sentence-transformers folders load in the real packages and
agree with our encoder."""

from __future__ import annotations

import numpy as np
import pytest

from swe.export import ExportError, export
from swe.model import StaticModel

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
    """The agreement tests use in-vocabulary words: the OOV rule differs (docs/export.md)."""
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
    # a non-empty output is refused, naming the path
    assert main(["export", str(tmp_path / "model"), "--to", "model2vec",
                 str(tmp_path / "out")]) == 1
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
