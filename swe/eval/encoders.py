"""The encoder registry: the one place an encoder *spec* is parsed.

An *encoder* is anything with ``encode(list[str]) -> np.ndarray``. A spec is one of

* a model dir: a ``StaticModel`` or ``EnsembleModel`` (local or ``s3://``);
* ``teacher:DIR`` or ``teacher:minilm``: the teacher with its own pooling and prefix (torch);
* ``model2vec:DIR``: a Model2Vec model, loaded with the ``model2vec`` package;
* ``gem:DIR``: GEM pooling (:mod:`swe.eval.gem`) over a StaticModel's word vectors;
* a baseline shipped on PyPI (:mod:`swe.eval.baselines`): ``potion-base-8m``,
  ``wordllama-256``, ``glove-50d`` or ``use-multilingual``.

:func:`load_encoder` loads one; :func:`model_files` lists the files on disk it loads (the size
that :mod:`swe.eval.speed` reports).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from swe.eval import baselines
from swe.eval.baselines import dir_files

__all__ = ["Encoder", "EncoderKind", "TeacherEncoder", "load_encoder", "model_files", "resolve",
           "size_bytes", "spec_help", "teacher_dir"]


def teacher_dir(name: str) -> str:
    """The directory of the teacher ``name`` (a folder, or ``minilm``); see
    :func:`swe.build.teacher.model.teacher_dir`."""
    from swe.build.teacher.model import teacher_dir as resolve_teacher

    return resolve_teacher(name)


class Encoder(Protocol):
    """Anything that embeds a list of texts as one row each."""

    def encode(self, texts: list[str]) -> np.ndarray:
        """One embedding row per text."""
        ...


@dataclass
class TeacherEncoder:
    """A teacher with its own pooling and prefix (``swe.build.teacher``), batched by length."""

    path: str
    batch_size: int = 128
    threads: int | None = None

    def __post_init__(self) -> None:
        from swe.build.teacher import Teacher

        self.teacher = Teacher(self.path, threads=self.threads)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Pooled teacher embeddings ``[n, d]``, float32."""
        texts = list(texts)
        out = np.zeros((len(texts), self.teacher.dim), np.float32)
        for idx in self.teacher.batches(texts, self.batch_size * 64):
            out[idx] = self.teacher.embed([texts[i] for i in idx])
        return out


@dataclass
class _Adapter:
    """An encoder from any ``texts -> array`` function (e.g. WordLlama's ``embed``)."""

    fn: Callable[[list[str]], Any]

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.fn(list(texts)), dtype=np.float32)


# -- loaders: (spec argument, threads) -> encoder ------------------------------------------------


def _teacher(arg: str, threads: int | None) -> Encoder:
    if threads:
        import torch

        with contextlib.suppress(RuntimeError):  # only settable before any parallel work
            torch.set_num_interop_threads(threads)
    return TeacherEncoder(teacher_dir(arg), threads=threads)


def _model2vec(path: str | os.PathLike) -> Encoder:
    from model2vec import StaticModel as M2V

    if not os.path.isdir(path):  # model2vec would look a missing folder up on a model hub
        raise FileNotFoundError(f"model2vec model not found: {path} is not a folder (swe never "
                                "downloads a model)")
    return M2V.from_pretrained(str(path))


def _gem(arg: str, threads: int | None) -> Encoder:
    from swe.eval.gem import GEMEncoder
    from swe.model import StaticModel

    return GEMEncoder(StaticModel.load(arg))


def _model_dir(spec: str, threads: int | None) -> Encoder:
    from swe import storage

    if storage.is_local(spec) and not os.path.isdir(spec):
        raise FileNotFoundError(f"model not found: {spec} ({spec_help()})")
    fs, path = storage.filesystem(storage.join(spec, "ensemble.json"))
    if fs.exists(path):
        from swe.ensemble import EnsembleModel

        return EnsembleModel.load(spec)
    from swe.model import StaticModel

    return StaticModel.load(spec)


@dataclass(frozen=True)
class EncoderKind:
    """How one kind of spec is loaded (``load(arg, threads)``) and which files it loads
    (``files(arg)``); ``arg`` is the part after ``kind:``, or the whole spec."""

    load: Callable[[str, int | None], Encoder]
    files: Callable[[str], list[Path]]


#: ``kind:ARG`` specs.
PREFIXED: dict[str, EncoderKind] = {
    "teacher": EncoderKind(_teacher, lambda arg: dir_files(teacher_dir(arg))),
    "model2vec": EncoderKind(lambda arg, _: _model2vec(arg), dir_files),
    "gem": EncoderKind(_gem, dir_files),
}
#: Named baselines.
NAMED: dict[str, EncoderKind] = {
    "potion-base-8m": EncoderKind(lambda _, __: _model2vec(baselines.potion_base_8m_dir()),
                                  lambda _: dir_files(baselines.potion_base_8m_dir())),
    "wordllama-256": EncoderKind(lambda _, __: _Adapter(baselines.wordllama_256().embed),
                                 lambda _: baselines.wordllama_256_files()),
    "glove-50d": EncoderKind(lambda _, __: baselines.glove_50d(),
                             lambda _: baselines.glove_50d_files()),
    "use-multilingual": EncoderKind(
        lambda _, threads: _Adapter(baselines.use_multilingual(threads).encode),
        lambda _: baselines.use_multilingual_files()),
}
_MODEL_DIR = EncoderKind(_model_dir, dir_files)


def spec_help() -> str:
    """The spec forms in words, for help texts and errors."""
    forms = ["a model dir", *(f"{k}:DIR" for k in PREFIXED), *NAMED]
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def resolve(spec: str) -> tuple[EncoderKind, str]:
    """The kind of ``spec`` and its argument (the part after ``kind:``, else the spec)."""
    kind, _, arg = spec.partition(":")
    if arg and kind in PREFIXED:
        return PREFIXED[kind], arg
    if spec in NAMED:
        return NAMED[spec], spec
    return _MODEL_DIR, spec


def load_encoder(spec: str, threads: int | None = None) -> Encoder:
    """The encoder ``spec`` names; ``threads`` sizes the teacher's torch pools and USE's pool
    (other libraries read the ``*_NUM_THREADS`` environment variables)."""
    kind, arg = resolve(spec)
    return kind.load(arg, threads)


def model_files(spec: str) -> list[Path]:
    """The files on disk that :func:`load_encoder` loads for ``spec`` (local specs only)."""
    kind, arg = resolve(spec)
    return kind.files(arg)


def size_bytes(spec: str) -> int:
    """Total size in bytes of :func:`model_files`."""
    return sum(p.stat().st_size for p in model_files(spec))
