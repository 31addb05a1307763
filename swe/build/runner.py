"""The build runner: a generic loop over stages that names none of them.

For each stage: compute its config hash (chained through the stages it needs), reuse its result
when the marker matches, else run it and write the marker. A stage is a module that provides
what :class:`Stage` lists; the build's stages and their order are ``swe.build.stages.STAGES``.
Adding a stage is one module plus one entry there: its ``SECTION`` becomes a table of the build
config (``swe.build.config.config_class``), and it reads other stages' work only through
``swe.build.outputs``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from swe.build.markers import StageDir, stage_hash
from swe.build.tasks import duration, rate
from swe.resources import Request, check_grantable

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Section", "Stage", "StageResult", "build"]

log = logging.getLogger("swe.build")


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

    def summary(self) -> dict[str, Any]:
        """The result without shard lists, seconds and warnings, for logs."""
        return {k: v for k, v in self.to_json().items()
                if k not in ("shards", "seconds", "warnings", "driver_peak_mib")}

    def headline(self) -> str:
        """The result in a few words for the log: its main count, the other counts in
        parentheses (``58,574 sentences (1,426 dropped by length)``); see :func:`describe`."""
        return describe(self.summary())[0]


class Stage(Protocol):
    """What a stage module provides."""

    NAME: str
    Result: type[StageResult]
    SECTION: Section | None  # its config table (None: the stage has no settings of its own)

    def validate(self, cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
        """Append what is wrong with the stage's settings (before any work starts)."""

    def enabled(self, cfg: BuildConfig) -> bool:
        """Whether this build runs the stage at all."""

    def requests(self, cfg: BuildConfig) -> list[Request]:
        """Optional: the actors or workers the stage starts (checked against the nodes before
        the build's first stage runs)."""

    def needs(self, cfg: BuildConfig) -> tuple[str, ...]:
        """Upstream stages whose hashes chain into this one's."""

    def hash_fields(self, cfg: BuildConfig, teacher: str) -> tuple:
        """The settings that change the stage's result."""

    def run(self, ctx: BuildContext, st: StageDir,
            done: Mapping[str, StageResult]) -> StageResult:
        """Do the work (resuming inside the stage where it can); return the result."""


def build(cfg: BuildConfig, until: str | None = None,
          stages: Sequence[Stage] | None = None) -> dict[str, StageResult]:
    """Run (or resume) the build's stages in order, stopping after ``until``; every result.
    ``stages``: the registry ``cfg`` was loaded with (default ``swe.build.stages.STAGES``)."""
    from swe.build.context import BuildContext
    from swe.build.stages import STAGES

    stages = STAGES if stages is None else stages
    names = [s.NAME for s in stages]
    if until is not None and until not in names:
        raise ValueError(f"--until {until!r}: choose one of {', '.join(names)}")
    ctx = BuildContext.open(cfg)  # holds the output's lease until the build ends
    hashes: dict[str, str] = {}
    results: dict[str, StageResult] = {}
    try:
        check_grantable(r for s in stages if s.enabled(cfg) and hasattr(s, "requests")
                        for r in s.requests(cfg))
        for stage in stages:
            if stage.enabled(cfg):
                upstream = [hashes[n] for n in stage.needs(cfg)]
                hashes[stage.NAME] = stage_hash(stage.NAME, *upstream,
                                                *stage.hash_fields(cfg, ctx.teacher))
                st = StageDir(ctx.output, stage.NAME, hashes[stage.NAME])
                results[stage.NAME] = _reuse(stage, st) or _run(stage, ctx, st, results)
            if until == stage.NAME:
                break
    finally:
        ctx.close()
    return results


def _reuse(stage: Stage, st: StageDir) -> StageResult | None:
    stats = st.done_stats()
    result = None if stats is None else stage.Result.from_json(stats)
    if result is not None:
        log.info("[%s] already done: %s", stage.NAME, result.headline())
    return result


