"""StaticModel: a sentence is the L2-normalised mean of its words' static vectors.

Inference rule (Wada et al. 2025): split text into word units (``swe.text``), drop punctuation,
look each unit up exactly, then lowercased; an out-of-vocabulary unit is split with the teacher's
tokenizer and its last subword dropped repeatedly until the joined remainder is in the vocabulary
(``oov="subword"``, the paper's rule); ``oov="prefix"`` then also tries the longest vocabulary
word that is a prefix of the unit at any character (at least ``PREFIX_MIN`` characters: ``playing``
→ ``play`` though the teacher keeps ``playing`` whole); a unit that never matches is skipped.
Every surface form's resolution is memoised, so the hot loop is one C-level dict lookup per
word plus a vectorised gather and ``np.add.reduceat``.

Needs numpy, safetensors, tokenizers and blingfire only: never torch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from swe import model_io, storage
from swe.matrix import DTYPES, SCALES, dequantize_int8, quantize_int8
from swe.modelfiles import FORMAT_VERSION, ModelFileError
from swe.text import (
    has_unspaced_script,
    is_punctuation,
    language,
    split_unspaced,
    strip_marker,
    unk_token,
    word_index,
    words,
)
from swe.transliteration import latin_forms

__all__ = ["DTYPES", "FORMAT_VERSION", "OOV_RULES", "PREFIX_MIN", "SCALES", "ModelFileError",
           "StaticModel", "TokenVectors", "dequantize_int8", "quantize_int8"]

#: Out-of-vocabulary rules: the teacher-subword rule alone, or it then a character prefix.
OOV_RULES = ("subword", "prefix")
PREFIX_MIN = 3  # the shortest vocabulary word the ``prefix`` rule falls back to
_SKIP = -1  # a unit that contributes nothing (punctuation, never matched)
_MEMO_LIMIT = 4_000_000  # distinct surface forms remembered before the memo is reset
_CHUNK = 1 << 16  # word vectors gathered at once while pooling
MAX_VALUE = 1e30  # a larger value's sums could overflow float32 (3.4e38)


class TokenVectors(NamedTuple):
    """One text's word units that have a vector, in text order: what ``encode`` averages."""

    units: list[str]  # the units as written (a CJK run split into its words)
    rows: np.ndarray  # int64 [n]: each unit's vocabulary row (``model.words[row]``)
    vectors: np.ndarray  # float32 [n, d]: the rows' vectors, not normalised


class _Memo(dict):
    """Surface form → resolution code; computes and stores misses on first sight."""

    def __init__(self, model: StaticModel) -> None:
        super().__init__(model._base_codes)
        self._model = model

    def reset_if_full(self) -> None:
        """Forget learned surface forms once there are too many (between batches only, so no
        batch holds codes that point into a cleared table)."""
        if len(self) > _MEMO_LIMIT:
            self.clear()
            self.update(self._model._base_codes)
            self._model._multi.clear()

    def __missing__(self, unit: str) -> int:
        code = self._model._resolve(unit)
        self[unit] = code
        return code


