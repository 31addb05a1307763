"""The driver of ``swe finetune``: check everything before any work, run one Ray Train worker
(:mod:`swe.finetune.train`), which writes the classifier folder; a rerun of a killed job resumes
from its last checkpoint under ``<output>/work``.

The driver reads no data: a task checks the labelled file(s) and returns the label set.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from swe import storage
from swe.artifacts import refuse_inside
from swe.finetune.train import FinetuneJob, train_loop
from swe.lease import LEASE_FILE, Lease
from swe.leftovers import foreign_files, remove_leftovers

log = logging.getLogger(__name__)

__all__ = ["FinetuneReport", "finetune"]

HEADS = ("linear", "mlp")
MAX_LR = 1000.0  # a learning rate above it only makes the weights overflow (NaN, or float32 inf)


@dataclass(frozen=True)
class FinetuneReport:
    """What ``swe finetune`` did."""

    output: str
    labels: list[str]
    multi_label: bool
    steps: int
    best_step: int
    best_dev_loss: float
    best_dev_acc: float
    resumed_at: list[int]
    seconds: float


def _check(job: FinetuneJob) -> None:
    """Every option in range, before any work."""
    if job.head not in HEADS:
        raise ValueError(f"--head must be one of {', '.join(HEADS)}, got {job.head!r}")
    for name in ("hidden", "epochs", "batch_size", "patience"):
        value = getattr(job, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got "
                             f"{value!r}")
    if job.eval_every < 0:
        raise ValueError(f"--eval-every must be >= 0 (0: once per epoch), got {job.eval_every}")
    for name, low in (("lr", 0.0), ("table_lr", -1.0)):
        value = getattr(job, name)
        if not math.isfinite(value) or value <= low or (name == "table_lr" and value < 0) or (
                value > MAX_LR):
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number "
                             f"{'> 0' if name == 'lr' else '>= 0 (0: the table stays frozen)'}"
                             f" and at most {MAX_LR:g}, got {value}")
    if job.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {job.seed}")
    if job.dev is None and not 0 < job.dev_share < 1:
        raise ValueError(f"--dev-share must lie strictly between 0 and 1, got {job.dev_share}")


def _check_dev(job: FinetuneJob) -> None:
    """``--dev`` is not the ``--data`` file (by resolved path: a symlink, ``..`` or a hard link;
    by bucket and key for object stores): dev loss, accuracy and early stopping would be
    measured on the training rows."""
    if job.dev is None:
        return
    if storage.overlaps(job.dev, job.data):  # hard links included
        raise ValueError(f"--dev {job.dev} is the --data file {job.data}: dev loss, accuracy "
                         "and early stopping would be measured on training rows; pass a "
                         "held-out file, or leave out --dev (a --dev-share of --data is held "
                         "out)")


def _check_output(job: FinetuneJob) -> dict | None:
    """The output is new, or holds only a killed run's ``work/`` (which the rerun resumes), or
    this job's finished classifier beside its run's ``work/`` (a kill after the classifier was
    written: the rerun only removes ``work/``); then its training state."""
    for given in (job.model, job.data, *([job.dev] if job.dev else [])):
        if storage.overlaps(given, job.output):
            raise ValueError(f"--output {job.output} overlaps the input {given}; name a new "
                             "folder")
    storage.refuse_file_output(job.output)
    refuse_inside(job.output)
    fs, path = storage.filesystem(job.output)
    if fs.exists(path):
        names = {n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(path)}
        names = {n for n in names if not n.startswith(LEASE_FILE)}  # a killed run's lease
        finished = _finished(job) if "work" in names else None
        if not fs.isdir(path) or (names - {"work"} and not finished):
            raise FileExistsError(f"--output {job.output} exists and holds more than a killed "
                                  "run's work/ folder; name a new folder")
        odd = _not_a_killed_runs(fs, f"{path}/work", storage.is_local(job.output)) \
            if names and not finished else []  # beside a finished classifier: _remove_work
        if odd:
            listed = ", ".join(odd[:3]) + (", ..." if len(odd) > 3 else "")
            raise FileExistsError(
                f"--output {job.output} holds a work/ folder that is not a killed swe finetune "
                f"run's (it would be deleted): {listed} is not what a run writes; move that "
                "away to resume the killed run, or name a new folder")
        return finished
    return None


def _finished(job: FinetuneJob) -> dict | None:
    """The training state of ``job``'s own classifier when the output holds it, whole, with the
    job's run folder (same options, same inputs) still in ``work/``; None otherwise.
    ``classifier.json`` is written last, once the model and head are in place."""
    from swe.classifier import CLASSIFIER, CLASSIFIER_FORMAT
    from swe.modelfiles import ModelFolder

    if not _exists(storage.join(job.output, "work", "runs", _run_name(job))):
        return None
    try:
        folder = ModelFolder(job.output, fmt=CLASSIFIER_FORMAT, version=1, config_name=CLASSIFIER)
        folder.check_sizes()
        options = json.loads(json.dumps({k: v for k, v in asdict(job).items() if k != "output"}))
        if folder.get("options", dict) != options:
            return None
        return {**folder.get("training", dict), "labels": folder.get("labels", list),
                "multi_label": folder.get("multi_label", bool)}
    except (ValueError, OSError):  # not a classifier, or not a whole one
        return None


def _not_a_killed_runs(fs: Any, work: str, local: bool) -> list[str]:
    """What under ``work`` is not what a killed run leaves (:data:`_KILLED_RUN`), by path under
    the output, each entry a real file or folder (not a link, which the cleanup would delete
    through) whose content is a run's (:func:`swe.leftovers.foreign_files`). Empty when
    ``work`` is a killed run's."""
    def real(url: str, folder: bool) -> bool:
        kind = fs.isdir(url) if folder else fs.isfile(url)
        return kind and not (local and os.path.islink(url))

    def odd(url: str, spec: dict, at: str) -> list[str]:
        if not real(url, True):
            return [at]
        found = []
        for full in fs.ls(url):
            name = full.rstrip("/").rsplit("/", 1)[-1]
            inner = next((v for p, v in spec.items() if p.fullmatch(name)), False)
            if inner is False or not real(full, inner is not None):
                found.append(f"{at}/{name}")
            elif inner is not None:
                found += odd(full, inner, f"{at}/{name}")
        return found

    found = odd(work, _KILLED_RUN, "work")
    scheme = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    url = work if local else f"{scheme}://{work}"
    return found or [f"work/{rel}" for rel in foreign_files(url)]  # by content too


