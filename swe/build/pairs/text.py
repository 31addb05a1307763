"""Text-level facts of translation-pair files and the pair key: what counts as whitespace, a
byte-order mark, a score, a corrupt compressed stream; :func:`normalize` (strip, casefold,
one space) and :func:`pair_hash`, the stable 64-bit key of a pair that drives the build's
global dedup and (through ``swe.build.shuffle.shuffle_key``) its reproducible random order.
No Ray, no torch.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import lzma
import zipfile
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["BOM", "CORRUPT", "FLOAT_SYNTAX", "WHITESPACE", "normalize", "pair_hash"]

# Python's str.isspace() characters: what str.strip()/str.split() remove.
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
       "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WS_RUN = (r"[\t-\r\x1c-\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
           r"\x{205f}\x{3000}]+")
_WS_ODD = (r"[\t-\r\x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
           r"\x{205f}\x{3000}]|  ")  # whitespace that is not a lone space
FLOAT_SYNTAX = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
BOM = b"\xef\xbb\xbf"
# What a truncated or corrupt compressed stream (or zip member: bad CRC) raises while read.
CORRUPT = (EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile, zipfile.BadZipFile)


@functools.cache
def _fold_fixups() -> str:
    """A regex class of the characters where Arrow's ``utf8_lower`` (then ß → ss) differs
    from Python's ``str.casefold`` (ſ, ς, µ, ligatures, Cherokee ...), computed once per
    process (no character above U+1FFFF has a case)."""
    chars = [chr(c) for c in range(1, 0x20000) if not 0xD800 <= c < 0xE000]
    joined = "\0".join(chars)
    folded = joined.casefold().split("\0")
    lowered = _lower(pa.array([joined]))[0].as_py().split("\0")
    special = [ord(c) for c, f, lo in zip(chars, folded, lowered, strict=True) if f != lo]
    runs: list[list[int]] = []
    for c in special:
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return "[" + "".join(rf"\x{{{a:x}}}" + (rf"-\x{{{b:x}}}" if b > a else "")
                         for a, b in runs) + "]"


def _lower(texts: pa.Array) -> pa.Array:
    """Arrow's lowercase with ß as ss: casefolding for all but :func:`_fold_fixups`."""
    return pc.replace_substring(pc.utf8_lower(texts), "ß", "ss")


def _as_array(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One string array, nulls as ``""``."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if texts.type != pa.string():
        texts = texts.cast(pa.string())
    return pc.fill_null(texts, "")


def normalize(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each text stripped, casefolded, whitespace runs made one space: exactly
    ``" ".join(s.casefold().split())`` in Python, vectorised."""
    texts = _as_array(texts)
    out = _lower(pc.utf8_trim(texts, WHITESPACE))
    odd = pc.match_substring_regex(out, _WS_ODD)
    if odd.true_count:
        runs = pc.replace_substring_regex(out.filter(odd), _WS_RUN, " ")
        out = pc.replace_with_mask(out, odd, runs)
    special = pc.match_substring_regex(texts, _fold_fixups())
    if special.true_count:
        fixed = [" ".join(s.casefold().split()) for s in texts.filter(special).to_pylist()]
        out = pc.replace_with_mask(out, special, pa.array(fixed, pa.string()))
    return out


def pair_hash(src: pa.Array | pa.ChunkedArray, tgt: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A stable 64-bit hash (uint64) of each (normalised src, normalised tgt): BLAKE2b of
    ``src + TAB + tgt`` (normalised text has no tab), the same in every process and run."""
    joined = pc.binary_join_element_wise(normalize(src), normalize(tgt), "\t")
    blake = hashlib.blake2b
    digests = b"".join([blake(v, digest_size=8, person=b"swe-pair").digest()
                        for v in joined.cast(pa.binary()).to_pylist()])
    return np.frombuffer(digests, "<u8").astype(np.uint64)


def sentence_share(texts: pa.Array | pa.ChunkedArray, seed: int) -> np.ndarray:
    """A seeded, uniform number in ``[0, 1)`` for each normalised text: the same sentence gets
    the same number in every file, language pair and process (BLAKE2b of seed and text)."""
    blake = hashlib.blake2b
    key = str(seed).encode()
    digests = b"".join([blake(v, digest_size=8, key=key, person=b"swe-dev").digest()
                        for v in normalize(texts).cast(pa.binary()).to_pylist()])
    return np.frombuffer(digests, "<u8").astype(np.float64) / 2.0**64
