"""Refusing, before any work starts, actors and workers that no node of the cluster can hold.

Ray waits forever for a request no node can grant (an actor asking 4 CPUs on 2-CPU nodes, a GPU
on a CPU cluster): the job shows no error, only no progress. :func:`check_grantable` compares
each request with the live nodes and raises a ``ValueError`` that says what the nodes have and
which setting to change. On an autoscaling cluster, where nodes appear on demand, set
``SWE_WAIT_FOR_RESOURCES=1`` to skip the check and let Ray wait.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Request", "check_grantable"]

GiB = 2**30


@dataclass(frozen=True)
class Request:
    """``count`` actors (or tasks, or workers) that each reserve ``cpus``, ``gpus`` and
    ``memory`` bytes; ``fix`` says how to shrink them ("lower extraction.cpus_per_actor")."""

    what: str
    fix: str
    count: int = 1
    cpus: float = 0.0
    gpus: float = 0.0
    memory: float = 0.0

    def needs(self) -> dict[str, float]:
        """The Ray resources one unit reserves, by Ray's names (zeros left out)."""
        need = {"CPU": self.cpus, "GPU": self.gpus, "memory": self.memory}
        return {k: v for k, v in need.items() if v > 0}


def _fits(node: Mapping[str, float], need: Mapping[str, float]) -> int:
    """How many units of ``need`` one node holds."""
    return min((math.floor(node.get(k, 0) / v + 1e-9) for k, v in need.items()), default=0)


def _describe(resources: Mapping[str, float], gpus: bool) -> str:
    """``2 CPUs, 1 GPU, 8.0 GiB``: GPUs when ``gpus`` (even none), memory when given."""
    text = f"{resources.get('CPU', 0):g} CPUs"
    if gpus:
        n = resources.get("GPU", 0)
        text += f", {n:g} GPU{'' if n == 1 else 's'}"
    if resources.get("memory"):
        text += f", {resources['memory'] / GiB:.1f} GiB"
    return text


def check_grantable(requests: Iterable[Request], nodes: list[Mapping[str, float]] | None = None
                    ) -> None:
    """Raise ``ValueError`` for the first request the cluster cannot hold: one unit larger than
    every node, or more units than all nodes together. ``nodes``: each live node's resources
    (default: the connected Ray cluster's)."""
    if os.environ.get("SWE_WAIT_FOR_RESOURCES") == "1":
        return
    if nodes is None:
        import ray

        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    for r in requests:
        need = r.needs()
        if not need or not nodes:
            continue
        room = sum(_fits(n, need) for n in nodes)
        if room >= r.count:
            continue
        largest = max(nodes, key=lambda n: (n.get("GPU", 0), n.get("CPU", 0), n.get("memory", 0)))
        many = f"{r.count} × " if r.count > 1 else ""
        gpus = r.gpus > 0
        where = (f"the largest of {len(nodes)} nodes has {_describe(largest, gpus)}"
                 if len(nodes) > 1 else f"the one node has {_describe(largest, gpus)}")
        fits = f"; the cluster holds {room}" if room else ""
        raise ValueError(f"{r.what}: {many}{_describe(need, gpus)} asked, but {where}{fits}: "
                         f"{r.fix} (or add nodes; on an autoscaling cluster set "
                         f"SWE_WAIT_FOR_RESOURCES=1)")
