"""Refinement's progress line: what a user watching a long Ray Train run sees at least every
30 s. Rank 0 writes it to a Ray queue that the driver logs from (:func:`relay`); without a
queue it prints (workers' own output is hidden unless ``SWE_RAY_LOGS=1``)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["PROGRESS_SECONDS", "progress", "relay"]

log = logging.getLogger("swe.build")

PROGRESS_SECONDS = 30.0  # a progress line at least this often (rank 0)


def progress(max_steps: int, state: dict, since: list[float], rank: int, last: dict,
             queue: Any = None, every: float = PROGRESS_SECONDS) -> None:
    """Rank 0, once ``every`` seconds have passed since ``last`` (the previous line's time and
    step, updated): a line with the step, its rate and ETA, the train loss since the last
    evaluation, the last dev loss and the best so far."""
    now = time.monotonic()
    if rank or now - last["at"] < every or not since:
        return
    rate = (state["step"] - last["step"]) / (now - last["at"])
    left = max_steps - state["step"]
    dev = state["history"][-1]["dev_loss"] if state["history"] else state.get(
        "initial_dev_loss")
    best = state.get("best_loss")
    line = (f"[refine] step {state['step']:,}/{max_steps:,}, {rate:.1f} steps/s, "
            f"ETA {left / max(rate, 1e-9) / 60:.0f} min at most; train loss "
            f"{np.mean(since):.4f}, dev loss " + (f"{dev:.4f}" if dev is not None else "–")
            + (f" (best {best:.4f} at step {state['best_step']:,})" if best is not None
               else ""))
    last.update(at=now, step=state["step"])
    if queue is None:
        print(line, flush=True)
        return
    with contextlib.suppress(Exception):  # a full or gone queue never stops training
        queue.put_nowait(line)


@contextlib.contextmanager
def relay() -> Iterator[Any]:
    """A Ray queue for the workers' progress lines, logged on the driver by a thread while the
    block runs (then drained and closed)."""
    from ray.util.queue import Empty, Queue

    queue = Queue(maxsize=100, actor_options={"num_cpus": 0})
    done = threading.Event()

    def pump() -> None:
        while True:
            try:
                log.info("%s", queue.get(timeout=1))
            except Empty:
                if done.is_set():
                    return
            except Exception:  # the queue is gone: nothing more to show
                return

    thread = threading.Thread(target=pump, name="refine-progress", daemon=True)
    thread.start()
    try:
        yield queue
    finally:
        done.set()
        thread.join(timeout=5)
        with contextlib.suppress(Exception):
            queue.shutdown()
