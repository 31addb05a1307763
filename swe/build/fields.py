"""Config field declarations and the checks read from them, below every stage: a stage's
section declares its keys with :func:`dataclasses.field` metadata, validation reads it through
:func:`field_problem`, and :func:`check_readable` checks input paths."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from swe import inputs, storage

__all__ = ["TYPES", "check_readable", "choices_text", "declared_type", "field_problem", "rules"]


def check_readable(paths: list[str], where: str, errors: list[str]) -> None:
    """Append an error for each path (or glob) that cannot be listed or matches nothing."""
    for p in paths:
        if not p.strip() or "\0" in p:
            errors.append(f"{where}: {p!r} is not a path (empty, or holding a NUL byte)")
            continue
        try:
            inputs.expand_inputs([p])
        except ValueError as e:  # a named pipe or a device: reading it would block
            errors.append(f"{where}: {e}")
        except OSError as e:
            missing = _missing_bucket(p) if isinstance(e, FileNotFoundError) else ""
            errors.append(f"{where}: cannot read {p}: {e}{missing}; {storage.access_hint(p)}")


def _missing_bucket(url: str) -> str:
    """" (bucket B does not exist)" when ``url`` is on an object store whose bucket is absent."""
    if storage.is_local(url):
        return ""
    fs, path = storage.filesystem(url)
    bucket = path.split("/", 1)[0]
    try:
        return "" if fs.exists(bucket) else f" (bucket {bucket!r} does not exist)"
    except OSError:
        return ""


# -- field declarations: each field's type, range and meaning, declared once ------------------
#
# A config field declares itself with ``field(default=..., metadata={...})``: ``help`` (its
# meaning), and optionally ``min``/``max`` (inclusive), ``gt`` (exclusive lower bound),
# ``choices`` (a tuple, or a dict of choice -> meaning), ``nonempty`` (str or list; a blank
# str is empty), ``infinite`` (a float that may be ±inf) and ``resource`` (a Ray resource
# share: 0, or at least Ray's smallest unit, 0.0001). Its
# type is its annotation. :func:`field_problem` (validation) and :func:`describe` (``python -m
# swe.build.config``, docs/reliability.md) both read these declarations.

TYPES = {"int": int, "float": float, "bool": bool, "str": str, "list[str]": list}


def declared_type(f: dataclasses.Field) -> str:
    """The field's annotation as written (``int``, ``float``, ``list[str]`` ...)."""
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


FLOAT32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max
FLOAT32_TINY = 1.1754943508222875e-38  # its smallest normal number


def _type_problem(kind: str, value: Any) -> str | None:
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "should be float"
        return None if math.isfinite(value) else "should be a finite number"
    if kind == "int" and isinstance(value, float):
        return "should be int (a whole number, written without a decimal point)"
    if kind == "int" and isinstance(value, int) and not -(2**63) <= value < 2**63:
        return "should fit in 64 bits"
    if isinstance(value, bool) != (kind == "bool") or not isinstance(value, TYPES[kind]):
        return "should be a list of str" if kind == "list[str]" else f"should be {kind}"
    if kind == "list[str]":
        bad = [i for i, v in enumerate(value) if not isinstance(v, str)]
        if bad:
            return f"should be a list of str (item {bad[0]} is {type(value[bad[0]]).__name__})"
    return None


def rules(meta: Mapping[str, Any]) -> list[str]:
    """The declared constraints in words: ``>= 1``, ``> 0``, ``<= 511``."""
    return ([f">= {meta['min']}"] if "min" in meta else []) + (
        [f"> {meta['gt']}"] if "gt" in meta else []) + (
        [f"<= {meta['max']}"] if "max" in meta else []) + (
        [f"0 or >= {RAY_UNIT}"] if meta.get("resource") else [])


#: Ray's smallest share of a resource (``num_cpus=0.00001`` is refused by Ray).
RAY_UNIT = 0.0001


def choices_text(choices: Any) -> str:
    """``a, b or c``, or ``'a' (meaning) or 'b' (meaning)`` for a dict of choices."""
    items = ([f"{k!r} ({v})" for k, v in choices.items()] if isinstance(choices, dict)
             else [str(c) for c in choices])
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def field_problem(f: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with ``value`` for the declared field ``f`` (``None``: nothing)."""
    kind = declared_type(f)
    if kind not in TYPES:
        return None  # a section: checked by its own fields
    problem = _type_problem(kind, value)
    infinite = isinstance(value, float) and abs(value) == math.inf
    if problem and infinite and f.metadata.get("infinite"):
        problem = None  # a declared "no bound" (e.g. pairs.min_score = -inf)
    if problem:
        return problem
    meta = f.metadata
    if meta.get("nonempty") and (not value or (isinstance(value, str) and not value.strip())):
        return f"should not be empty ({meta.get('help', '')})"
    if "choices" in meta and value not in meta["choices"]:
        return f"; use {choices_text(meta['choices'])}"
    lo_ok = ("min" not in meta or value >= meta["min"]) and ("gt" not in meta or value > meta["gt"])
    share_ok = not meta.get("resource") or value == 0 or value >= RAY_UNIT
    if not lo_ok or not share_ok or ("max" in meta and value > meta["max"]):
        return f"should be {' and '.join(rules(meta))} ({meta.get('help', '')})"
    if kind == "float" and value != 0 and math.isfinite(value) and not (
            FLOAT32_TINY <= abs(value) <= FLOAT32_MAX):
        return (f"should be 0 or between {FLOAT32_TINY:.3g} and {FLOAT32_MAX:.3g} in size: the "
                "pipeline computes in float32, where it would be 0 or infinite")
    return None
