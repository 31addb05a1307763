"""What a local folder is when swe wrote it: a saved model, an encode output, a build or a
teacher-output store. Commands refuse to write into, or replace, one that is not their own:
each holds hours of work, and a typo in an output path must not delete it."""

from __future__ import annotations

import contextlib
import os
import re

from swe import storage

__all__ = ["MANAGED", "kind_of", "swe_folder_around", "swe_folder_at_or_in"]

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
    """The swe folder that the local ``path`` is, or that one of its entries is (one level
    down), other than one of kind ``own``; ``""`` for none, or for a URL."""
    if not storage.is_local(path) or not os.path.isdir(path):
        return ""
    folder = os.path.abspath(os.fspath(path).removeprefix("file://"))
    kind = kind_of(folder)
    if kind:
        return "" if kind == own else f"{kind} {folder}"
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            inner = kind_of(entry.path) if entry.is_dir(follow_symlinks=False) else ""
            if inner:
                return f"{inner} {entry.path}"
    return ""
