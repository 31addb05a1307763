"""A :class:`~swe.model.StaticModel`'s folder: what ``save`` writes and ``load`` reads (the
format and its checksums: :mod:`swe.modelfiles`; the matrix dtypes: :mod:`swe.matrix`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from swe.matrix import TENSOR, clustered_tensors, matrix_tensors, read_matrix
from swe.modelfiles import (
    CLUSTER_FORMAT_VERSION,
    FLOAT_FORMAT_VERSION,
    FORMAT,
    INT8_FORMAT_VERSION,
    ModelFileError,
    ModelFolder,
    write_folder,
)

if TYPE_CHECKING:
    from swe.model import StaticModel

__all__ = ["MAX_TOKENIZER_BYTES", "load_parts", "save", "save_clustered"]

MAX_TOKENIZER_BYTES = 256 << 20  # a bigger tokenizer.json is refused (the largest known: ~20 MB)


def save(model: StaticModel, path: str | os.PathLike, dtype: str, scale: str) -> None:
    """Write ``model`` to ``path`` (see :meth:`StaticModel.save`)."""
    from swe.version import __version__

    tensors, scheme = matrix_tensors(model.vectors, dtype, scale)
    config = {
        "format": FORMAT,
        "format_version": INT8_FORMAT_VERSION if dtype == "int8" else FLOAT_FORMAT_VERSION,
        "dim": model.dim,
        "vocab_size": len(model),
        **scheme,
        "pooling": "mean",
        "normalize": True,
        "lowercase": model.lowercase,
        "oov": model.oov,
        "languages": model.languages,
        "tokenizer": "tokenizer.json" if model.tokenizer is not None else None,
        "provenance": model.provenance,
        "swe_version": __version__,
    }
    files = {"model.safetensors": st_save(tensors),
             "vocab.txt": ("\n".join(model.words) + "\n").encode("utf-8")}
    if model.tokenizer is not None:
        files["tokenizer.json"] = model.tokenizer.to_str().encode("utf-8")
    write_folder(os.fspath(path), files, config)


def save_clustered(source: str, path: str, centroids: Any, clusters: Any, norms: Any,
                   dtype: str, scale: str, facts: dict) -> int:
    """Write the clustered form of the model at ``source`` to ``path``: its words, tokenizer
    and settings, the ``[K, d]`` centroids (saved as ``dtype``), each word's cluster and norm,
    and ``facts`` under ``provenance.quantization``; the folder's size in bytes."""
    folder = ModelFolder(source)
    dropped = ("files", "config_sha256", "scale")  # written again for the new folder
    config = {k: v for k, v in folder.config.items() if k not in dropped}
    files = {"vocab.txt": folder.read("vocab.txt", "vocab.txt")}
    if config.get("tokenizer"):
        files[config["tokenizer"]] = folder.read(config["tokenizer"], "tokenizer",
                                                 MAX_TOKENIZER_BYTES)
    if len(clusters) != config.get("vocab_size"):
        raise ModelFileError(f"{source}: {len(clusters)} cluster indices for "
                             f"{config.get('vocab_size')} words")
    tensors, scheme = clustered_tensors(centroids, clusters, norms, dtype, scale)
    files["model.safetensors"] = st_save(tensors)
    provenance = {**(config.get("provenance") or {}), "quantization": facts}
    write_folder(os.fspath(path), files, {**config, **scheme, "provenance": provenance,
                                          "format_version": CLUSTER_FORMAT_VERSION})
    return sum(len(b) for b in files.values())


def load_parts(path: str | os.PathLike, dim: int | None) -> tuple[str, dict[str, Any]]:
    """``(folder, StaticModel keyword arguments)`` read from a saved model, every file checked
    against the sizes and checksums in its ``config.json`` (see :meth:`StaticModel.load`)."""
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise ValueError(f"dim must be a positive int or None, got {dim!r}")
    folder = ModelFolder(os.fspath(path))
    try:
        tensors = st_load(folder.read("model.safetensors", "model.safetensors"))
    except SafetensorError as e:
        raise ModelFileError(f"{folder.path}/model.safetensors is not a safetensors file "
                             f"({e}); save the model again") from None
    if TENSOR not in tensors:
        raise ModelFileError(f"{folder.path}/model.safetensors has no {TENSOR!r} tensor "
                             f"(it has {sorted(tensors)})")
    vocab = folder.read_text("vocab.txt", "vocab.txt").split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    tokenizer = _tokenizer(folder)
    vectors = read_matrix(folder, tensors, dim)
    real = {"vocab_size": len(vectors), **({} if dim else {"dim": vectors.shape[1]})}
    _check_claims(folder, real)
    return folder.path, {
        "words": vocab, "vectors": vectors,
        "tokenizer": tokenizer, "lowercase": folder.get("lowercase", bool),
        "oov": folder.get("oov", str, "subword"), "languages": folder.get("languages", list),
        "provenance": folder.get("provenance", (dict, type(None)), None)}


def _check_claims(folder: ModelFolder, real: dict[str, int]) -> None:
    """Refuse a config whose ``dim`` or ``vocab_size`` differs from the files (an edit that
    ``swe reseal`` sealed, say): every reader of the config would be misled."""
    for key, value in real.items():
        claimed = folder.get(key, int, None)
        if claimed is not None and claimed != value:
            raise ModelFileError(f"{folder.config_path}: {key} = {claimed} but the model holds "
                                 f"{value}; save the model again")


def _tokenizer(folder: ModelFolder) -> Any:
    """The model's ``tokenizer.json`` as a ``tokenizers.Tokenizer``, or None if it has none."""
    name = folder.get("tokenizer", (str, type(None)), None)
    if not name:
        return None
    from tokenizers import Tokenizer

    text = folder.read_text(name, "tokenizer", MAX_TOKENIZER_BYTES)
    try:
        tok = Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON
        raise ModelFileError(f"{folder.path}/{name} is not a tokenizer.json ({e})") from None
    tok.no_padding()  # as the model uses it (storage.load_tokenizer): no copy made there
    tok.no_truncation()
    return tok
