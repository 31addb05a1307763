"""The one check of a command's local report file (``--json``, ``--markdown``, ``--png``), before
any work: ``swe evaluate`` and ``swe analyze`` write such files, never to an object store."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from swe import storage
from swe.artifacts import holder_of
from swe.inputs import check_path_text

__all__ = ["check_report_file", "write_report_file"]


def check_report_file(flag: str, path: str, inputs: list[str], command: str, job: str) -> None:
    """Refuse an output that cannot be a new file of its own: not a path, not local, the root,
    home, the current folder or one above it, a folder, a pipe, a device or a socket, under a
    file, on any of ``inputs`` (``job``: what reads them), or in a folder swe manages."""
    check_path_text(path, flag)
    if not storage.is_local(path):
        raise ValueError(f"{flag} {path}: {command} writes local files only; name a local "
                         "path and copy it after")
    real = Path(storage.output_url(path, flag))  # the root, home, ., .. and above: refused
    if real.is_dir():
        suffix = "md" if flag == "--markdown" else flag.lstrip("-")
        raise ValueError(f"{flag} {path} is a folder; name a file in it, e.g. "
                         f"{Path(path) / ('results.' + suffix)}")
    if real.exists() and not stat.S_ISREG(real.stat().st_mode):
        raise ValueError(f"{flag} {path} exists and is not a regular file (a named pipe, a "
                         "device or a socket would block or swallow the output); name a "
                         "regular file")
    parent = real.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: {parent} is a file, not a folder; name another path")
    for given in inputs:
        if storage.overlaps(path, given):
            raise ValueError(f"{flag} {path} would overwrite {given}, an input of this {job}; "
                             "name another file")
    held = holder_of(str(real))
    if held:
        raise ValueError(f"{flag} {path} lies in {held}, whose files swe checksums, lists or "
                         "cleans: writing there would damage it; name a file elsewhere")


def write_report_file(path: str, data: str | bytes) -> None:
    """Write a checked report file whole, as a new file renamed over the old one: a hard link to
    the old file (into a saved model, say) keeps its content."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    storage.write_bytes_atomic(os.path.abspath(path),
                               data.encode("utf-8") if isinstance(data, str) else data)
