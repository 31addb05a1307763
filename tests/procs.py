"""Finding this test session's own Ray worker processes (never another session's), to kill them."""

from __future__ import annotations

import os


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
