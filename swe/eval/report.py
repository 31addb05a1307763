"""The evaluation report: encoders × tasks, optionally speed and size, as data and Markdown."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from swe.eval.data import data_root, stsb_file
from swe.eval.encoders import load_encoder
from swe.eval.tasks import expand, headline, run_task

__all__ = ["EvaluationError", "Report", "evaluate"]

log = logging.getLogger(__name__)


class EvaluationError(ValueError):
    """An encoder, task or data folder that is missing or unusable; the message names it and
    says why (exit status 2, like every wrong input: swe.commands)."""


@dataclass
class Report:
    """Scores ``results[spec][task]`` (dicts of metrics) and ``speed[spec]`` (see
    :func:`swe.eval.speed.measure`; empty unless asked for)."""

    tasks: list[str]
    results: dict[str, dict[str, dict]] = field(default_factory=dict)
    speed: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """``{"results": …, "speed": …}`` for JSON."""
        return {"results": self.results, "speed": self.speed}

    def markdown(self) -> str:
        """Rows = encoders; columns = each task's headline score, their mean, speed and size."""
        extra = ["sent/s", "size MB"] if self.speed else []
        lines = ["| model | " + " | ".join([*self.tasks, "avg", *extra]) + " |",
                 "|---|" + "---:|" * (len(self.tasks) + 1 + len(extra))]
        for spec, r in self.results.items():
            vals = [r[t][headline(t)] for t in self.tasks]
            cells = [f"{v:.2f}" for v in vals] + [f"{sum(vals) / len(vals):.2f}"]
            if self.speed:
                s = self.speed.get(spec, {})
                cells += [f"{s['sentences_per_s']:,.0f}" if "sentences_per_s" in s else "–",
                          f"{s['size_bytes'] / 1e6:.1f}" if s.get("size_bytes") else "–"]
            lines.append(f"| {spec} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _scores(report: Report, spec: str, data: Path, distractors: int, label: str) -> None:
    """Load ``spec`` and run every task of ``report`` on it."""
    try:
        encoder = load_encoder(spec)
    except (FileNotFoundError, ImportError, ValueError) as e:
        raise EvaluationError(f"{spec}: {e}") from e
    report.results[spec] = {}
    for n, task in enumerate(report.tasks, start=1):
        t = time.perf_counter()
        try:
            report.results[spec][task] = run_task(encoder, task, data, distractors)
        except (FileNotFoundError, ValueError) as e:
            raise EvaluationError(f"{task}: {e}") from e
        log.info("[%s, task %d/%d] %s %s %s=%.2f (%.1fs)", label, n, len(report.tasks), spec,
                 task, headline(task), report.results[spec][task][headline(task)],
                 time.perf_counter() - t)


def evaluate(specs: Sequence[str], tasks: Sequence[str], data: str | os.PathLike | None = None,
             distractors: int = 20_000, speed: int = 0, threads: int | None = None) -> Report:
    """Every encoder of ``specs`` (see :mod:`swe.eval.encoders`) on every task (see
    :mod:`swe.eval.tasks`; groups expanded); with ``speed`` > 0, also sentences/s, memory and
    size on that many STS-B train sentences, each encoder in a fresh process at ``threads``.

    Unknown tasks raise :class:`~swe.eval.tasks.UnknownTaskError` before anything is loaded; an
    encoder or task that cannot run raises :class:`EvaluationError`."""
    report = Report(expand(tasks))
    root = Path(data or data_root())
    own_files = all(t.startswith(("sts:", "pairs:")) for t in report.tasks) and not speed
    if not root.is_dir() and not own_files:  # tasks that name their own file need no data dir
        raise EvaluationError(f"data dir not found: {root} (pass --data or set SWE_DATA)")
    for m, spec in enumerate(specs, start=1):
        _scores(report, spec, root, distractors, f"model {m}/{len(specs)}")
    if speed:
        from swe.eval.speed import measure, read_texts

        texts = read_texts(stsb_file("train", root), speed)
        for spec in specs:
            report.speed[spec] = measure(spec, texts, threads=threads)
            log.info("speed %s: %.0f sentences/s", spec, report.speed[spec]["sentences_per_s"])
    return report
