"""Stage ``refine`` (step 3): refine the word vectors on Ray Train; the teacher stays frozen.

The student is the static model itself: a sentence vector is the mean of its word rows
(``embedding_bag``), so the trained matrix drops straight back into a ``StaticModel``. Each
worker reads the refinement data (texts + teacher embeddings, or translation pairs), maps texts
to vocabulary rows with the same rule as inference, and runs Adam with gradient clipping: on
the whole matrix (``optimizer = "dense"``, the default, what every measured build used), or lazy
Adam on the rows each batch touches, only those rows exchanged between workers (``sparse``).
Every ``eval_every`` steps the validation loss is computed and reported; every
``checkpoint_every`` steps (and when training stops) a checkpoint (current and best matrix, Adam
moments, counters, history) goes to the run's storage; a restarted worker or a rerun build
resumes from it. Early stopping after ``patience`` evaluations without a better
validation loss; the best matrix is ``<output>/step3`` and ``<output>/model``, the curves are in
``<output>/refinement/``. The loop each worker runs is ``swe.build.training.trainer``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from swe import storage
from swe.artifacts import MANAGED, holder_of, swe_folder_around
from swe.build.markers import StageDir
from swe.build.outputs import train_dev_urls
from swe.build.stage import LogPhrases, Section, StageResult
from swe.build.tasks import MiB, remote
from swe.build.training.progress import relay
from swe.build.training.trainer import TrainJob, train_loop
from swe.leftovers import remove_leftovers
from swe.model import StaticModel
from swe.resources import Request

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["RefineConfig", "Result", "plot_history", "run_training"]

log = logging.getLogger("swe.build")
NAME = "refine"
OBJECTIVES = ("none", "distill", "contrastive", "kd")


@dataclass
class RefineConfig:
    """``[refine]``: step 3 on Ray Train. ``objective``: none (stop after PCA) | distill
    (monolingual, eq. 2–3) | contrastive (translation pairs, eq. 4–5) | kd (relational
    multilingual distillation)."""

    objective: str = field(default="none", metadata={
        "choices": OBJECTIVES, "help": "the training objective; none stops after PCA"})
    sentences: str = field(default="drawn", metadata={"choices": {
        "drawn": "the authors': a few random selected sentences per word (below)",
        "selected": "every selected sentence, its teacher embedding from the extraction pass"},
        "help": "distill: the sentences to train and validate on"})
    min_sentences: int = field(default=5, metadata={
        "min": 1, "help": "distill: words with at least this many selected sentences ..."})
    train_per_word: int = field(default=2, metadata={
        "min": 1, "help": "... give this many random training sentences ..."})
    dev_per_word: int = field(default=1, metadata={
        "min": 0, "help": "... and this many validation sentences"})
    dev_max: int = field(default=10_000, metadata={
        "min": 1, "help": "validation sentences (distill) or pairs (contrastive, kd) at most"})
    batch_size: int = field(default=128, metadata={
        "min": 2, "help": "sentences or pairs per step; >= 2 for in-batch negatives"})
    lr: float = field(default=1e-3, metadata={"gt": 0, "help": "Adam learning rate"})
    lr_schedule: str = field(default="constant", metadata={"choices": {
        "constant": "the paper's: lr throughout",
        "linear": "lr decays linearly to 0 at max_steps"}, "help": "the learning rate's schedule"})
    optimizer: str = field(default="dense", metadata={"choices": {
        "sparse": "lazy Adam on the rows a batch touches; workers exchange only those rows, so "
                  "a step's time and traffic follow the batch, not V",
        "dense": "Adam on the whole V x d matrix and its all_reduced gradient, as before the "
                 "option: V x d per step"},
        "help": "the word matrix's optimiser (docs/building.md#sparse-refinement)"})
    teacher_weight: float = field(default=0.0, metadata={
        "min": 0, "help": "distill: weight of a cosine-to-teacher term added to the relational "
                          "loss (the student through a learned linear map to the teacher's "
                          "dimension, thrown away after training); 0 = the paper's loss"})
    kd_weight: float = field(default=0.0, metadata={
        "min": 0, "help": "contrastive: weight of the kd loss added to it (the teacher's "
                          "embedding of every pair's source; train_data runs the teacher)"})
    clip: float = field(default=5.0, metadata={"gt": 0, "help": "gradient norm clipping"})
    tau: float = field(default=0.05, metadata={"gt": 0, "help": "softmax temperature"})
    max_steps: int = field(default=30_000, metadata={"min": 1, "help": "training steps at most"})
    eval_every: int = field(default=40, metadata={"min": 1, "help": "steps between evaluations"})
    patience: int = field(default=5, metadata={
        "min": 1, "help": "evaluations without a better validation loss before stopping"})
    checkpoint_every: int = field(default=200, metadata={
        "min": 1, "help": "steps; a checkpoint holds 4 matrices of V x d'"})
    workers: int = field(default=1, metadata={
        "min": 1, "help": "Ray Train workers (data parallel)"})
    cpus_per_worker: float = field(default=1.0, metadata={
        "resource": True, "help": "Ray CPUs per worker"})
    gpus_per_worker: float = field(default=0.0, metadata={
        "resource": True, "help": "Ray GPUs per worker"})
    max_failures: int = field(default=3, metadata={
        "min": -1, "help": "worker failures survived from the last checkpoint; -1 = unlimited"})
    shuffle_buffer: int = field(default=10_000, metadata={
        "min": 0, "help": "rows in each worker's local shuffle buffer, reshuffled per epoch "
                          "(0 = the global order train_data wrote)"})
    storage: str = field(default="", metadata={
        "help": "Ray Train storage path; default <output>/work/refine/runs. Builds may share "
                "one: each output's runs go in a folder of their own under it"})


    def adam_options(self) -> dict[str, Any]:
        """The keyword arguments of the optimiser the trainer builds (``torch.optim.Adam`` or
        the row-sparse ``RowAdam``): an optimiser option is a field here and an entry here."""
        return {"lr": self.lr}


SECTION = Section("refine", RefineConfig)

#: The other stages' config sections this stage reads (its contract; tests/test_layout.py
#: checks the source names no other).
READS: tuple[str, ...] = ("extraction", "pairs", "pca", "selection")


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """How training went."""

    LOG: ClassVar[LogPhrases] = {
        "steps": ("{} steps", "steps"), "best_step": ("best at step {}", None),
        "first_eval_dev_loss": ("", None), "train_rows": ("{} train rows", "rows"),
        "dev_rows": ("{} dev rows", None)}

    steps: int
    best_step: int
    best_dev_loss: float
    initial_dev_loss: float
    first_eval_dev_loss: float
    resumed_at: list[int] = field(default_factory=list)
    train_rows: int
    dev_rows: int
    early_stopped: bool
    rows_per_s_per_worker: float = 0.0


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[refine]`` and its fit with the rest of the config."""
    r = cfg.refine
    if r.objective in ("contrastive", "kd") and not cfg.pairs:
        errors.append(f"refine.objective = {r.objective!r} trains on translation pairs: add "
                      "[pairs.SRC-TGT] paths = [...]")
    if r.objective == "distill" and cfg.extraction.mode != "sentence":
        errors.append("refine.objective = 'distill' samples the selected sentences: it needs "
                      "extraction.mode = 'sentence'")
    if r.teacher_weight and r.objective != "distill":
        errors.append("refine.teacher_weight is for refine.objective = 'distill' (the other "
                      "objectives have no teacher embedding of every side)")
    if r.kd_weight and r.objective != "contrastive":
        errors.append("refine.kd_weight is for refine.objective = 'contrastive' (objective = "
                      "'kd' is the kd loss alone)")
    if r.sentences == "selected" and r.objective != "distill":
        errors.append("refine.sentences = 'selected' is for refine.objective = 'distill'")
    if r.batch_size % r.workers:
        errors.append(f"refine.batch_size = {r.batch_size} must be a multiple of refine.workers "
                      f"= {r.workers}: each worker takes an equal share of every batch")
    if r.storage:
        _check_storage(r.storage, cfg.output, errors)
    if r.objective == "distill" and r.sentences == "drawn" and cfg.selection.n < r.min_sentences:
        errors.append(f"refine.min_sentences = {r.min_sentences} > selection.n = "
                      f"{cfg.selection.n}: no word has that many selected sentences, so "
                      "distillation would have no data; lower refine.min_sentences (and "
                      "train_per_word + dev_per_word) or raise selection.n")
    if r.min_sentences < r.train_per_word + r.dev_per_word:
        errors.append(f"refine.min_sentences = {r.min_sentences} < train_per_word + "
                      f"dev_per_word = {r.train_per_word + r.dev_per_word}")


