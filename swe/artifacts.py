"""Stage artifacts under ``<output>/work/<stage>/`` and their completion markers.

A stage's ``_DONE.json`` holds the hash of the config that produced it plus its stats; a rerun
skips a stage whose marker matches. Long stages also write ``_shards/<id>.json`` markers, so a
killed stage resumes shard by shard. A stage's outputs are written before its marker, so a marker
never points at partial output.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from swe import storage

__all__ = ["Stage"]

log = logging.getLogger("swe.build")


@dataclass
class Stage:
    """One build stage's directory, config hash and markers."""

    output: str
    name: str
    config_hash: str
    stats: dict = field(default_factory=dict)

    @property
    def dir(self) -> str:
        return storage.join(self.output, "work", self.name)

    def path(self, *parts: str) -> str:
        return storage.join(self.dir, *parts)

    def _marker(self) -> dict | None:
        try:
            return json.loads(storage.read_text(self.path("_DONE.json")))
        except FileNotFoundError:
            return None

    def done(self) -> bool:
        """True when the stage completed with this exact config."""
        marker = self._marker()
        return marker is not None and marker.get("config_hash") == self.config_hash

    def done_stats(self) -> dict:
        return (self._marker() or {}).get("stats", {})

    def warn(self, message: str) -> None:
        """Log a warning and record it under ``warnings`` in the stage's ``_DONE.json``."""
        log.warning("[%s] %s", self.name, message)
        self.stats.setdefault("warnings", []).append(message)

    def shard_done(self, shard: str) -> dict | None:
        try:
            m = json.loads(storage.read_text(self.path("_shards", f"{shard}.json")))
        except FileNotFoundError:
            return None
        return m if m.get("config_hash") == self.config_hash else None

    def mark_shard(self, shard: str, stats: dict) -> None:
        storage.write_bytes(self.path("_shards", f"{shard}.json"),
                            json.dumps({"config_hash": self.config_hash, **stats}).encode())

    def clear(self) -> None:
        """Remove the stage's old outputs (a different config produced them)."""
        fs, path = storage.filesystem(self.dir)
        if fs.exists(path):
            fs.rm(path, recursive=True)

    @contextmanager
    def run(self):
        """Log start/end, time the stage, and write the marker when the body succeeds."""
        marker = self._marker()
        if marker is not None and marker.get("config_hash") != self.config_hash:
            log.info("[%s] config changed since the last run: recomputing", self.name)
            self.clear()
        log.info("[%s] start", self.name)
        start = time.perf_counter()
        yield self
        self.stats["seconds"] = round(time.perf_counter() - start, 2)
        storage.write_bytes(self.path("_DONE.json"), json.dumps(
            {"config_hash": self.config_hash, "stats": self.stats}, indent=2).encode())
        log.info("[%s] done in %.1fs: %s", self.name, self.stats["seconds"],
                 {k: v for k, v in self.stats.items() if k != "seconds"})
