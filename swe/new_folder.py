"""Writing a new output folder under its lease (``swe export``, ``swe quantize``): two runs into
one new folder never both write, a failed run removes what it wrote and nothing else, and the
rerun that takes over a killed run's lease removes that run's files only when their content is
what it wrote (:meth:`swe.lease.Lease.record_files`, or a kind its first bytes show).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from swe import storage
from swe.artifacts import is_regular
from swe.lease import LEASE_FILE, Lease
from swe.leftovers import is_swes_file

__all__ = ["holds_others_files", "lease_new_folder"]

log = logging.getLogger(__name__)


def _entries_besides_lease(output: str) -> list[str]:
    """The entries of ``output`` that are not a lease's own files (none when it is missing;
    ``[output]`` when it is a file)."""
    fs, path = storage.filesystem(output)
    fs.invalidate_cache(path)
    if not fs.exists(path):
        return []
    if not fs.isdir(path):
        return [path]
    return [n for n in fs.ls(path) if not n.rstrip("/").rsplit("/", 1)[-1].startswith(LEASE_FILE)]


def holds_others_files(output: str) -> bool:
    """Whether ``output`` holds entries besides a lease, other than what the run that holds
    (or held) its lease declared it writes: the early "new or empty" check of
    :func:`lease_new_folder`'s users, which judges a killed run's leftovers under the lease."""
    entries = _entries_besides_lease(output)
    return bool(entries) and not _killed_runs_own(output, entries, Lease(output).holder())


@contextlib.contextmanager
def lease_new_folder(output: str, purpose: str, refused: Callable[[str], Exception],
                     writes: Sequence[str] = ()) -> Iterator[Lease]:
    """Hold ``output``'s lease while the block writes a new folder there, so two runs into one
    new folder never both write: ``refused(output)`` is raised unless the folder is new or
    empty, judged again under the lease (its own file, or a killed run's, aside). When the
    block fails, what it wrote is removed, and the folder too when it was new.

    ``writes``: regular expressions of the paths (under the folder) of every file the block
    may write, recorded in the lease. A run killed while writing leaves its lease; the rerun
    that takes it over removes what the killed run left when every file there is one it
    declared (or a temporary of one): anything else, a user's file in a declared folder
    included, refuses the rerun."""
    fs, path = storage.filesystem(output)
    new = not fs.exists(path)
    try:
        lease = Lease(output, purpose=purpose, writes=writes).acquire()
    except BaseException:  # e.g. a full disk: no empty folder left behind
        if new and storage.is_local(output):
            with contextlib.suppress(OSError):
                os.rmdir(path)
        raise
    left = _entries_besides_lease(output)
    if left and _killed_runs_own(output, left, lease.took_over):
        log.warning("removing %s from %s: the partial output of a killed run (%s)",
                    ", ".join(n.rstrip("/").rsplit("/", 1)[-1] for n in left), output,
                    lease.describe(lease.took_over))
        for name in left:
            fs.rm(name, recursive=True)
        left = []
    if left:
        lease.release()
        raise refused(output)
    try:
        yield lease
    except BaseException:
        with contextlib.suppress(OSError):  # the first error is the one to report
            _remove_declared(output, writes)
        lease.release()
        if new and storage.is_local(output):
            with contextlib.suppress(OSError):  # not empty: another run's since the release
                os.rmdir(path)
        raise
    lease.release()


def _killed_runs_own(output: str, entries: list[str], record: dict[str, Any] | None) -> bool:
    """Whether every file under the entries (recursively) is one the killed run of ``record``
    declared it writes (a pattern of ``writes`` matching its path under ``output``), or one of
    their temporaries (:func:`storage.write_bytes_atomic`'s ``NAME.tmp-<pid>-<hex>``)."""
    pattern = _declared(record.get("writes") if record else None)
    if pattern is None:
        return False
    known = record.get("files") if isinstance(record.get("files"), dict) else {}
    return all(pattern.fullmatch(rel) and _written_by_it(storage.join(output, rel), rel, known)
               for rel in _files_under(output, entries))


def _written_by_it(url: str, rel: str, known: dict) -> bool:
    """Whether a declared file is the killed run's by content: the bytes it recorded it was
    about to write (:meth:`Lease.record_files`; a temporary of one: no longer than those), or a
    kind whose first bytes show it (:func:`swe.leftovers.is_swes_file`)."""
    if not is_regular(url):  # a named pipe would block the read; swe writes regular files
        return False
    base = re.sub(rf"{storage.ATOMIC_TEMP}$", "", rel)
    fact = known.get(base)
    if isinstance(fact, list) and len(fact) == 2:
        data = storage.read_bytes(url)
        if base == rel:
            return hashlib.sha256(data).hexdigest() == fact[0]
        return isinstance(fact[1], int) and len(data) <= fact[1]
    return is_swes_file(url)


def _declared(writes: Sequence[str]) -> re.Pattern | None:
    """One pattern for the paths ``writes`` declares and their temporaries (``None``: none)."""
    if not isinstance(writes, (list, tuple)) or not writes:
        return None
    try:
        return re.compile("|".join(rf"(?:{w})(?:{storage.ATOMIC_TEMP})?" for w in writes))
    except (re.error, TypeError):
        return None


def _files_under(output: str, entries: list[str]) -> list[str]:
    """Every file under ``entries`` (recursively), as paths relative to ``output``."""
    fs, path = storage.filesystem(output)
    root = path.rstrip("/") + "/"
    files = [f for entry in entries for f in (fs.find(entry) if fs.isdir(entry) else [entry])]
    return [f.removeprefix(root) for f in files]


def _remove_declared(output: str, writes: Sequence[str]) -> None:
    """Remove what a failed block wrote: the files of ``output`` that ``writes`` declares, and
    the folders they leave empty. Anything else (a file someone put there meanwhile) is kept,
    with a warning naming it."""
    fs, path = storage.filesystem(output)
    pattern = _declared(writes)
    kept = []
    for rel in _files_under(output, _entries_besides_lease(output)):
        if pattern is not None and pattern.fullmatch(rel):
            fs.rm(f"{path.rstrip('/')}/{rel}")
        else:
            kept.append(rel)
    if storage.is_local(output):
        for folder, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0]))[:-1]:
            with contextlib.suppress(OSError):  # not empty: a kept file's
                os.rmdir(folder)
    if kept:
        log.warning("kept %s in %s: not written by this run", ", ".join(sorted(kept)), output)