def _inspect(path: str, text_column: str, label_column: str, share: float = 0.0,
             seed: int = 0) -> dict:
    """In a task: the file's rows, labels and kind (every check of ``read_labelled``), and how
    many rows the seeded dev ``share`` holds out."""
    from swe.finetune.data import dev_mask, read_labelled

    data = read_labelled(path, text_column, label_column)
    rows = sorted(zip(data.texts, map(str, data.labels), strict=True))
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    held = int(dev_mask(data.texts, share, seed).sum()) if share else 0
    return {"rows": len(data.texts), "classes": data.classes, "multi_label": data.multi_label,
            "digest": digest, "held_out": held}


def _check_share(job: FinetuneJob, facts: dict) -> None:
    """The seeded dev share holds at least one row and leaves at least one for training."""
    held, rows = facts["held_out"], facts["rows"]
    if 0 < held < rows:
        return
    which = "no row" if held == 0 else "every row"
    raise ValueError(f"--dev-share {job.dev_share} of the {rows} rows of {job.data} holds {which}"
                     f" (the rows are drawn by a hash of their text and --seed): give a --dev "
                     "file, another --dev-share, or more rows")


_RUN = re.compile(r"finetune-[0-9a-f]{12}")  # a run folder's name (_run_name)
# What a killed run leaves in <output>/work, as seen in runs: Ray Train's files in a run folder,
# and train_loop's in each checkpoint. A pattern maps to its folder's own spec, or None: a file.
_CHECKPOINT_FILES = {re.compile(r"state\.json|state\.safetensors"): None}
_RUN_FOLDER = {re.compile(r"\.validate_storage_marker|checkpoint_manager_snapshot\.json"): None,
               re.compile(r"checkpoint_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(\.\d+)?"): _CHECKPOINT_FILES}
_KILLED_RUN = {re.compile("runs"): {_RUN: _RUN_FOLDER}}


def _run_name(job: FinetuneJob) -> str:
    spec = {"job": asdict(job), "inputs": [storage.fingerprint(p) for p in
                                           (job.data, job.dev) if p],
            "model": storage.fingerprint(job.model)}
    return "finetune-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()
                                        ).hexdigest()[:12]