class StaticModel:
    """Static word vectors plus the rule that turns text into a sentence vector.

    Build one with :meth:`from_vectors` or :meth:`load`; encode with :meth:`encode`.
    """

    #: A text longer than this many characters is encoded in pieces of this size (cut at
    #: whitespace), so its peak memory is that of one piece (docs/reliability.md).
    text_piece: int = 1 << 20

    def __init__(
        self,
        words: Sequence[str],
        vectors: np.ndarray,
        *,
        tokenizer: Any = None,
        lowercase: bool = True,
        languages: Sequence[str] = ("en",),
        provenance: dict[str, Any] | None = None,
        oov: str = "subword",
    ) -> None:
        if oov not in OOV_RULES:
            raise ValueError(f"oov must be one of {OOV_RULES}, got {oov!r}")
        words = list(words)
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise ValueError(
                f"vectors must be a [len(words), d] matrix; got shape {vectors.shape} "
                f"for {len(words)} words"
            )
        if vectors.shape[0] == 0 or vectors.shape[1] == 0:
            raise ValueError("a StaticModel needs at least one word and one dimension")
        if not np.issubdtype(vectors.dtype, np.floating):
            raise ValueError(f"vectors must be floating point, got {vectors.dtype}")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise ValueError(f"vector of {words[bad]!r} (row {bad}) is not finite")
        if vectors.size and float(np.abs(vectors).max()) > MAX_VALUE:
            bad = int(np.abs(vectors).max(axis=1).argmax())
            raise ValueError(f"vector of {words[bad]!r} (row {bad}) holds a value above "
                             f"{MAX_VALUE:.0e}: sums of such vectors overflow float32; divide the "
                             "matrix by a constant (a sentence vector is normalised: its "
                             "direction does not change)")
        index, punctuation = word_index(words)
        self.languages = [language(c).code for c in languages]
        self.words = words
        self.vectors = vectors
        self.lowercase = bool(lowercase)
        self.oov = oov
        self.tokenizer = storage.load_tokenizer(tokenizer) if tokenizer is not None else None
        self._unk = unk_token(self.tokenizer)
        self.provenance = dict(provenance or {})
        self._index = index
        self._base_codes = {**index, **dict.fromkeys(punctuation, _SKIP)}
        self._multi: list[np.ndarray] = []  # id lists of units that map to several entries
        self._multi_lock = threading.Lock()
        self._memo = _Memo(self)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_vectors(cls, words: Sequence[str], vectors: np.ndarray, *,
                     language: str | Sequence[str] = "en", **options: Any) -> StaticModel:
        """A model from a word list and a ``[len(words), d]`` matrix.

        ``options`` are the constructor's: ``tokenizer`` (teacher model dir, tokenizer.json, or
        ``tokenizers.Tokenizer``) is used only for the out-of-vocabulary rule and to split
        Chinese/Japanese; ``lowercase`` enables the lowercased second lookup; ``oov`` picks the
        out-of-vocabulary rule (:data:`OOV_RULES`); ``provenance``.
        """
        langs = [language] if isinstance(language, str) else list(language)
        return cls(words, vectors, languages=langs, **options)

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.words)

    def __repr__(self) -> str:
        return (f"StaticModel(vocab={len(self)}, dim={self.dim}, languages={self.languages}, "
                f"lowercase={self.lowercase}, oov={self.oov!r}, "
                f"oov_tokenizer={self.tokenizer is not None})")

    # -- the inference rule -------------------------------------------------------------------

    def _lookup(self, unit: str) -> int:
        """Exact, then lowercased, then a Cyrillic unit in the Latin spelling of the model's
        two-script languages (``swe.transliteration``), then the OOV rule; ``_SKIP`` if none
        match."""
        if is_punctuation(unit):
            return _SKIP
        i = self._find(unit)
        for form in latin_forms(unit, self.languages) if i is None else ():
            if (i := self._find(form)) is not None:
                break
        if i is None and self.tokenizer is not None:
            i = self._oov(unit)
        if i is None and self.oov == "prefix":
            i = self._prefix(unit)
        return _SKIP if i is None or self._base_codes[self.words[i]] == _SKIP else i

    def _oov(self, unit: str) -> int | None:
        enc = self.tokenizer.encode(unit, add_special_tokens=False)
        subwords = [strip_marker(t) for t in enc.tokens if t != self._unk]
        for n in range(len(subwords), 0, -1):
            i = self._find("".join(subwords[:n]))
            if i is not None:
                return i
        return None

    def _prefix(self, unit: str) -> int | None:
        """The longest vocabulary word (as is, then lowercased) that is a proper prefix of
        ``unit`` and at least :data:`PREFIX_MIN` characters long."""
        for n in range(len(unit) - 1, PREFIX_MIN - 1, -1):
            i = self._find(unit[:n])
            if i is not None:
                return i
        return None

    def _find(self, form: str) -> int | None:
        """The row of ``form`` as is, then lowercased (if the model lowercases)."""
        i = self._index.get(form)
        if i is None and self.lowercase:
            i = self._index.get(form.lower())
        return i

    def _resolve(self, unit: str) -> int:
        """Resolution code of a surface form: an id, ``_SKIP``, or ``-2 - k`` for ``_multi[k]``."""
        if not has_unspaced_script(unit):
            return self._lookup(unit)
        units = split_unspaced(unit, self.tokenizer, self._unk)
        ids = [i for i in map(self._lookup, units) if i >= 0]
        if len(ids) <= 1:
            return ids[0] if ids else _SKIP
        with self._multi_lock:
            self._multi.append(np.asarray(ids, dtype=np.int64))
            return -1 - len(self._multi)

    def tokenize(self, text: str) -> list[tuple[str, str | None]]:
        """The units of ``text`` and the vocabulary entry each one used (``None``: skipped).

        Punctuation is left out; an OOV fallback shows as e.g. ``("tokeniser", "tokenise")``.
        """
        _check_text(text, 0)
        out: list[tuple[str, str | None]] = []
        for w in words(text):
            if is_punctuation(w):
                continue
            units = split_unspaced(w, self.tokenizer, self._unk) if has_unspaced_script(w) else [w]
            for u in units:
                if not is_punctuation(u):
                    i = self._lookup(u)
                    out.append((u, self.words[i] if i >= 0 else None))
        return out

    def _units(self, text: str) -> list[tuple[str, int]]:
        """The units of ``text`` that have a vector, each with its row (what encode pools)."""
        out: list[tuple[str, int]] = []
        for w in words(text):
            if has_unspaced_script(w):
                out.extend((u, i) for u in split_unspaced(w, self.tokenizer, self._unk)
                           if (i := self._lookup(u)) >= 0)
            elif (i := self._memo[w]) >= 0:
                out.append((w, i))
        return out

    # -- encoding -----------------------------------------------------------------------------

    def encode(self, texts: str | Iterable[str | None], batch_size: int = 1024,
               normalize: bool = True) -> np.ndarray:
        """Embed texts: float32 ``[n, d]``, L2-normalised rows, zero rows for texts with no known
        word (empty, whitespace, punctuation or emoji only, ``None``).

        A single ``str`` gives a ``[d]`` vector. Non-string items raise ``TypeError`` naming the
        index; ``batch_size`` bounds the texts pooled at once. ``normalize=False`` returns the
        plain mean of the word vectors (what sentence-level PCA is fitted on).
        """
        if isinstance(texts, str):
            return self.encode([texts], batch_size, normalize)[0]
        texts = _as_list(texts)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            out[start : start + len(batch)] = self._encode_batch(batch, start, normalize)
        return out

    def encode_tokens(self, texts: str | Iterable[str | None]
                      ) -> TokenVectors | list[TokenVectors]:
        """Per text, its word units that have a vector and those vectors (:class:`TokenVectors`),
        by the same units and OOV rule as :meth:`encode`: the L2-normalised mean of a text's
        ``vectors`` is its ``encode`` row. Punctuation and units no rule matches are left out
        (:meth:`tokenize` shows them). A single ``str`` gives one :class:`TokenVectors`."""
        if isinstance(texts, str):
            return self.encode_tokens([texts])[0]
        out: list[TokenVectors] = []
        for j, text in enumerate(_as_list(texts)):
            if j % 1024 == 0:
                self._memo.reset_if_full()
            _check_text("" if text is None else text, j)
            pairs = self._units(text) if text else []
            rows = np.fromiter((i for _, i in pairs), dtype=np.int64, count=len(pairs))
            out.append(TokenVectors([u for u, _ in pairs], rows, self.vectors[rows]))
        return out

    def word_ids(self, texts: Iterable[str | None]) -> list[np.ndarray]:
        """Per text, the vocabulary rows its sentence vector averages (repeats kept, skipped
        units left out): what training pools over."""
        texts = _as_list(texts)
        out: list[np.ndarray] = []
        for start in range(0, len(texts), 1024):
            ids, lengths = self._batch_ids(texts[start:start + 1024], start)
            out.extend(np.split(ids, np.cumsum(lengths)[:-1]))
        return out

    def _batch_ids(self, batch: list, offset: int) -> tuple[np.ndarray, np.ndarray]:
        """Flat vocabulary ids of a batch and the number per text."""
        self._memo.reset_if_full()
        get = self._memo.__getitem__
        flat: list[int] = []
        counts = np.zeros(len(batch), dtype=np.int64)
        for j, text in enumerate(batch):
            if text is None:
                continue
            if type(text) is not str:
                _check_text(text, offset + j)
            codes = list(map(get, words(text)))
            counts[j] = len(codes)
            flat.extend(codes)
        ids = np.fromiter(flat, dtype=np.int64, count=len(flat))
        if ids.size and ids.min() < _SKIP:
            ids, counts = self._expand_multi(ids, counts)
        seg = np.repeat(np.arange(len(batch)), counts)
        valid = ids >= 0
        return ids[valid], np.bincount(seg[valid], minlength=len(batch))

    def _encode_batch(self, batch: list, offset: int, normalize: bool = True) -> np.ndarray:
        long = {j: t for j, t in enumerate(batch) if type(t) is str and len(t) > self.text_piece}
        if long:
            batch = [None if j in long else t for j, t in enumerate(batch)]
        ids, lengths = self._batch_ids(batch, offset)
        sums = self._segment_sums(ids, lengths)
        for j, text in long.items():
            sums[j], lengths[j] = self._long_text_sum(text)
        if not normalize:
            np.divide(sums, np.maximum(lengths, 1)[:, None], out=sums)
            return sums
        with np.errstate(over="ignore", under="ignore"):  # such rows are mended below
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
        lost, zero = ~np.isfinite(norms[:, 0]), norms[:, 0] == 0
        if zero.any():  # rows of no known word are zero; any other zero norm underflowed
            lost[zero] = sums[zero].any(axis=1)
        if lost.any():  # the squares overflowed or underflowed float32: scale the rows first
            rows = sums[lost] / np.abs(sums[lost]).max(axis=1, keepdims=True)
            sums[lost], norms[lost] = rows, np.linalg.norm(rows, axis=1, keepdims=True)
        np.divide(sums, norms, out=sums, where=norms > 0)
        return sums

    def _long_text_sum(self, text: str) -> tuple[np.ndarray, int]:
        """Sum and count of a huge text's word vectors, streamed a piece of at most
        ``text_piece`` characters at a time (cut at ASCII whitespace, which no word spans), so
        memory follows the piece, not the text."""
        total = np.zeros(self.dim, dtype=np.float64)
        count = 0
        start, end_of_text, piece = 0, len(text), max(1, int(self.text_piece))
        while start < end_of_text:
            end = min(start + piece, end_of_text)
            if end < end_of_text:
                cut = max(text.rfind(c, start, end) for c in " \n\t\r")
                end = cut + 1 if cut > start else end
            ids, lengths = self._batch_ids([text[start:end]], 0)
            if ids.size:
                total += self._segment_sums(ids, lengths)[0]
                count += int(lengths[0])
            start = end
        return total.astype(np.float32), count

    def _expand_multi(self, ids: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Replace multi-entry codes by their id lists (rare: CJK runs)."""
        parts = [self._multi[-2 - c] if c < _SKIP else np.array([c]) for c in ids.tolist()]
        sizes = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        seg = np.repeat(np.arange(len(counts)), counts)
        new_counts = np.bincount(seg, weights=sizes, minlength=len(counts)).astype(np.int64)
        return np.concatenate(parts), new_counts

    def _segment_sums(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Per-text sums of ``vectors[ids]`` (consecutive segments of ``lengths`` ids).

        A small gather per text beats one big gather + ``np.add.reduceat`` by ~7x here: the
        rows stay in cache and no batch-sized temporary is allocated. Huge texts are summed in
        chunks of ``_CHUNK`` rows so memory stays bounded.
        """
        out = np.zeros((len(lengths), self.dim), dtype=np.float32)
        vectors = self.vectors
        ends = np.cumsum(lengths).tolist()
        a = 0
        for j, b in enumerate(ends):
            if b - a > _CHUNK:  # float64 so 10^5+ rows do not lose precision
                out[j] = sum(vectors[ids[k : min(k + _CHUNK, b)]].sum(axis=0, dtype=np.float64)
                             for k in range(a, b, _CHUNK))
            elif b > a:
                vectors[ids[a:b]].sum(axis=0, out=out[j])
            a = b
        return out

    # -- persistence (swe.model_io) -----------------------------------------------------------

    def save(self, path: str | os.PathLike, dtype: str = "float32", scale: str = "row") -> None:
        """Write ``model.safetensors``, ``vocab.txt`` (and ``tokenizer.json``), then
        ``config.json`` with their checksums, to a local dir or ``s3://`` prefix; an interrupted
        save leaves a folder that refuses to load.

        ``dtype``: ``float32``; ``float16`` (half the size); ``int8`` (a quarter: symmetric,
        with ``scale="row"`` one float32 scale per word or ``"global"`` one for the matrix, see
        :func:`quantize_int8`). :meth:`load` turns every dtype back into float32."""
        model_io.save(self, path, dtype, scale)

    @classmethod
    def load(cls, path: str | os.PathLike, dim: int | None = None) -> StaticModel:
        """Load a model saved by :meth:`save` from a local dir or ``s3://`` prefix, checking
        every file against the sizes and checksums in its ``config.json``.

        ``dim=k`` keeps the first ``k`` dimensions: for a model after PCA (step 2 and 3) these
        are the leading principal components (cost per ``k``: docs/export.md)."""
        folder, parts = model_io.load_parts(path, dim)
        try:
            return cls(**parts)
        except ValueError as e:
            raise ModelFileError(f"{folder}: {e}") from None


def _check_text(text: Any, index: int) -> None:
    if isinstance(text, str):
        return
    hint = " (decode bytes first, e.g. b.decode('utf-8', errors='replace'))" if isinstance(
        text, bytes | bytearray) else ""
    raise TypeError(f"texts[{index}] is {type(text).__name__}, expected str or None{hint}")


def _as_list(texts: Any) -> list:
    if texts is None:
        raise TypeError("texts must be a str or an iterable of str, got None")
    if isinstance(texts, bytes | bytearray):
        raise TypeError("texts is bytes; decode it first, e.g. b.decode('utf-8')")
    if isinstance(texts, list):
        return texts
    if getattr(texts, "ndim", None) == 0:  # numpy's 0-d array: iterating it is a bare TypeError
        raise TypeError("texts is a 0-d array: pass texts.item() for one text, or a 1-d array")
    if isinstance(texts, Path) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a str or an iterable of str, got {type(texts).__name__}")
    return list(texts)