def _run(stage: Stage, ctx: BuildContext, st: StageDir,
         done: Mapping[str, StageResult]) -> StageResult:
    ctx.check_lease()  # never clear or write a stage of an output another run has taken
    st.clear_if_stale()
    log.info("[%s] start", stage.NAME)
    start = time.perf_counter()
    _reset_peak_rss()
    result = stage.run(ctx, st, done)
    result = dataclasses.replace(result, seconds=round(time.perf_counter() - start, 2),
                                 warnings=list(st.warnings), driver_peak_mib=_peak_rss_mib())
    ctx.check_lease()
    st.write_marker(result.to_json())
    text, unit, count = describe(result.summary())
    speed = f", {rate(count, result.seconds, unit)}" if unit and count else ""
    peak = f", driver peak {result.driver_peak_mib:,} MiB" if result.driver_peak_mib else ""
    log.info("[%s] done: %s in %s%s%s", stage.NAME, text, duration(result.seconds), speed, peak)
    log.debug("[%s] %s", stage.NAME, result.summary())
    return result


def _reset_peak_rss() -> None:
    """Start the driver's peak-RSS mark (Linux ``VmHWM``) afresh, so each stage reports its own."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_rss_mib() -> int:
    """The driver's peak RSS since :func:`_reset_peak_rss`, in MiB (0 where not Linux)."""
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return 0


# How a result's fields read in its log line, by field name: (phrase, unit of its rate). The
# first field with a unit is the result's main count (its rate is logged), else its first count;
# a field not listed reads "<value> <name>" ("<name> <value>" for a float). Rates (the log
# computes its own), zeros, lists, strings and None are left out (_DONE.json has everything).
FIELDS: dict[str, tuple[str, str | None]] = {
    "lines": ("{} lines", "lines"),
    "invalid_utf8_lines": ("{} not UTF-8, skipped", None),
    "sentences": ("{} sentences", "sentences"),
    "dropped_by_length": ("{} dropped by length", None),
    "sizes": ("{} words", None),
    "min_count_kept": ("min count {}", None),
    "unique_sentences": ("{} sentences to encode", "sentences"),
    "naive_encodes": ("V·N {}", None),
    "encode_ratio": ("ratio {}", None),
    "words_below_n": ("{} words with fewer than N", None),
    "words_without_sentence": ("{} words without a sentence", None),
    "actors": ("{} actors", None),
    "word_vectors": ("{} word vectors", None),
    "words": ("{} words", None),
    "words_without_vectors": ("{} words without a vector", None),
    "fitted_on": ("fitted on {} sentences", "sentences"),
    "dropped_top": ("top {} components dropped", None),
    "dim": ("{} dimensions", None),
    "sif_a": ("SIF a {}", None),
    "steps": ("{} steps", "steps"),
    "best_step": ("best at step {}", None),
    "first_eval_dev_loss": ("", None),  # the phrase "" leaves a field out
    "train_rows": ("{} train rows", "rows"),
    "dev_rows": ("{} dev rows", None),
    "pairs": ("{} pairs kept", None),
    "duplicates": ("{} duplicates dropped", None),
    "over_max_pairs": ("{} over max_pairs dropped", None),
}


def describe(summary: Mapping[str, Any]) -> tuple[str, str | None, float]:
    """``(text, unit, count)``: a result summary (:meth:`StageResult.summary`) in a few words,
    and the unit and value of its main count (``None`` and 0 when it has none)."""
    phrases = {k: p for k, v in summary.items()
               if "_per_s" not in k and (p := _phrase(k, v))}
    main = next((k for k in phrases if FIELDS.get(k, ("", None))[1]), None) or \
        next((k for k in phrases if _is_count(summary[k]) or isinstance(summary[k], Mapping)),
             None)
    if main is None:
        return ", ".join(phrases.values()) or "nothing new", None, 0.0
    rest = [p for k, p in phrases.items() if k != main]
    text = phrases[main] + (f" ({', '.join(rest)})" if rest else "")
    unit = FIELDS[main][1] if main in FIELDS else main.replace("_", " ")
    return text, unit, float(_total(summary[main]))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _total(value: Any) -> float:
    return sum(value.values()) if isinstance(value, Mapping) else value


def _phrase(name: str, value: Any) -> str:
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
        return FIELDS.get(name, (f"{words} {{}}", None))[0].format(f"{value:.4g}")
    else:
        return ""
    return FIELDS.get(name, (f"{{}} {words}", None))[0].format(shown)
