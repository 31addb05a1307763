"""Export a swe model as a model2vec or a sentence-transformers (``StaticEmbedding``) folder.

Both libraries run a Hugging Face ``tokenizers`` pipeline, then average the token rows and
L2-normalise. Our rule (``swe.model``: BlingFire words, exact then lowercased lookup, the
teacher-subword OOV prefix rule, punctuation skipped) becomes the closest ``tokenizer.json``:

* normaliser: ``Lowercase`` when the model lowercases and every vocabulary word is lowercase
  (English builds); none otherwise (cased vocabularies look up exactly);
* pre-tokeniser: a regex that mimics BlingFire's English word units (``do|n't``, ``it|'s``,
  ``3.5``, ``U.S.``, punctuation one character at a time);
* model: ``WordPiece`` over our words, with a ``##c`` continuation token per character, so an
  out-of-vocabulary word keeps its longest in-vocabulary prefix (at any character, not only at a
  teacher-subword boundary) and its remainder maps to zero rows;
* zero rows for ``[UNK]``, punctuation words and the continuation tokens: a zero row does not
  change the direction of a mean that is L2-normalised afterwards, as our skipped units do not.

What still differs is listed in docs/export.md. Torch-free: only numpy, safetensors, tokenizers.
"""

from __future__ import annotations

import json
import os
import string

import numpy as np
from safetensors.numpy import save as st_save

from swe import storage
from swe.model import StaticModel
from swe.text import is_punctuation

__all__ = ["TARGETS", "ExportError", "export", "export_arrays", "export_tokenizer"]

TARGETS = ("model2vec", "sentence-transformers")
UNK = "[UNK]"
PREFIX = "##"
# BlingFire-like English word units: clitics split off ("do|n't", "it|'s"), decimals and
# dotted abbreviations kept whole, every other non-word character on its own.
WORD_PATTERN = (r"\w+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\d+(?:[.,]\d+)+|(?:\w\.){2,}|\w+"
                r"|[^\w\s]")


class ExportError(ValueError):
    """An export that cannot be written (bad target, non-empty output)."""


def export_arrays(model: StaticModel) -> tuple[list[str], np.ndarray, bool]:
    """The exported token list, its ``[len(tokens), d]`` float32 rows and whether it lowercases.

    Row 0 is ``[UNK]``; then our words in order; then ``##c`` continuation tokens. Rows that
    our rule skips (punctuation, continuations, unknown) are zero.
    """
    lowercase = model.lowercase and all(w == w.lower() for w in model.words)
    known = set(model.words)
    chars = sorted({c for w in model.words for c in w} | set(string.ascii_lowercase + "0123456789"))
    cont = [PREFIX + c for c in chars if PREFIX + c not in known]
    tokens = [UNK, *model.words, *cont] if model.tokenizer is not None else [UNK, *model.words]
    rows = np.zeros((len(tokens), model.dim), dtype=np.float32)
    rows[1 : 1 + len(model)] = model.vectors
    for i, w in enumerate(model.words):
        if is_punctuation(w):
            rows[1 + i] = 0.0
    return tokens, rows, lowercase


def export_tokenizer(tokens: list[str], lowercase: bool, subwords: bool) -> object:
    """A ``tokenizers.Tokenizer`` for ``tokens`` (WordPiece when ``subwords``, else WordLevel)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    if subwords:
        model = models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix=PREFIX,
                                 max_input_chars_per_word=200)
    else:
        model = models.WordLevel(vocab, unk_token=UNK)
    tok = Tokenizer(model)
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(WORD_PATTERN), "isolated")])
    return tok


def _check_out(out: str) -> None:
    fs, path = storage.filesystem(out)
    if fs.exists(path) and (not fs.isdir(path) or fs.ls(path)):
        raise ExportError(f"{out} exists and is not an empty directory; choose a new output "
                          f"path or remove it first")


def _model2vec_files(model: StaticModel, tok_json: bytes, rows: np.ndarray) -> dict[str, bytes]:
    config = {"model_type": "model2vec", "architectures": ["StaticModel"],
              "tokenizer_name": model.provenance.get("teacher"), "apply_pca": model.dim,
              "hidden_dim": model.dim, "normalize": True, "max_length": None,
              "pooling": "mean", "embedding_dtype": "float32"}
    modules = [{"idx": 0, "name": "0", "path": ".",
                "type": "sentence_transformers.models.StaticEmbedding"},
               {"idx": 1, "name": "1", "path": "1_Normalize",
                "type": "sentence_transformers.models.Normalize"}]
    return {"model.safetensors": st_save({"embeddings": rows}), "tokenizer.json": tok_json,
            "config.json": _json(config), "modules.json": _json(modules),
            "1_Normalize/config.json": _json({})}


def _st_files(tok_json: bytes, rows: np.ndarray) -> dict[str, bytes]:
    modules = [{"idx": 0, "name": "0", "path": "0_StaticEmbedding",
                "type": "sentence_transformers.models.StaticEmbedding"},
               {"idx": 1, "name": "1", "path": "1_Normalize",
                "type": "sentence_transformers.models.Normalize"}]
    st_config = {"model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
                 "similarity_fn_name": "cosine"}
    return {"0_StaticEmbedding/model.safetensors": st_save({"embedding.weight": rows}),
            "0_StaticEmbedding/tokenizer.json": tok_json, "modules.json": _json(modules),
            "config_sentence_transformers.json": _json(st_config),
            "1_Normalize/config.json": _json({})}


def _json(obj: object) -> bytes:
    return json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8")


def export(model: str | os.PathLike | StaticModel, to: str, out: str | os.PathLike) -> str:
    """Write ``model`` (a path or a loaded model) to ``out`` in the ``to`` library's format;
    returns ``out``. ``to`` is ``model2vec`` or ``sentence-transformers``."""
    if to not in TARGETS:
        raise ExportError(f"unknown export target {to!r}; choose one of {', '.join(TARGETS)}")
    out = os.fspath(out)
    _check_out(out)
    if not isinstance(model, StaticModel):
        model = StaticModel.load(model)
    tokens, rows, lowercase = export_arrays(model)
    tok = export_tokenizer(tokens, lowercase, subwords=model.tokenizer is not None)
    tok_json = tok.to_str().encode("utf-8")
    files = _model2vec_files(model, tok_json, rows) if to == "model2vec" else _st_files(tok_json,
                                                                                        rows)
    for name, data in files.items():
        storage.write_bytes(storage.join(out, name), data)
    return out
