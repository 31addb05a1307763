"""Finding this test session's own Ray worker processes (never another session's), to kill them."""

from __future__ import annotations

import contextlib
import os
import signal
import time

# Ray keeps at most num_cpus idle worker processes and kills the others after 1 s; on a 2-core
# box every Ray Data execution then starts fresh workers (seconds each: Python, Ray, pyarrow).
# The tests let the others live 60 s: conftest sets this for the session's Ray and the cluster's
# nodes, and subprocess drivers get it from own_env() (tests/test_bulk.py + bulk_commit + build:
# 338 s -> 271 s here). Latency only: no result changes. Ray's num_cpus kept idle workers stay:
# keeping 8 started no fewer workers over the suite (258 either way) and idled 25 CPU-s more
# (an idle worker spends about 0.4 CPU-s a minute in its main thread; docs/limits.md).
# Ray Train's preemption watcher (one more actor process per run, ~1.5 CPU-s here) watches for
# cloud nodes about to be reclaimed; the tests' nodes never are, and no test depends on it.
# Ray's log monitor globs the session's log folder every 0.1 s while it holds under 1,000 files;
# a session Ray's worker logs reach several hundred, and the glob cost 0.97 CPU-s per 30 s with
# 327 files, 0.32 with a glob every 5 s (the rest is reading the open files). It forwards worker
# output to the driver, which swe's local Ray turns off (log_to_driver), and nothing in the tests
# reads Ray's log stream: latency only, like the others.
WARM_WORKERS = {"RAY_idle_worker_killing_time_threshold_ms": "60000",
                "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
                "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0", "LOG_NAME_UPDATE_INTERVAL_S": "5"}


def own_env() -> dict[str, str]:
    """The environment for a subprocess that starts its own local Ray: no ``RAY_*`` from this
    session (no RAY_ADDRESS), usage stats off, warm workers kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", **WARM_WORKERS}


def joined_env() -> dict[str, str]:
    """The environment for a subprocess driver that joins this session's Ray (as a driver under
    ``ray job submit`` joins its cluster) instead of starting a local one: seconds of start-up
    saved per driver. A killed driver's job ends, and Ray stops that job's workers and actors."""
    import ray

    return {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}


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
