"""How a command's process treats SIGINT and SIGTERM.

A job's SIGTERM (what schedulers, Kubernetes, systemd and ``timeout`` send) is its Ctrl-C: it
raises ``KeyboardInterrupt``, which every command reports in one line (exit status 130, see
``swe.commands``), from the command's first line to its last. Ray's own handler, which
``ray.init`` installs, ended the driver with status 15 and no word; its native one dumped a
stack. Two kinds of work are never cut by a signal: putting back what a failed command changed
(:func:`shielded`), and Ray's shutdown once the result is in (:func:`quiet_exit`).
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["quiet_exit", "shielded", "sigterm_during_ray_init", "sigterm_is_ctrl_c"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum: int, frame: Any) -> None:
    """The SIGTERM handler of a job: raise ``KeyboardInterrupt``, as a Ctrl-C does."""
    raise KeyboardInterrupt


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def sigterm_is_ctrl_c() -> None:
    """From now on SIGTERM raises ``KeyboardInterrupt`` (in the main thread; elsewhere
    handlers cannot be set, and nothing changes)."""
    if _main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """SIGINT and SIGTERM are ignored inside the block, then handled as before: for putting
    back what a failed command changed, which a second Ctrl-C (a terminal and ``timeout`` both
    send one) must not cut halfway."""
    if not _main_thread():
        yield
        return
    before = {s: signal.signal(s, signal.SIG_IGN) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _ignore() -> None:
    for s in _SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def quiet_exit() -> None:
    """At exit, SIGINT and SIGTERM are ignored: the result is in, and Ray's shutdown (its own
    ``atexit`` handler) cut by one printed a traceback and could end in a segmentation fault.
    Handlers run last-registered first, so call this after ``ray.init``; a second call moves
    the one registration to last, not adds another."""
    if _main_thread():
        atexit.unregister(_ignore)
        atexit.register(_ignore)


@contextlib.contextmanager
def sigterm_during_ray_init(job: bool) -> Iterator[None]:
    """In a ``job``, a SIGTERM while ``ray.init`` runs inside the block is a Ctrl-C too.
    ``ray.init`` sets a handler that exits with status 15 (its ``SystemExit`` becomes
    ``KeyboardInterrupt`` here), and the driver's core worker installs a native one that dumped
    a 17-line stack and killed the process: the driver (only the driver; Ray's workers keep
    theirs) goes without it, as ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER`` would have it."""
    if not job:
        yield
        return
    from ray._private import ray_constants

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True  # read when the core worker starts
    try:
        yield
    except SystemExit as e:
        if e.code != signal.SIGTERM:
            raise
        raise KeyboardInterrupt from None
    finally:
        sigterm_is_ctrl_c()  # again: ray.init replaced it with Ray's own
