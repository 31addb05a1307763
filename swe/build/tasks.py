"""Running a stage's Ray tasks (one per shard, skipping shards already marked) and showing a
stage's progress with an ETA."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from swe.build.markers import StageDir
from swe.raysetup import clear_status, console, get, show_status
from swe.resources import Request, check_grantable

__all__ = ["Progress", "actor_count", "duration", "rate", "run_sharded", "track", "wait_logged"]

log = logging.getLogger("swe.build")

T = TypeVar("T")


def run_sharded(st: StageDir, jobs: Sequence[tuple[str, Callable[[], Any]]]) -> list[dict]:
    """Run ``(key, launch)`` jobs (``launch()`` returns an ObjectRef of a dict), skipping keys
    whose shard marker exists and marking each as it finishes; results in ``jobs`` order."""
    results: dict[str, dict] = {}
    pending = {}
    for key, launch in jobs:
        done = st.shard_done(key)
        if done is not None:
            results[key] = done
        else:
            pending[key] = launch()
    if results:
        log.info("[%s] %d of %d shards already done", st.name, len(results), len(jobs))

    def finish(key: str, res: dict) -> None:
        st.mark_shard(key, res)
        results[key] = res

    wait_logged(st.name, pending, finish)
    return [results[k] for k, _ in jobs]


def wait_logged(name: str, pending: dict, on_done: Callable[[str, Any], None]) -> None:
    """Collect task results as they finish (``on_done(key, result)``), showing progress."""
    import ray

    by_ref = {ref: key for key, ref in pending.items()}
    progress = Progress(name, len(by_ref), "tasks")
    try:
        while by_ref:
            ready, _ = ray.wait(list(by_ref), num_returns=1)
            key = by_ref.pop(ready[0])
            on_done(key, get(ready[0]))
            progress.add()
    finally:
        progress.close()


def track(name: str, items: Iterable[T], total: int, unit: str,
          count: Callable[[T], int] = lambda _: 1) -> Iterator[T]:
    """``items`` as they come (e.g. a Ray Data job's batches), showing ``name``'s progress
    towards ``total`` ``unit``; ``count(item)`` is how many units an item holds."""
    progress = Progress(name, total, unit)
    try:
        for item in items:
            progress.add(count(item))
            yield item
    finally:
        progress.close()


class Progress:
    """Progress towards ``total`` with a rate and an ETA: one line updated in place on a
    terminal, a log line every 30 s otherwise; nothing for a pass that ends within a couple of
    seconds. The rate counts from the first unit done, so start-up (actors loading a model)
    does not skew the ETA. With -v, also one line per finished pass."""

    FIRST_S, REDRAW_S, LOG_EVERY_S = 2.0, 0.5, 30.0

    def __init__(self, name: str, total: int, unit: str = "tasks") -> None:
        self.name, self.total, self.unit, self.done = name, total, unit, 0
        self.start = self.shown = time.perf_counter()
        self.first: tuple[float, int] | None = None  # (when, done) at the first update
        self.live = console()["tty"] and not console()["verbose"]

    def add(self, n: int = 1) -> None:
        """Count ``n`` more units done; show progress when it is time to."""
        now = time.perf_counter()
        self.first = self.first or (now, self.done)
        self.done += n
        since_start, since_shown = now - self.start, now - self.shown
        if self.live and since_start >= self.FIRST_S and since_shown >= self.REDRAW_S:
            show_status(self.line(now))
            self.shown = now
        elif not self.live and since_shown >= self.LOG_EVERY_S and self.done < self.total:
            log.info("%s", self.line(now))
            self.shown = now

    def line(self, now: float) -> str:
        """``[name] done/total unit (pct), rate, ETA``."""
        text = f"[{self.name}] {self.done:,}/{self.total:,} {self.unit}"
        if self.total:
            text += f" ({100 * self.done / self.total:.0f}%)"
        when, before = self.first or (now, self.done)
        if now - when > 0 and self.done > before:
            per_s = (self.done - before) / (now - when)
            text += f", {rate(per_s, 1.0, self.unit)}"
            if self.done < self.total:
                text += f", ETA {duration((self.total - self.done) / per_s)}"
        return text

    def close(self) -> None:
        """Remove the live line; with -v, log the pass's total."""
        if self.live:
            clear_status()
        secs = time.perf_counter() - self.start
        if self.total:
            log.debug("[%s] %s/%s %s in %s, %s", self.name, f"{self.done:,}", f"{self.total:,}",
                      self.unit, duration(secs), rate(self.done, secs, self.unit))


def duration(seconds: float) -> str:
    """``3.6 s``, ``42 s``, ``4 min 12 s``, ``2 h 05 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def rate(count: float, seconds: float, unit: str) -> str:
    """``16,383 sentences/s`` (``4.2 steps/s`` below 100 per second)."""
    per_s = count / seconds if seconds > 0 else 0.0
    return f"{per_s:,.0f} {unit}/s" if per_s >= 100 else f"{per_s:,.1f} {unit}/s"


MiB = 1 << 20


def node_id() -> str:
    """The Ray node a task runs on (recorded in shard markers, to show placement)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def remote(fn: Callable, memory: int, what: str, fix: str, cpus: float = 0.5) -> Any:
    """``ray.remote(fn)`` reserving ``memory`` bytes per task; fails before any work when no
    node has that much memory, saying how to shrink the task (``fix``: "lower vocab.size")."""
    import ray

    check_grantable([Request(what, fix, cpus=cpus, memory=memory)])
    return ray.remote(num_cpus=cpus, memory=int(memory))(fn)


def actor_count(actors: int, gpus_per_actor: float, threads: int = 1) -> int:
    """Actors to start: as configured, else one per GPU, else one teacher per ``threads`` CPUs
    (each reserves only ``cpus_per_actor`` so reading tasks are never starved)."""
    import ray

    if actors:
        return actors
    res = ray.cluster_resources()
    if gpus_per_actor and res.get("GPU"):
        return max(1, int(res["GPU"] / gpus_per_actor))
    return max(1, math.floor(res.get("CPU", 1) / threads))
