"""Finding this test session's own Ray worker processes (never another session's), to kill them."""

from __future__ import annotations

import contextlib
import os
import signal
import time


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def own_ray_pids(title: bytes) -> list[int]:
    """Ray worker processes of *this* test session's Ray (descendants of this process) whose
    process title starts with ``title``."""
    pids = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if not f.read().startswith(title):
                    continue
            pid = int(d)
            while pid > 1 and pid != os.getpid():
                pid = _parent(pid)
            if pid == os.getpid():
                pids.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def session_pids(sid: int) -> list[int]:
    """Every process of session ``sid`` (a subprocess started with ``start_new_session``)."""
    pids = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                # after the name: state, ppid, pgrp, session, tty_nr, ...; a zombie is dead
                fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid and fields[0] != "Z":
                    pids.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (a driver and the local Ray it started)."""
    for _ in range(50):
        pids = session_pids(sid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
