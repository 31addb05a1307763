"""Where the test suite's CPU goes, by test: every process's CPU time is charged to the
pytest(-xdist) worker it descends from and the test that worker runs at the time (Ray's
workers, daemons and subprocess drivers descend from the worker that started them).

    python tools/cpu_by_test.py sample OUT.json &          # samples until the suite ends
    PYTHONPATH=tools .venv/bin/python -m pytest -q -n 2 --dist worksteal -p cpu_by_test
    python tools/cpu_by_test.py stop; python tools/cpu_by_test.py show OUT.json

Loaded by pytest (``-p cpu_by_test``), this module logs each test's start and end; run as a
script, it samples ``/proc`` every 0.5 s (a process that lives less than that is missed) and
prints the heaviest tests and process kinds. Linux only.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time

LOG = "/tmp/cpu_by_test.log"
STOP = "/tmp/cpu_by_test.stop"


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    with open(LOG, "a") as f:
        f.write(f"S {os.getpid()} {nodeid}\n")


def _procs() -> dict[int, tuple[int, str, float, str]]:
    """pid -> (parent pid, start time, CPU seconds, command name)."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        p = rest.split()
        out[int(pid)] = (int(p[1]), p[19], (int(p[11]) + int(p[12])) / tick, head.split("(")[1])
    return out


def sample(path: str) -> None:
    """Sample until ``STOP`` exists; write ``{"tests": {...}, "kinds": {...}}`` to ``path``."""
    for stale in (LOG, STOP):
        if os.path.exists(stale):
            os.remove(stale)
    last: dict[tuple[int, str], float] = {}
    current: dict[int, str] = {}
    tests, kinds = collections.defaultdict(float), collections.defaultdict(float)
    seen = 0
    while not os.path.exists(STOP):
        if os.path.exists(LOG):
            with open(LOG) as f:
                f.seek(seen)
                for line in f.read().splitlines():
                    _, pid, node = line.split(" ", 2)
                    current[int(pid)] = node
                seen = f.tell()
        procs = _procs()
        for pid, (_, start, cpu, comm) in procs.items():
            used, last[(pid, start)] = cpu - last.get((pid, start), 0.0), cpu
            owner = pid
            while owner in procs and owner not in current:
                owner = procs[owner][0]
            if used > 0 and owner in current:
                tests[current[owner]] += used
                kinds[comm] += used
        time.sleep(0.5)
    with open(path, "w") as f:
        json.dump({"tests": tests, "kinds": kinds}, f, indent=0)


def show(path: str, top: int = 30) -> None:
    with open(path) as f:
        data = json.load(f)
    print(f"{sum(data['tests'].values()):.0f} CPU-s charged to tests")
    for name in ("tests", "kinds"):
        print(f"-- {name}")
        for key, cpu in sorted(data[name].items(), key=lambda kv: -kv[1])[:top]:
            print(f"{cpu:7.1f}  {key}")


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or ["help"]
    if command == "sample":
        sample(*rest)
    elif command == "stop":
        open(STOP, "w").close()
    elif command == "show":
        show(*rest)
    else:
        print(__doc__)
