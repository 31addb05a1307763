"""The build runner: a generic loop over stages that names none of them.

For each stage: compute its config hash (chained through the stages it needs), reuse its result
when the marker matches, else run it and write the marker. A stage is a module that provides
what :class:`Stage` lists; the build's stages and their order are ``swe.build.stages.STAGES``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from swe.build.markers import StageDir, stage_hash

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["Stage", "StageResult", "build"]

log = logging.getLogger("swe.build")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageResult:
    """What every stage result records besides its own fields."""

    seconds: float = 0.0
    warnings: list[str] = dataclasses.field(default_factory=list)

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
                if k not in ("shards", "seconds", "warnings")}


class Stage(Protocol):
    """What a stage module provides."""

    NAME: str
    Result: type[StageResult]

    def enabled(self, cfg: BuildConfig) -> bool:
        """Whether this build runs the stage at all."""

    def needs(self, cfg: BuildConfig) -> tuple[str, ...]:
        """Upstream stages whose hashes chain into this one's."""

    def hash_fields(self, cfg: BuildConfig, teacher: str) -> tuple:
        """The settings that change the stage's result."""

    def run(self, ctx: BuildContext, st: StageDir,
            done: Mapping[str, StageResult]) -> StageResult:
        """Do the work (resuming inside the stage where it can); return the result."""


def build(cfg: BuildConfig, until: str | None = None,
          stages: Sequence[Stage] | None = None) -> dict[str, StageResult]:
    """Run (or resume) the build's stages in order, stopping after ``until``; every result."""
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
    return None if stats is None else stage.Result.from_json(stats)


def _run(stage: Stage, ctx: BuildContext, st: StageDir,
         done: Mapping[str, StageResult]) -> StageResult:
    ctx.check_lease()  # never clear or write a stage of an output another run has taken
    st.clear_if_stale()
    log.info("[%s] start", stage.NAME)
    start = time.perf_counter()
    result = stage.run(ctx, st, done)
    result = dataclasses.replace(result, seconds=round(time.perf_counter() - start, 2),
                                 warnings=list(st.warnings))
    ctx.check_lease()
    st.write_marker(result.to_json())
    log.info("[%s] done in %.1fs: %s", stage.NAME, result.seconds, result.summary())
    return result
