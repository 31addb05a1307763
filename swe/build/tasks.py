"""Running a stage's Ray tasks: one per shard, skipping shards already marked, with progress."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from swe.build.markers import StageDir
from swe.raysetup import get

__all__ = ["run_sharded", "wait_logged"]

log = logging.getLogger("swe.build")


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
    """Collect task results as they finish, logging progress and an ETA every ~15 s."""
    import ray

    by_ref = {ref: key for key, ref in pending.items()}
    start = last = time.perf_counter()
    total, done = len(by_ref), 0
    while by_ref:
        ready, _ = ray.wait(list(by_ref), num_returns=1)
        key = by_ref.pop(ready[0])
        on_done(key, get(ready[0]))
        done += 1
        now = time.perf_counter()
        if now - last > 15 or not by_ref:
            rate = done / (now - start)
            log.info("[%s] %d/%d shards, %.2f shards/s, ETA %.0fs", name, done, total, rate,
                     (total - done) / max(rate, 1e-9))
            last = now


MiB = 1 << 20


def node_id() -> str:
    """The Ray node a task runs on (recorded in shard markers, to show placement)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def remote(fn: Callable, memory: int, what: str, setting: str, cpus: float = 0.5) -> Any:
    """``ray.remote(fn)`` reserving ``memory`` bytes per task; fails before any work when no
    node has that much memory, naming the ``setting`` that shrinks the task."""
    import ray

    largest = max((n["Resources"].get("memory", 0) for n in ray.nodes() if n.get("Alive")),
                  default=0)
    if largest and memory > largest:
        raise ValueError(f"{what} needs ~{memory / 2**30:.1f} GiB per task but the largest node "
                         f"has {largest / 2**30:.1f} GiB: raise {setting} (or use larger nodes)")
    return ray.remote(num_cpus=cpus, memory=int(memory))(fn)