def _check_storage(url: str, output: str, errors: list[str]) -> None:
    """``refine.storage`` gets the checks of every path swe writes and removes in: not the
    root, home, the current directory or above it, and apart from the output."""
    try:
        storage.output_url(url, "refine.storage")
    except ValueError as e:
        errors.append(str(e))
        return
    own = bool(output) and storage.within(url, storage.join(output, "work", NAME))
    if output and storage.overlaps(url, output) and not own:
        errors.append(f"refine.storage {url} overlaps the output {output}: name a folder "
                      "outside it (or leave it '' for <output>/work/refine/runs)")
    elif not own and (held := swe_folder_around(url, MANAGED) or holder_of(url)):
        errors.append(f"refine.storage {url} lies in {held}, which swe checksums, lists or "
                      "cleans (a build's rerun clears its work folder): name a folder outside")


def enabled(cfg: BuildConfig) -> bool:
    """Only with a refinement objective."""
    return cfg.refine.objective != "none"


def requests(cfg: BuildConfig) -> list[Request]:
    """The Ray Train workers."""
    r = cfg.refine
    return [Request("refine's Ray Train workers", "lower refine.workers, cpus_per_worker or "
                    "gpus_per_worker", count=r.workers, cpus=r.cpus_per_worker,
                    gpus=r.gpus_per_worker)]


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Starts from step 2 and trains on the refinement data."""
    return ("pca", "train_data")


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The optimisation settings (resources and checkpoint cadence do not count; the later
    settings only when not at the value earlier runs had, so those keep their hash). For
    ``optimizer`` that value is ``dense``, not the default: a hash names what trained the
    matrix, so a build refined before the option keeps its finished stage under
    ``optimizer = 'dense'`` and is refined again (this stage alone) under ``sparse``."""
    r = cfg.refine
    later = tuple((k, v) for k, v, default in (("lr_schedule", r.lr_schedule, "constant"),
                                               ("teacher_weight", r.teacher_weight, 0.0),
                                               ("kd_weight", r.kd_weight, 0.0),
                                               ("optimizer", r.optimizer, "dense"))
                  if v != default)
    return (r.batch_size, r.lr, r.clip, r.tau, r.max_steps, r.eval_every, r.patience, r.workers,
            r.shuffle_buffer, *later)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Train (or resume the run named by this stage's hash), save step 3 and the curves."""
    r = ctx.cfg.refine
    rows = done["train_data"].train_rows
    if rows < r.batch_size:  # train_data checks this when it runs; a reused one did not
        raise ValueError(f"only {rows} training rows (work/train_data, done) for "
                         f"refine.batch_size = {r.batch_size}: lower refine.batch_size, or use "
                         "more corpus or pairs")
    runs, name = runs_folder(r.storage, ctx.cfg.output) or st.path("runs"), \
        f"refine-{st.config_hash}"
    _remove_other_runs(runs, name)
    import ray

    checkpoint, state = run_training(ctx.path("step2"), train_dev_urls(ctx), runs, name, r,
                                     ctx.cfg.seed, done["train_data"].train_rows)
    rows = done["extraction"].words * (ctx.cfg.pca.dim or 1024) * 4
    save = remote(save_best, 512 * MiB + 6 * rows, "refine (save step 3)", "vocab.size")
    ray.get(save.remote(checkpoint, ctx.path("step2"), ctx.teacher, ctx.cfg.languages,
                        ctx.provenance("step3"), ctx.cfg.oov,
                        [ctx.path("step3"), ctx.path("model")]))
    ctx.write_cards()
    curves = ctx.path("refinement")
    storage.write_bytes_atomic(storage.join(curves, "history.json"),
                               json.dumps(state, indent=1).encode())
    plot_history(state, storage.join(curves, "loss.png"))
    return Result(steps=state["step"], best_step=state["best_step"],
                  best_dev_loss=round(state["best_loss"], 5),
                  initial_dev_loss=round(state["initial_dev_loss"], 5),
                  first_eval_dev_loss=round(state["history"][0]["dev_loss"], 5),
                  resumed_at=state["resumed_at"], train_rows=state["train_rows"],
                  dev_rows=state["dev_rows"], early_stopped=state["step"] < r.max_steps,
                  rows_per_s_per_worker=round(state["step"] * r.batch_size / r.workers / max(
                      state.get("step_seconds", 0.0), 1e-9), 1))


def runs_folder(shared: str, output: str) -> str:
    """This output's own folder in a ``refine.storage`` other builds may share (named by a hash
    of the output's URL), so a build never resumes, or removes, another build's runs; ``""``
    without one."""
    if not shared:
        return ""
    key = hashlib.sha256(storage.absolute(output).rstrip("/").encode()).hexdigest()[:16]
    return storage.join(shared, f"output-{key}")


def _remove_other_runs(runs: str, keep: str) -> None:
    """Remove the checkpoints of earlier refine runs (another config) under ``runs``."""
    for name in storage.child_names(runs):
        if name.startswith("refine-") and name != keep:
            log.warning("[refine] removing the checkpoints of an earlier refine run %s (its "
                        "config differs from this run's %s)", name, keep)
            remove_leftovers(storage.join(runs, name),
                             f"it is an earlier refine run's (its config differs from {keep})")


# -- the driver side ---------------------------------------------------------------------------


def _datasets(train_url: str, dev_url: str) -> dict[str, Any]:
    """Both splits as Ray Datasets read from their Parquet shards (streamed, never loaded)."""
    import ray

    out = {}
    for name, url in (("train", train_url), ("dev", dev_url)):
        fs, path = storage.pyarrow_filesystem(url)
        out[name] = ray.data.read_parquet(path, filesystem=fs)
    return out


def run_training(init_model: str, data: tuple[str, str], run_storage: str, run_name: str,
                 refine: RefineConfig, seed: int, train_rows: int) -> tuple[Any, dict]:
    """Run (or resume) the Ray Train job; returns ``(last checkpoint, final state)``."""
    from ray.data import ExecutionOptions
    from ray.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig

    from swe.build.training import trainer_class
    from swe.raysetup import fit

    fs, path = storage.pyarrow_filesystem(run_storage)
    use_gpu = refine.gpus_per_worker > 0
    resources = {"CPU": refine.cpus_per_worker}
    if use_gpu:
        resources["GPU"] = refine.gpus_per_worker
    scaling = ScalingConfig(num_workers=refine.workers, use_gpu=use_gpu,
                            resources_per_worker=resources)
    with relay() as progress:
        result = fit(trainer_class(scaling)(
            train_loop,
            train_loop_config={"job": TrainJob(refine, init_model, seed, train_rows,
                                               progress=progress)},
            datasets=_datasets(*data),
            # One worker reads the whole split itself: the same rows in the same order, without
            # a split coordinator actor (seconds per run on a small box).
            dataset_config=DataConfig(datasets_to_split=["train"] if refine.workers > 1 else [],
                                      execution_options=ExecutionOptions(preserve_order=True)),
            scaling_config=scaling,
            run_config=RunConfig(name=run_name, storage_path=path, storage_filesystem=fs,
                                 failure_config=FailureConfig(max_failures=refine.max_failures),
                                 checkpoint_config=CheckpointConfig(num_to_keep=2)),
        ))
    if result.checkpoint is None:
        raise RuntimeError("refinement finished without a checkpoint: no evaluation ran")
    ckpt = result.checkpoint
    with ckpt.filesystem.open_input_stream(f"{ckpt.path}/state.json") as f:
        return ckpt, json.loads(f.read())


def save_best(checkpoint: Any, step2: str, teacher: str, languages: list[str],
              provenance: dict, oov: str, destinations: list[str]) -> None:
    """In a task: the checkpoint's best matrix (read alone from its safetensors file, as numpy:
    the task imports no torch) with step 2's words, saved to each destination; the driver never
    holds a V × d matrix."""
    import os

    import numpy as np
    from safetensors import safe_open

    with checkpoint.as_directory() as d, \
            safe_open(os.path.join(d, "state.safetensors"), framework="numpy") as f:
        best = np.asarray(f.get_tensor("best"), dtype=np.float32)
    model = StaticModel.from_vectors(StaticModel.load(step2).words, best, tokenizer=teacher,
                                     language=languages, provenance=provenance, oov=oov)
    for dst in destinations:
        model.save(dst)


def plot_history(state: dict, url: str) -> None:
    """The training and validation loss curves as a PNG (best step marked); without matplotlib
    (an offline bundle leaves it out) a line says so and the curves stay in history.json."""
    import io

    try:
        import matplotlib
    except ImportError:
        log.warning("[refine] no loss.png: matplotlib is not installed (the curves are in "
                    "history.json beside it; pip install matplotlib to draw them)")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = state["history"]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot([e["step"] for e in h], [e["train_loss"] for e in h], label="train")
    ax.plot([e["step"] for e in h], [e["dev_loss"] for e in h], label="validation")
    if "initial_dev_loss" in state:
        ax.plot([0], [state["initial_dev_loss"]], "o", color="C1", label="before training")
    ax.axvline(state["best_step"], color="grey", linestyle=":", label="best")
    for i, s in enumerate(state.get("resumed_at", [])):
        ax.axvline(s, color="red", linestyle="--", linewidth=0.8,
                   label="resumed from checkpoint" if i == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    storage.write_bytes_atomic(url, buf.getvalue())