def finetune(model: str, data: str, output: str, *, max_failures: int = 2,
             **options: Any) -> FinetuneReport:
    """Fine-tune the model at ``model`` with a head on the labelled ``data`` and write the
    classifier to ``output`` (options: :class:`FinetuneJob`'s fields)."""
    import time

    import ray

    from swe.raysetup import init_ray

    unknown = set(options) - {f.name for f in fields(FinetuneJob)}
    if unknown:
        raise TypeError(f"unknown finetune options: {', '.join(sorted(unknown))}")
    dev = options.pop("dev", None)
    job = FinetuneJob(model=storage.absolute(model), data=storage.absolute(data),
                      dev=storage.absolute(dev) if dev else None,
                      output=storage.output_url(output), **options)
    _check(job)
    _check_dev(job)
    _check_output(job)
    from swe.modelfiles import ModelFolder

    ModelFolder(job.model).check_sizes()  # a missing or cut model: one line before any work
    t0 = time.perf_counter()
    init_ray()
    inspect = ray.remote(num_cpus=0.5)(_inspect)
    share = 0.0 if job.dev else job.dev_share
    facts = ray.get([inspect.remote(p, job.text_column, job.label_column, s, job.seed)
                     for p, s in ((job.data, share), (job.dev, 0.0)) if p])
    if not job.dev:
        _check_share(job, facts[0])
    if job.dev and facts[0]["digest"] == facts[1]["digest"]:
        raise ValueError(f"--dev {job.dev} holds the same rows as --data {job.data} (a copy): "
                         "dev loss, accuracy and early stopping would be measured on training "
                         "rows; pass a held-out file, or leave out --dev")
    if job.dev and facts[0]["multi_label"] != facts[1]["multi_label"]:
        raise ValueError(f"{job.data} and {job.dev}: one is multi-label and the other is not")
    with Lease(job.output, purpose="finetune"):  # one writer; checked again once held
        state = _check_output(job) or _train(job, max_failures)
        _remove_work(job.output)
    best = min(state["history"], key=lambda h: h["dev_loss"])
    return FinetuneReport(job.output, state["labels"], state["multi_label"], state["step"],
                          best["step"], round(best["dev_loss"], 5), round(best["dev_acc"], 2),
                          state["resumed_at"], round(time.perf_counter() - t0, 1))


def _remove_work(output: str) -> None:
    """Remove the finished run's ``work/``, unless it holds files the run did not write (put
    there while it trained): then it is kept, with a warning naming them."""
    work = storage.join(output, "work")
    fs, path = storage.filesystem(work)
    odd = _not_a_killed_runs(fs, path, storage.is_local(work))
    if odd:
        log.warning("kept %s: it holds files the run did not write (%s); remove it when they "
                    "are safe elsewhere", work, ", ".join(odd[:3]))
    else:
        storage.remove_tree(work)


def _train(job: FinetuneJob, max_failures: int) -> dict:
    """Run (or resume) the Ray Train job; the state the worker recorded in ``classifier.json``."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

    from swe.build.training import trainer_class
    from swe.modelfiles import ModelFolder
    from swe.raysetup import fit

    runs = storage.join(job.output, "work", "runs")
    name = _run_name(job)
    for old in storage.child_names(runs) if _exists(runs) else []:
        if old != name:  # another config's killed run
            remove_leftovers(storage.join(runs, old), "it is another finetune config's run")
    fs, path = storage.pyarrow_filesystem(runs)
    scaling = ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1})
    fit(trainer_class(scaling)(
        train_loop, train_loop_config={"job": job}, scaling_config=scaling,
        run_config=RunConfig(name=name, storage_path=path, storage_filesystem=fs,
                             failure_config=FailureConfig(max_failures=max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=1)),
    ))
    from swe.classifier import CLASSIFIER, CLASSIFIER_FORMAT

    folder = ModelFolder(job.output, fmt=CLASSIFIER_FORMAT, version=1, config_name=CLASSIFIER)
    return {**folder.get("training", dict), "labels": folder.get("labels", list),
            "multi_label": folder.get("multi_label", bool)}


def _exists(url: str) -> bool:
    fs, path = storage.filesystem(url)
    return fs.exists(path)
