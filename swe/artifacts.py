"""What a local folder is when swe wrote it: a saved model, an encode output, a build or a
teacher-output store. Commands refuse to write into, or replace, one that is not their own:
each holds hours of work, and a typo in an output path must not delete it."""

from __future__ import annotations

import contextlib
import os
import re
import stat

from swe import storage

__all__ = ["MANAGED", "file_kind", "holder_of", "kind_of", "modified", "parquet_footer",
           "refuse_inside", "swe_folder_around", "swe_folder_at_or_in"]

_SWE_FORMAT = re.compile(rb'"format"\s*:\s*"swe-')
# A file whose "format" names swe, and what its folder is then.
_MARKED = {"config.json": "the saved model", "ensemble.json": "the saved model",
           "_manifest.json": "the swe encode output", "_SWE_STORE.json": "the teacher-output store"}
# The folders whose files swe checksums or lists (a build's top level is not one of them).
MANAGED = ("the saved model", "the swe encode output", "the teacher-output store")


def _marked(path: str) -> bool:
    with contextlib.suppress(OSError):  # a regular file only: a pipe would block
        if os.path.isfile(path):
            with open(path, "rb") as f:
                return _SWE_FORMAT.search(f.read(1 << 16)) is not None
    return False


def kind_of(folder: str) -> str:
    """What the local ``folder`` is (``"the saved model"``, ``"the swe encode output"``,
    ``"the teacher-output store"``, ``"the swe build"``), or ``""``: not one swe wrote."""
    for name, kind in _MARKED.items():
        if _marked(os.path.join(folder, name)):
            return kind
    if os.path.isdir(os.path.join(folder, "work", "corpus")) or _marked(
            os.path.join(folder, "model", "config.json")):
        return "the swe build"
    return ""


def swe_folder_around(path: str, kinds: tuple[str, ...] = ()) -> str:
    """The swe folder (of ``kinds``, default any) that the local ``path`` is or lies in, named
    with its kind (``"the saved model /x/m"``); ``""`` for none, or for a URL."""
    if not storage.is_local(path):
        return ""
    folder = os.path.abspath(os.fspath(path).removeprefix("file://"))
    while True:
        kind = kind_of(folder)
        if kind and (not kinds or kind in kinds):
            return f"{kind} {folder}"
        if os.path.dirname(folder) == folder:
            return ""
        folder = os.path.dirname(folder)


def swe_folder_at_or_in(path: str, own: str = "") -> str:
    """The swe folder that the local ``path`` is, or that a folder anywhere under it is, other
    than one of kind ``own``; ``""`` for none, or for a URL. (A walk of what a replacement would
    delete; inside a swe folder it stops.)"""
    if not storage.is_local(path) or not os.path.isdir(path):
        return ""
    top = os.path.abspath(os.fspath(path).removeprefix("file://"))
    kind = kind_of(top)
    if kind:
        return "" if kind == own else f"{kind} {top}"
    for folder, subfolders, _ in os.walk(top):  # symbolic links are not followed
        for name in list(subfolders):
            inner = kind_of(os.path.join(folder, name))
            if inner:
                return f"{inner} {os.path.join(folder, name)}"
    return ""


def holder_of(path: str) -> str:
    """The swe folder that writing the local ``path`` would write into, named with its kind: the
    saved model, encode output or teacher store its parent lies in, or the work folder of a
    build that ``path`` is or lies in (each build's rerun may clear it). Symbolic links are
    resolved first. ``""`` for none, or for a URL."""
    if not storage.is_local(path):
        return ""
    real = os.path.realpath(os.fspath(path).removeprefix("file://"))
    held = swe_folder_around(os.path.dirname(real), MANAGED)
    folder = os.path.dirname(real)
    while not held:
        if kind_of(folder) == "the swe build":
            work = os.path.join(folder, "work")
            if real == work or real.startswith(work + os.sep):
                return f"the work folder of the swe build {folder}"
        if os.path.dirname(folder) == folder:
            return ""
        folder = os.path.dirname(folder)
    return held


def refuse_inside(path: str, flag: str = "--output") -> None:
    """Refuse a local output that lies inside a saved model, an encode output, a teacher store
    or a build's ``work/`` folder (or is that folder): their files are checksummed, listed or
    cleaned by swe."""
    held = holder_of(path)
    if held:
        raise ValueError(f"{flag} {path} lies in {held}, whose files swe checksums, lists or "
                         "cleans: writing there would damage it; choose an output outside it")


def file_kind(mode: int) -> str:
    """What a ``st_mode`` that is no folder names, for a message: ``"a named pipe"``, ``"a
    device"``, ``"a socket"`` or ``"a file"``."""
    import stat

    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "a file"


def modified(info: dict) -> float:
    """When a file was last written, in seconds, from an fsspec ``info`` dict (local or object
    store)."""
    stamp = info.get("mtime") or info.get("LastModified") or info.get("created") or 0
    return stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp)


def is_regular(url: str) -> bool:
    """Whether ``url`` is a regular file (not a link, a pipe, a socket, a device, a folder);
    an object store holds nothing else, so any object there is."""
    if not storage.is_local(url):
        return True
    try:
        return stat.S_ISREG(os.lstat(url.removeprefix("file://")).st_mode)
    except OSError:
        return False


def parquet_footer(url: str) -> tuple[list[str], int] | None:
    """A Parquet file's column names and row count, from its footer only; ``None`` when ``url``
    is not a readable Parquet file (another format, cut short, missing, not a regular file:
    a named pipe would block the read)."""
    import pyarrow.parquet as pq

    if not is_regular(url):
        return None
    fs, path = storage.filesystem(url)
    try:
        with fs.open(path, "rb") as f:
            meta = pq.ParquetFile(f)
            return meta.schema_arrow.names, meta.metadata.num_rows
    except Exception:
        return None
