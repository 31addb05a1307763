"""The evaluation tasks: the one registry from a task name to the function that runs it.

Names:

* ``stsb-dev``, ``stsb-test``: STS-B (Spearman × 100 of cosine similarity);
* ``sts:PATH``: an STS TSV/CSV with ``sentence1``, ``sentence2``, ``score``, or a dir of them
  (their mean);
* ``tatoeba-XXX``: Tatoeba XXX–eng translation retrieval (e.g. ``tatoeba-deu``);
* ``pairs:PATH``: retrieval on aligned ``src``/``tgt`` pairs in Parquet, e.g. a build's
  held-out ``work/train_data/dev`` (mean accuracy × 100 of both directions);
* ``bucc-XXX``: the Tatoeba XXX–eng pairs mined among distractor sentences (XXX in deu, cmn,
  jpn; :func:`swe.eval.mining.bucc_tatoeba`);
* ``mr``, ``cr``, ``subj``, ``mpqa``, ``sst2``, ``trec``, ``agnews``: classification on frozen
  embeddings, and ``classification`` for all seven.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from swe.eval import classification
from swe.eval.data import STSB, TATOEBA, data_root
from swe.eval.encoders import Encoder
from swe.eval.mining import DISTRACTOR_CORPORA, bucc_tatoeba
from swe.eval.retrieval import pair_retrieval, tatoeba
from swe.eval.similarity import sts_dir

__all__ = ["CHOICES", "FAMILIES", "GROUPS", "NAMED", "TaskKind", "UnknownTaskError", "expand",
           "headline", "known", "resolve", "run_task"]


class UnknownTaskError(ValueError):
    """A task name the registry does not know."""


@dataclass(frozen=True)
class TaskKind:
    """How a kind of task runs (``run(encoder, arg, data, distractors)``) and the metric its
    table column shows."""

    run: Callable[[Encoder, str, Path, int], dict[str, float]]
    metric: str


#: ``prefix + ARG`` tasks.
FAMILIES: dict[str, TaskKind] = {
    "stsb-": TaskKind(lambda enc, split, data, _: sts_dir(enc, data / STSB / f"{split}.tsv"),
                      "spearman"),
    "sts:": TaskKind(lambda enc, path, data, _: sts_dir(enc, path), "spearman"),
    "tatoeba-": TaskKind(lambda enc, lang, data, _: tatoeba(enc, lang, data / TATOEBA), "acc"),
    "pairs:": TaskKind(lambda enc, path, data, _: pair_retrieval(enc, path), "acc"),
    "bucc-": TaskKind(lambda enc, lang, data, n: bucc_tatoeba(enc, lang, data, n), "f1"),
}
#: Tasks by exact name (the argument is the name).
NAMED: dict[str, TaskKind] = {
    name: TaskKind(lambda enc, task, data, _: classification.classify(enc, task, data), "acc")
    for name in classification.TASKS}
#: Names that stand for several tasks.
GROUPS: dict[str, tuple[str, ...]] = {"classification": classification.TASKS}
#: The arguments a family takes, where they are a fixed few (STS-B's splits, the languages
#: with distractor corpora); a name outside them is refused before any work.
CHOICES: dict[str, tuple[str, ...]] = {
    "stsb-": ("dev", "test", "train"),
    "bucc-": tuple(sorted(set(DISTRACTOR_CORPORA) - {"eng"}))}


def known() -> str:
    """The task names, as an error lists them."""
    families = [f"{p}{a}" for p, args in CHOICES.items() for a in args]
    return ", ".join([*families, "sts:PATH", "tatoeba-XXX", "pairs:PATH", *NAMED, *GROUPS])


def resolve(task: str) -> tuple[TaskKind, str]:
    """The kind of ``task`` and its argument; :class:`UnknownTaskError` if there is none."""
    if task in NAMED:
        return NAMED[task], task
    for prefix, kind in FAMILIES.items():
        arg = task[len(prefix):]
        if task.startswith(prefix) and arg and arg in CHOICES.get(prefix, (arg,)):
            return kind, arg
    raise UnknownTaskError(f"unknown task {task!r}; known tasks: {known()}")


def expand(tasks: Iterable[str]) -> list[str]:
    """``tasks`` with each group replaced by its members, every name checked."""
    out = [t for task in tasks for t in GROUPS.get(task, (task,))]
    for task in out:
        resolve(task)
    return out


def headline(task: str) -> str:
    """The metric a task's table column shows."""
    return resolve(task)[0].metric


def run_task(encoder: Encoder, task: str, data: str | os.PathLike | None = None,
             distractors: int = 20_000) -> dict[str, float]:
    """Run ``task`` on ``encoder`` with the data under ``data`` (default
    :func:`~swe.eval.data.data_root`); ``distractors`` per side for ``bucc-XXX``."""
    kind, arg = resolve(task)
    return kind.run(encoder, arg, Path(data or data_root()), distractors)
