"""Text units shared by extraction and inference, so both split text identically.

* Sentences: BlingFire, one line at a time (BlingFire treats newlines as spaces).
* Words: BlingFire word units with character offsets. Runs of Chinese/Japanese script are not
  space-delimited, so inside a word they are split further into the teacher's tokens
  (``##``/``▁`` markers stripped), or into single characters when no tokenizer is given.
* Punctuation: a unit made only of Unicode punctuation or symbol characters (this includes
  emoji); such units are never looked up.
* Case policy: per language, how the build's vocabulary is cased (English lowercased, German
  cased, Chinese/Japanese teacher tokens).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import threading
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import blingfire

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "INVISIBLE",
    "LANGUAGES",
    "Language",
    "clean",
    "has_unspaced_script",
    "is_punctuation",
    "language",
    "split_sentences",
    "split_unspaced",
    "strip_marker",
    "unit_keys",
    "units",
    "unk_token",
    "word_index",
    "word_spans",
    "words",
]


@dataclass(frozen=True)
class Language:
    """How a language's vocabulary is built: its case policy and unit of segmentation (words,
    or teacher tokens for scripts written without spaces), and its Tatoeba test set's code."""

    code: str
    lowercase: bool
    teacher_tokens: bool = False
    name: str = ""
    tatoeba: str = ""


#: Where the table of languages lives: ISO 639-1 codes (``en``, ``de``, ``zh`` …) and NTREX-128's
#: codes (ISO 639-3, some with a script or region: ``deu``, ``zho-CN``, ``srp-Latn``), each
#: with its name, Tatoeba code, case policy and segmentation (``words`` or ``teacher-tokens``).
LANGUAGES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                              "languages.tsv")


def _read_languages(path: str = LANGUAGES_FILE) -> dict[str, Language]:
    with open(path, encoding="utf-8") as f:
        header, *rows = (line.rstrip("\n").split("\t") for line in f if line.strip())
    table = {}
    for row in rows:
        r = dict(zip(header, row, strict=True))
        table[r["code"]] = Language(r["code"], r["lowercase"] == "yes",
                                    r["segmentation"] == "teacher-tokens", r["name"],
                                    r["tatoeba"])
    return table


LANGUAGES: dict[str, Language] = _read_languages()


def language(code: str) -> Language:
    """The :class:`Language` for a code of :data:`LANGUAGES`; a clear ``ValueError`` for an
    unknown code (a language without a declared case and segmentation policy)."""
    try:
        return LANGUAGES[code]
    except (KeyError, TypeError):
        raise ValueError(f"unknown language {code!r}: no case and segmentation policy is "
                         f"declared for it in {LANGUAGES_FILE}; known: "
                         f"{', '.join(sorted(LANGUAGES))}") from None


_SURROGATES = re.compile("[\ud800-\udfff]")
# Invisible inside a word, and dropped by the teachers' normalisers (BERT's removes every format
# and unassigned character, and uncased ones every mark): Unicode's Default_Ignorable_Code_Point
# set (soft hyphen, zero-width space, direction marks, embeddings, overrides and isolates, word
# joiner, invisible operators, byte-order mark, combining grapheme joiner, Khmer inherent vowels,
# Mongolian free variation selectors, Hangul fillers, tags, ...) and the other Cf characters of
# Unicode 14 (interlinear annotation, prepended concatenation marks). The splitter broke a word at
# most of them (fir\u00adst -> fir, st). Kept: zero-width (non-)joiners U+200C/U+200D, which carry
# meaning in Persian, Indic scripts and emoji, and the variation selectors U+FE00-FE0F and
# U+E0100-E01EF (emoji presentation), which the splitter keeps inside the word.
INVISIBLE = ("[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
             "\u17b4\u17b5\u180b-\u180f\u200b\u200e\u200f\u202a-\u202e\u2060-\u206f\u3164"
             "\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
             "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e00ff"
             "\U000e01f0-\U000e0fff]")  # the export's normaliser too
_INVISIBLE = re.compile(INVISIBLE)


def clean(text: str) -> str:
    """Make any ``str`` safe for the C splitters, keeping its length (spans index it): lone
    surrogates become U+FFFD, NUL a space."""
    if "\x00" in text:
        text = text.replace("\x00", " ")
    if _SURROGATES.search(text):
        text = _SURROGATES.sub("\ufffd", text)
    return text


