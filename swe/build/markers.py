"""Stage directories under ``<output>/work/<stage>/``, their completion markers and config hashes.

A stage's ``_DONE.json`` holds the hash of the config that produced it (chained through every
upstream stage) and its result; a rerun skips a stage whose marker matches. Long stages also write
``_shards/<id>.json`` markers, so a killed stage resumes shard by shard. Outputs are written before
their marker, so a marker never points at partial output. Paths inside the output are recorded
relative to it (``$OUTPUT/work/…``), so a copied or moved output is self-contained.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Any

from swe import storage

__all__ = ["StageDir", "hashed", "stage_hash"]

log = logging.getLogger("swe.build")


def stage_hash(*parts: Any) -> str:
    """A stable hash of config fragments (and upstream hashes) for completion markers."""
    blob = json.dumps(parts, sort_keys=True, default=lambda o: dataclasses.asdict(o))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def hashed(section: Any, **neutral: Any) -> dict:
    """A config section as hashed, without the keys added later that are at their default, so
    adding such a key keeps the markers of earlier builds valid."""
    d = dataclasses.asdict(section)
    for key, value in neutral.items():
        if d.get(key) == value:
            d.pop(key)
    return d


def _read_marker(url: str) -> dict | None:
    """A marker's JSON; ``None`` when absent, ``{}`` when unreadable (a write cut short)."""
    try:
        m = json.loads(storage.read_text(url))
    except FileNotFoundError:
        return None
    except ValueError:  # truncated JSON or bytes that are not UTF-8
        log.warning("%s is unreadable (a write cut short?): its work is redone", url)
        return {}
    return m if isinstance(m, dict) else {}


#: How a path inside the build's output is written in a marker: relative to the output, so a
#: copied or moved output reads its own work files, never the original's.
OUTPUT = "$OUTPUT"


def _swap_prefix(value: Any, old: str, new: str) -> Any:
    """``value`` with every string that is ``old`` or starts with ``old/`` made to start with
    ``new`` instead (through dicts and lists)."""
    if isinstance(value, str):
        return new + value[len(old):] if value == old or value.startswith(old + "/") else value
    if isinstance(value, dict):
        return {k: _swap_prefix(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap_prefix(v, old, new) for v in value]
    return value


def _portable(value: Any, root: str) -> Any:
    """``value`` with every string under ``root`` written as ``$OUTPUT/…``."""
    return _swap_prefix(value, root, OUTPUT)


def _located(value: Any, root: str) -> Any:
    """``value`` with every ``$OUTPUT/…`` string resolved against ``root`` (the inverse)."""
    return _swap_prefix(value, OUTPUT, root)


@dataclasses.dataclass
class StageDir:
    """One stage's work directory, config hash, markers and the warnings it records."""

    output: str
    name: str
    config_hash: str
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def root(self) -> str:
        """The build's output, as paths under it begin."""
        return self.output.rstrip("/")

    @property
    def dir(self) -> str:
        """``<output>/work/<stage>``."""
        return storage.join(self.output, "work", self.name)

    def path(self, *parts: str) -> str:
        """A path inside the stage's directory."""
        return storage.join(self.dir, *parts)

    def marker(self) -> dict | None:
        """The stage's ``_DONE.json`` as written, or ``None``; ``{}`` (matching no config) when a
        killed write left it truncated, so the stage is cleared and rerun."""
        return _read_marker(self.path("_DONE.json"))

    def done_stats(self) -> dict | None:
        """The recorded result when the stage completed with this exact config and its files
        are still the sizes recorded then, else ``None``. A finished stage with a file missing
        or changed is cleared (logged), so it is redone, never trusted."""
        marker = self.marker()
        if marker is None or marker.get("config_hash") != self.config_hash:
            return None
        damage = self._damage(marker.get("files"))
        if damage:
            log.warning("[%s] %s since the stage finished: redoing the stage", self.name, damage)
            self._remove(marker, f"{damage} since it finished")
            return None
        return _located(marker.get("stats", {}), self.root)

    def _damage(self, recorded: Any) -> str:
        """What differs between the stage's files now and ``recorded`` (``{}``: a marker
        written before file sizes were recorded, trusted as before)."""
        if not isinstance(recorded, dict):
            return ""
        now = storage.file_sizes(self.dir)
        for name, size in recorded.items():
            if name not in now:
                return f"its work file {self.path(name)} is missing"
            if now[name] != size:
                return (f"its work file {self.path(name)} changed ({now[name]:,} bytes, "
                        f"{size:,} when written)")
        return ""

    def write_marker(self, stats: dict) -> None:
        """Mark the stage complete with ``stats`` (its result) and the size of every file under
        its directory (checked when the stage is reused)."""
        files = {n: s for n, s in storage.file_sizes(self.dir).items() if n != "_DONE.json"}
        storage.write_bytes(self.path("_DONE.json"), json.dumps(
            {"config_hash": self.config_hash, "stats": _portable(stats, self.root),
             "files": files}, indent=2).encode())

    def warn(self, message: str) -> None:
        """Log a warning and record it under ``warnings`` in the stage's ``_DONE.json``."""
        log.warning("[%s] %s", self.name, message)
        self.warnings.append(message)

    def shard_done(self, shard: str) -> dict | None:
        """A finished shard's recorded stats (same config), else ``None``."""
        m = _read_marker(self.path("_shards", f"{shard}.json"))
        return _located(m, self.root) if m and m.get("config_hash") == self.config_hash else None

    def mark_shard(self, shard: str, stats: dict) -> None:
        """Record one finished shard, whole or not at all: a kill mid-write leaves no cut marker."""
        storage.write_bytes_atomic(self.path("_shards", f"{shard}.json"),
                                   json.dumps({"config_hash": self.config_hash,
                                               **_portable(stats, self.root)}).encode())

    def clear_if_stale(self) -> None:
        """Remove the stage's outputs when a different config produced them."""
        marker = self.marker()
        if marker is None or marker.get("config_hash") == self.config_hash:
            return
        self._remove(marker, "its config changed")
        log.info("[%s] config changed since the last run: recomputing", self.name)

    def _remove(self, marker: dict, why: str) -> None:
        """Remove the finished stage's folder to redo it, unless it holds files the stage did
        not write (not in ``marker``'s list): a user's, which stop the build, named."""
        recorded = marker.get("files")
        foreign = sorted(set(storage.file_sizes(self.dir)) - set(recorded) - {"_DONE.json"}) \
            if isinstance(recorded, dict) else []  # {}: the stage wrote no file there
        if foreign:
            raise FileExistsError(
                f"{self.dir} holds {len(foreign)} file(s) the {self.name} stage did not write "
                f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); the stage "
                f"must be redone ({why}), which removes its folder: move them out of work/ "
                "(it is swe's) and rerun")
        storage.remove_tree(self.dir)
