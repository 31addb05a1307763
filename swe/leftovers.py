"""What a killed or earlier run of swe left, judged by name *and* content before it is removed.

A rerun removes such folders (a killed wave's sums, a stage's half-written split, an earlier
Ray Train run's checkpoints). Each file under them must be one swe writes: a name of a known
kind whose first bytes are that kind's (or an empty file, a write cut at its start). Anything
else, a link included, is a user's: the folder is kept and the run stops, naming it.
"""

from __future__ import annotations

import os
import re

from swe import storage
from swe.artifacts import is_regular

__all__ = ["foreign_files", "is_swes_file", "remove_leftovers"]

# name (the file's own, a temporary's suffix aside) -> how its content starts
_KINDS: list[tuple[re.Pattern, bytes]] = [
    (re.compile(r".+\.npz"), b"PK\x03\x04"),
    (re.compile(r".+\.parquet"), b"PAR1"),
    (re.compile(r"state\.json"), b'{"step": '),  # a Ray Train checkpoint's state (json.dump)
    (re.compile(r"checkpoint_manager_snapshot\.json"), b'{"ray_version":'),
    (re.compile(r"config\.json"), b'{\n  "format": "swe-static"'),  # a swe model's, last saved
    (re.compile(r"_NAMESPACE\.json"), b'{\n "format": "swe-teacher-store"'),  # a store's
    (re.compile(r".+\.json"), b'{"config_hash": '),  # a stage's shard marker
]
_SAFETENSORS = re.compile(r".+\.safetensors")
_MARKER = ".validate_storage_marker"  # Ray Train's: an empty file
_TEMP = re.compile(rf"(.+?)(?:{storage.ATOMIC_TEMP})?")


def _is_swes(name: str, head: bytes, size: int) -> bool:
    """Whether a file named ``name`` that starts with ``head`` (``size`` bytes in all) is one
    swe writes."""
    if name == _MARKER or size == 0:
        return size == 0
    base = _TEMP.fullmatch(name).group(1)
    if _SAFETENSORS.fullmatch(base):  # an 8-byte header length, then the JSON header
        return len(head) >= 9 and head[8:9] == b"{" and \
            int.from_bytes(head[:8], "little") < 1 << 32
    magic = next((m for p, m in _KINDS if p.fullmatch(base)), None)
    return magic is not None and (head.startswith(magic) or magic.startswith(head))


def is_swes_file(url: str) -> bool:
    """Whether the file at ``url`` is one swe writes, judged by its name and first bytes (never
    a link, a named pipe or a device: swe writes regular files)."""
    if not is_regular(url):
        return False
    fs, path = storage.filesystem(url)
    with fs.open(path, "rb") as f:
        head = f.read(64)
    return _is_swes(path.rstrip("/").rsplit("/", 1)[-1], head, fs.size(path))


def _files(url: str) -> tuple[dict[str, int], list[str]]:
    """The files under ``url`` by relative path with their sizes, and the links (local)."""
    if not storage.is_local(url):
        return storage.file_sizes(url), []
    root = url.removeprefix("file://")
    files, links = {}, []
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path) or (name in names and not is_regular(path)):
                links.append(rel)  # a link, a named pipe, a socket, a device: never swe's
            elif name in names:
                files[rel] = os.path.getsize(path)
    return files, links


def foreign_files(url: str) -> list[str]:
    """The paths under the folder ``url`` (relative to it) that swe did not write: none when it
    is missing; a file's own name when ``url`` is a file that is not swe's. A link is never
    swe's."""
    fs, path = storage.filesystem(url)
    if not fs.exists(path):
        return []
    if not fs.isdir(path):
        return [] if is_swes_file(url) else [path.rstrip("/").rsplit("/", 1)[-1]]
    files, foreign = _files(url)
    for rel, size in files.items():
        with fs.open(f"{path.rstrip('/')}/{rel}", "rb") as f:
            head = f.read(64)
        if not _is_swes(rel.rsplit("/", 1)[-1], head, size):
            foreign.append(rel)
    return sorted(foreign)


def remove_leftovers(url: str, why: str) -> None:
    """Remove the folder ``url`` (a killed or earlier attempt's, ``why`` says so) when all it
    holds is swe's; otherwise raise :class:`FileExistsError` naming the rest, and keep it."""
    foreign = foreign_files(url)
    if foreign:
        fs, path = storage.filesystem(url)
        where = url if fs.isdir(path) else url.rstrip("/").rsplit("/", 1)[0]
        listed = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise FileExistsError(
            f"{where} holds {len(foreign)} file(s) swe did not write ({listed}); {why}, which "
            "removes them: move them out of it (swe's work folders are its own) and rerun")
    storage.remove_tree(url)