SPLIT_PIECE = 65_536  # characters handed to the sentence splitter at once (see split_sentences)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, line by line; blank lines and surrounding space dropped.

    A line longer than :data:`SPLIT_PIECE` characters is split a piece at a time, cut at
    whitespace (a sentence across a cut becomes two), so memory stays bounded on a 50 MB line.
    """
    out: list[str] = []
    for line in clean(text).splitlines():
        for piece in split_pieces(line.strip(), SPLIT_PIECE):
            out.extend(s for s in blingfire.text_to_sentences(piece).split("\n") if s.strip())
    return out


def split_pieces(line: str, size: int) -> list[str]:
    """``line`` cut into pieces of about ``size`` characters at whitespace (a piece without any
    is cut at ``size``); empty pieces left out."""
    pieces, start = [], 0
    while len(line) - start > size:
        cut = line.rfind(" ", start + size // 2, start + size)
        cut = start + size if cut < 0 else cut
        pieces.append(line[start:cut])
        start = cut
    pieces.append(line[start:])
    return [p for p in (p.strip() for p in pieces) if p]


_text_to_words = blingfire.blingfire.TextToWords  # the C function behind text_to_words
_buffers = threading.local()


def _bf_words(data: bytes) -> str:
    """``blingfire.text_to_words`` on UTF-8 bytes, reusing a per-thread output buffer: the
    library's wrapper allocates a fresh buffer per call, which costs as much as the splitting."""
    need = len(data) * 3 + 1
    buf = getattr(_buffers, "buf", None)
    if buf is None or len(buf) < need:
        buf = _buffers.buf = ctypes.create_string_buffer(max(need, 1 << 16))
    n = _text_to_words(data, len(data), buf, len(buf))
    if n <= 0 or n > len(buf):
        return ""
    return ctypes.string_at(buf, n - 1).decode("utf-8")


def words(text: str) -> list[str]:
    """BlingFire word units of ``text`` (punctuation included; CJK runs not yet split).

    This is the inference hot path, so :func:`clean` runs only when it is needed.
    """
    if "\x00" in text:
        text = text.replace("\x00", " ")
    if not text.isascii():  # ASCII text (most of it) skips the search
        text = _INVISIBLE.sub("", text)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        data = clean(text).encode("utf-8")
    return _bf_words(data).split()


def word_spans(text: str) -> list[tuple[str, int, int]]:
    """Word units with character offsets ``(word, start, end)`` into ``text`` (the teacher's
    token offsets index the same text). The words are those of :func:`words`: a word an
    invisible character sat inside comes without it, its span covering it."""
    text = clean(text)
    if not _INVISIBLE.search(text):
        _, offsets = blingfire.text_to_words_with_offsets(text)
        return [(text[a:b], a, b) for a, b in offsets if b > a]
    keep = [i for i, c in enumerate(text) if not _INVISIBLE.match(c)]
    shown = "".join(text[i] for i in keep)
    _, offsets = blingfire.text_to_words_with_offsets(shown)
    return [(shown[a:b], keep[a], keep[b - 1] + 1) for a, b in offsets if b > a]


# Han, Hiragana, Katakana (incl. halfwidth), CJK symbols and compatibility ideographs.
# Scripts written without spaces between words: Thai, Lao, Tibetan, Myanmar, Khmer, Japanese
# kana, Chinese characters. A word holding one is split into teacher tokens.
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\u19e0-\u19ff"
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0002ffff]"
)


def has_unspaced_script(word: str) -> bool:
    """True when ``word`` holds a script written without spaces (Chinese, Japanese, Thai, Lao,
    Khmer, Myanmar, Tibetan): such a word is split into teacher tokens."""
    return _UNSPACED.search(word) is not None


_MARKERS = ("##", "▁", "Ġ")


def strip_marker(token: str) -> str:
    """A subword without its continuation/word-start marker (``##ing`` → ``ing``)."""
    for m in _MARKERS:
        if token.startswith(m):
            return token[len(m):]
    return token


def split_unspaced(word: str, tokenizer: Tokenizer | None, unk: str | None = None) -> list[str]:
    """Split a word holding CJK script into teacher tokens (markers stripped, the unknown token
    ``unk`` dropped), or into characters when there is no tokenizer."""
    if tokenizer is None:
        return list(word)
    toks = tokenizer.encode(word, add_special_tokens=False).tokens
    return [t for t in (strip_marker(t) for t in toks if t != unk) if t]


