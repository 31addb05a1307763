"""The stage contract: what a stage module provides (:class:`Stage`), its config table
(:class:`Section`) and its typed result (:class:`StageResult`), which also says how it reads in
the build's log (``LOG``). The runner (:mod:`swe.build.runner`) loops over stages through this
contract and names none of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from swe.resources import Request

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext
    from swe.build.markers import StageDir

__all__ = ["LogPhrases", "Section", "Stage", "StageResult", "describe"]

#: How a result's fields read in its log line, by field name: ``(phrase, unit of its rate)``, or
#: ``None`` for a field the log leaves out entirely (shard lists). The first field with a unit is
#: the result's main count (its rate is logged), else its first count; a field not listed reads
#: ``"<value> <name>"`` (``"<name> <value>"`` for a float). The phrase ``""`` leaves a field out
#: of the line but not of the debug summary. Rates (the log computes its own), zeros, lists,
#: strings and None are left out (``_DONE.json`` has everything).
LogPhrases = Mapping[str, "tuple[str, str | None] | None"]

_BASE = ("seconds", "warnings", "driver_peak_mib")


@dataclasses.dataclass(frozen=True)
class Section:
    """A stage's table in the build config: ``[name]`` read into ``cls`` (a dataclass whose
    fields declare their type, range and meaning), or, with ``keyed``, one ``[name.<key>]``
    table per key (``keyed`` is how the key reads in docs, ``example`` what a key names)."""

    name: str
    cls: type
    keyed: str = ""
    example: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageResult:
    """What every stage result records besides its own fields."""

    seconds: float = 0.0
    warnings: list[str] = dataclasses.field(default_factory=list)
    driver_peak_mib: int = 0  # the driver's peak RSS during the stage (Linux; 0 elsewhere)

    def to_json(self) -> dict[str, Any]:
        """The result as written to ``_DONE.json``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, stats: Mapping[str, Any]) -> StageResult | None:
        """The result read back from ``_DONE.json``; ``None`` if it does not fit this type."""
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in stats.items() if k in names})
        except TypeError:  # a marker written by an older layout: rerun the stage
            return None

    #: How this result's fields read in the log (see :data:`LogPhrases`); each stage's own.
    LOG: ClassVar[LogPhrases] = {}

    def summary(self) -> dict[str, Any]:
        """The result without seconds, warnings and the fields ``LOG`` leaves out, for logs."""
        return {k: v for k, v in self.to_json().items()
                if k not in _BASE and not (k in self.LOG and self.LOG[k] is None)}

    def describe(self) -> tuple[str, str | None, float]:
        """``(text, unit, count)`` for the log; see :func:`describe`."""
        return describe(self.summary(), self.LOG)

    def headline(self) -> str:
        """The result in a few words for the log: its main count, the other counts in
        parentheses (``58,574 sentences (1,426 dropped by length)``); see :func:`describe`."""
        return self.describe()[0]


class Stage(Protocol):
    """What a stage module provides."""

    NAME: str
    Result: type[StageResult]
    SECTION: Section | None  # its config table (None: the stage has no settings of its own)
    READS: tuple[str, ...]  # optional: the other stages' config sections it reads

    def validate(self, cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
        """Append what is wrong with the stage's settings (before any work starts)."""

    def enabled(self, cfg: BuildConfig) -> bool:
        """Whether this build runs the stage at all."""

    def requests(self, cfg: BuildConfig) -> list[Request]:
        """Optional: the actors or workers the stage starts (checked against the nodes before
        the build's first stage runs)."""

    def needs(self, cfg: BuildConfig) -> tuple[str, ...]:
        """Upstream stages whose hashes chain into this one's."""

    def check_reuse(self, cfg: BuildConfig, result: StageResult) -> None:
        """Optional: raise ``ValueError`` (saying what to do) when a finished stage's result may
        not be reused although its hash matches (e.g. its input files changed since)."""

    def hash_fields(self, cfg: BuildConfig, teacher: str) -> tuple:
        """The settings that change the stage's result."""

    def run(self, ctx: BuildContext, st: StageDir,
            done: Mapping[str, StageResult]) -> StageResult:
        """Do the work (resuming inside the stage where it can); return the result."""


def describe(summary: Mapping[str, Any], log: LogPhrases) -> tuple[str, str | None, float]:
    """``(text, unit, count)``: a result summary (:meth:`StageResult.summary`) in a few words,
    read through its ``log`` phrases, and the unit and value of its main count (``None`` and 0
    when it has none)."""
    fields = {k: v for k, v in log.items() if v is not None}
    phrases = {k: p for k, v in summary.items()
               if "_per_s" not in k and (p := _phrase(k, v, fields))}
    main = next((k for k in phrases if fields.get(k, ("", None))[1]), None) or \
        next((k for k in phrases if _is_count(summary[k]) or isinstance(summary[k], Mapping)),
             None)
    if main is None:
        return ", ".join(phrases.values()) or "nothing new", None, 0.0
    rest = [p for k, p in phrases.items() if k != main]
    text = phrases[main] + (f" ({', '.join(rest)})" if rest else "")
    unit = fields[main][1] if main in fields else main.replace("_", " ")
    return text, unit, float(_total(summary[main]))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _total(value: Any) -> float:
    return sum(value.values()) if isinstance(value, Mapping) else value


def _phrase(name: str, value: Any, fields: Mapping[str, tuple[str, str | None]]) -> str:
    """One field in words; ``""`` for what the log leaves out."""
    words = name.replace("_", " ")
    if isinstance(value, bool):
        return words if value else ""
    if isinstance(value, Mapping) and value and all(_is_count(v) for v in value.values()):
        shown = f"{next(iter(value.values())):,}" if len(value) == 1 else \
            " / ".join(f"{k} {v:,}" for k, v in value.items())
    elif _is_count(value) and value:
        shown = f"{value:,}"
    elif isinstance(value, float) and value:
        return fields.get(name, (f"{words} {{}}", None))[0].format(f"{value:.4g}")
    else:
        return ""
    return fields.get(name, (f"{{}} {words}", None))[0].format(shown)
