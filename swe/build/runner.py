"""The build runner: a generic loop over stages that names none of them.

For each stage: compute its config hash (chained through the stages it needs), reuse its result
when the marker matches, else run it and write the marker. A stage is a module that provides
what :class:`swe.build.stage.Stage` lists; the build's stages and their order are
``swe.build.stages.STAGES``.
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
from typing import TYPE_CHECKING

from swe.build.context import BuildContext
from swe.build.markers import StageDir, stage_hash
from swe.build.stage import Stage, StageResult
from swe.build.stages import STAGES
from swe.build.tasks import duration, rate
from swe.resources import check_grantable

if TYPE_CHECKING:
    from swe.build.config import BuildConfig

__all__ = ["build"]

log = logging.getLogger("swe.build")


def build(cfg: BuildConfig, until: str | None = None,
          stages: Sequence[Stage] | None = None) -> dict[str, StageResult]:
    """Run (or resume) the build's stages in order, stopping after ``until``; every result.
    ``stages``: the registry ``cfg`` was loaded with (default ``swe.build.stages.STAGES``)."""
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
                results[stage.NAME] = _reuse(stage, st, cfg) or _run(stage, ctx, st, results)
            if until == stage.NAME:
                break
    finally:
        ctx.close()
    return results


def _reuse(stage: Stage, st: StageDir, cfg: BuildConfig) -> StageResult | None:
    stats = st.done_stats()
    result = None if stats is None else stage.Result.from_json(stats)
    if result is not None:
        if hasattr(stage, "check_reuse"):
            stage.check_reuse(cfg, result)
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
    text, unit, count = result.describe()
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