@lru_cache(maxsize=1 << 16)
def _is_punct_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


@lru_cache(maxsize=1 << 20)
def is_punctuation(unit: str) -> bool:
    """True when every character is Unicode punctuation or a symbol (``.``, ``—``, ``$``, 😀)."""
    return all(_is_punct_char(c) for c in unit)


# A space other than the newline that joins the words: \s is what str.isspace() accepts (every
# code point checked); a newline inside a word shows in the count of newlines.
_INNER_SPACE = re.compile(r"[^\S\n]")
# Words (one per line) without a letter or digit: the only ones that can be punctuation, as no
# character str.isalnum() accepts is in a P or S category (every code point checked).
_NO_ALNUM_LINE = re.compile(r"^(?:[^\w\n]|_)+$", re.MULTILINE)


def word_index(words: list[str]) -> tuple[dict[str, int], list[str]]:
    """A vocabulary's row of each word, and its words that are punctuation; a ValueError names
    the first word (by row) that is not a non-empty string without spaces, or is repeated.

    The checks run in C over the joined words; the row-by-row loop runs only to name a fault."""
    index = dict(zip(words, range(len(words)), strict=True)) if set(map(type, words)) <= {str} \
        else {}
    lines = "\n".join(words) if len(index) == len(words) else ""  # distinct strings only
    if len(index) != len(words) or "" in index or lines.count("\n") != len(words) - 1 or \
            _INNER_SPACE.search(lines):
        index = {}
        for i, w in enumerate(words):
            if not isinstance(w, str) or not w or any(c.isspace() for c in w):
                raise ValueError(f"word {i} ({w!r}) must be a non-empty string without spaces")
            if index.setdefault(w, i) != i:
                raise ValueError(f"duplicate word {w!r} at rows {index[w]} and {i}")
        lines = "\n".join(words)  # valid after all (e.g. str subclasses)
    return index, [w for w in _NO_ALNUM_LINE.findall(lines) if is_punctuation(w)]


def units(text: str, lang: Language, tokenizer: Tokenizer | None = None,
          unk: str | None = None) -> list[tuple[str, int, int]]:
    """Vocabulary units of ``text`` with character spans ``(key, start, end)``.

    BlingFire words without punctuation; runs of CJK script split into teacher tokens (spans
    from the tokenizer's offsets); keys lowercased when the language's case policy says so. The
    vocabulary stage counts these keys and extraction aligns them to teacher tokens, so both see
    exactly the same units.
    """
    out: list[tuple[str, int, int]] = []
    for w, a, b in word_spans(text):
        if is_punctuation(w):
            continue
        if has_unspaced_script(w):
            if tokenizer is None:
                pieces = [(c, a + i, a + i + 1) for i, c in enumerate(w)]
            else:
                enc = tokenizer.encode(w, add_special_tokens=False)
                pieces = [(strip_marker(t), a + s, a + e) for t, (s, e) in
                          zip(enc.tokens, enc.offsets, strict=True) if t != unk]
            out.extend(p for p in pieces if p[0] and not is_punctuation(p[0]))
        else:
            out.append((w, a, b))
    if lang.lowercase:
        out = [(k.lower(), a, b) for k, a, b in out]
    return out


def unit_keys(text: str, lang: Language, tokenizer: Tokenizer | None = None,
              unk: str | None = None) -> list[str]:
    """The keys of :func:`units` without spans, on the fast word path (counting, selection)."""
    out: list[str] = []
    for w in words(text):
        if is_punctuation(w):
            continue
        if has_unspaced_script(w):
            out.extend(p for p in split_unspaced(w, tokenizer, unk) if not is_punctuation(p))
        else:
            out.append(w)
    return [k.lower() for k in out] if lang.lowercase else out


def unk_token(tokenizer: Any) -> str | None:
    """The tokenizer's unknown token (WordPiece ``unk_token``, Unigram ``unk_id``), if any."""
    if tokenizer is None:
        return None
    if getattr(tokenizer.model, "unk_token", None):  # WordPiece, BPE, WordLevel: no JSON
        return tokenizer.model.unk_token
    model = json.loads(tokenizer.to_str()).get("model", {})
    if model.get("unk_token"):
        return model["unk_token"]
    unk_id = model.get("unk_id")
    return tokenizer.id_to_token(unk_id) if unk_id is not None else None
