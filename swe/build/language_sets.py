"""Many languages in one config: languages read from a table, and template tables.

A config for 70 languages does not copy 70 ``[corpus.<lang>]`` tables by hand:

* ``languages_file`` names a TSV with a ``code`` column (e.g. NTREX-128's ``languages.tsv``);
  its codes join ``languages`` (after the ones listed there), keeping only the rows whose
  ``languages_with`` column is not empty when that key is set (``"tatoeba"``: the languages
  with a Tatoeba test set).
* ``[corpus."*"]`` is the table of every language without one of its own; ``{lang}`` in its
  strings becomes the language's code.
* ``[corpus."*"].paths_if_present`` and ``vocab.word_lists`` may name files by ``{lang}`` that
  only some languages have; every file such a template matches must name a known language
  (``xyz.txt.xz`` with an unknown ``xyz`` is an error, not a file silently never read).
* ``[pairs."en-*"]`` is the table of every pair ``en-<lang>`` (each other language) without one
  of its own, ``{lang}`` likewise.

:func:`expand` rewrites the raw TOML data this way before the config is read, so everything
after it (validation, hashing, the stages) sees ordinary tables.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from swe import inputs, storage

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
    for where, template in _code_templates(raw):
        errors.extend(unknown_codes(template, where))
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


def _code_templates(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``{lang}`` path templates of optional per-language files, with their keys."""
    out = []
    corpus, vocab = raw.get("corpus"), raw.get("vocab")
    if isinstance(corpus, dict) and isinstance(corpus.get(WILDCARD), dict):
        paths = corpus[WILDCARD].get("paths_if_present")
        out += [('corpus."*".paths_if_present', p) for p in paths or []
                if isinstance(paths, list) and isinstance(p, str)]
    if isinstance(vocab, dict) and isinstance(vocab.get("word_lists"), str):
        out.append(("vocab.word_lists", vocab["word_lists"]))
    return [(where, p) for where, p in out if "{lang}" in p]


def unknown_codes(template: str, where: str) -> list[str]:
    """An error for each file matching ``template`` (``{lang}`` as any code) whose code is not
    a language swe knows."""
    from swe.inputs import expand_inputs
    from swe.text import LANGUAGES

    head, _, tail = template.partition("{lang}")
    pattern = re.compile(re.escape(storage.data_path(head)) + "(.+)" + re.escape(tail) + "$")
    try:
        files = expand_inputs([head + "*" + tail])
    except (OSError, ValueError):
        return []  # nothing there: no language has such a file
    codes = [m.group(1) for f in files if (m := pattern.search(f))]
    return [f"{where} = {template!r}: {code!r} (in {head + code + tail}) is not a language "
            "swe knows (swe/data/languages.tsv): rename the file to its language's code, or "
            "add the language there" for code in codes if code not in LANGUAGES]


def _add_languages(raw: dict[str, Any], errors: list[str]) -> None:
    path, column = raw["languages_file"], raw.get("languages_with", "")
    try:
        if storage.is_local(storage.data_path(path)):  # a pipe or a device would never end
            inputs.check_regular_file(storage.data_path(path))
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
