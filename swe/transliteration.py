"""Cyrillic written where a vocabulary is Latin: Serbian and Uzbek are written in both scripts
(Tatoeba's Serbian and Uzbek are a third Cyrillic), while their build text (NTREX ``srp-Latn``,
``uzb``) is Latin. At lookup, a Cyrillic unit that is not in the vocabulary is read again in
the Latin spelling of each such language the model holds (Serbian's exact one-to-one letters;
Uzbek's official 1995 alphabet, apostrophes as ASCII ``'``). No torch, no Ray."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["TABLES", "latin_forms"]

_SERBIAN = {"а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "ђ": "đ", "е": "e", "ж": "ž",
            "з": "z", "и": "i", "ј": "j", "к": "k", "л": "l", "љ": "lj", "м": "m", "н": "n",
            "њ": "nj", "о": "o", "п": "p", "р": "r", "с": "s", "т": "t", "ћ": "ć", "у": "u",
            "ф": "f", "х": "h", "ц": "c", "ч": "č", "џ": "dž", "ш": "š"}
_UZBEK = {"а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "е": "e", "ё": "yo", "ж": "j",
          "з": "z", "и": "i", "й": "y", "к": "k", "л": "l", "м": "m", "н": "n", "о": "o",
          "п": "p", "р": "r", "с": "s", "т": "t", "у": "u", "ф": "f", "х": "x", "ц": "ts",
          "ч": "ch", "ш": "sh", "ъ": "'", "ь": "", "э": "e", "ю": "yu", "я": "ya", "ў": "o'",
          "қ": "q", "ғ": "g'", "ҳ": "h"}

#: Per language code: the ``str.translate`` table from its Cyrillic to its Latin spelling
#: (lowercase letters; units are lowercased first).
TABLES = {"srp-Latn": str.maketrans(_SERBIAN), "uzb": str.maketrans(_UZBEK)}


def latin_forms(unit: str, languages: Sequence[str]) -> list[str]:
    """The Latin spellings of a unit holding Cyrillic, one per language of ``languages`` whose
    table spells every letter (in their order, without repeats); ``[]`` for a unit without
    Cyrillic."""
    lower = unit.lower()
    if not _has_cyrillic(lower):
        return []
    out: list[str] = []
    for code in languages:
        form = lower.translate(TABLES[code]) if code in TABLES else lower
        if not _has_cyrillic(form) and form not in out:  # a letter of another alphabet: none
            out.append(form)
    return out


def _has_cyrillic(text: str) -> bool:
    return any("\u0400" <= ch <= "\u04ff" for ch in text)
