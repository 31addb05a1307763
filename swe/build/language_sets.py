"""Many languages in one config: languages read from a table, and template tables.

A config for 70 languages does not copy 70 ``[corpus.<lang>]`` tables by hand:

* ``languages_file`` names a TSV with a ``code`` column (e.g. NTREX-128's ``languages.tsv``);
  its codes join ``languages`` (after the ones listed there), keeping only the rows whose
  ``languages_with`` column is not empty when that key is set (``"tatoeba"``: the languages
  with a Tatoeba test set).
* ``[corpus."*"]`` is the table of every language without one of its own; ``{lang}`` in its
  strings becomes the language's code.
* ``[pairs."en-*"]`` is the table of every pair ``en-<lang>`` (each other language) without one
  of its own, ``{lang}`` likewise.

:func:`expand` rewrites the raw TOML data this way before the config is read, so everything
after it (validation, hashing, the stages) sees ordinary tables.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from swe import storage

__all__ = ["expand"]

WILDCARD = "*"


def expand(raw: dict[str, Any], errors: list[str]) -> None:
    """Apply ``languages_file`` and the ``*`` templates to ``raw`` in place; problems are
    appended to ``errors``."""
    if raw.get("languages_file") and isinstance(raw["languages_file"], str) \
            and isinstance(raw.get("languages_with", ""), str) \
            and isinstance(raw.get("languages", []), list):  # else: the keys' own type errors
        _add_languages(raw, errors)
    languages = raw.get("languages") if isinstance(raw.get("languages"), list) else ["en"]
    languages = [lang for lang in languages if isinstance(lang, str)]
    corpus = raw.get("corpus")
    if isinstance(corpus, dict) and WILDCARD in corpus:
        template = corpus.pop(WILDCARD)
        for lang in languages:
            corpus.setdefault(lang, _fill(template, lang))
    pairs = raw.get("pairs")
    if isinstance(pairs, dict):
        for key in [k for k in pairs if k.endswith(f"-{WILDCARD}")]:
            template, src = pairs.pop(key), key[: -len(WILDCARD) - 1]
            for lang in languages:
                if lang != src:
                    pairs.setdefault(f"{src}-{lang}", _fill(template, lang))


def _add_languages(raw: dict[str, Any], errors: list[str]) -> None:
    path, column = raw["languages_file"], raw.get("languages_with", "")
    try:
        text = storage.read_text(storage.data_path(path))
    except (OSError, ValueError) as e:
        errors.append(f"languages_file = {path!r}: cannot read it ({e})")
        return
    rows = list(csv.DictReader(io.StringIO(text), delimiter="\t"))
    if not rows or "code" not in rows[0]:
        errors.append(f"languages_file = {path!r}: a TSV with a header holding a 'code' column "
                      "is expected")
        return
    if column and column not in rows[0]:
        errors.append(f"languages_with = {column!r} is not a column of {path} (it has "
                      f"{', '.join(rows[0])})")
        return
    listed = list(raw.get("languages") or [])
    raw["languages"] = listed + [r["code"] for r in rows
                                 if (not column or r[column].strip()) and r["code"] not in listed]


def _fill(value: Any, lang: str) -> Any:
    """``value`` with ``{lang}`` replaced by ``lang`` in every string (lists and tables too)."""
    if isinstance(value, str):
        return value.replace("{lang}", lang)
    if isinstance(value, list):
        return [_fill(v, lang) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, lang) for k, v in value.items()}
    return value
