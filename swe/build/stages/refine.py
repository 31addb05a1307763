"""Stage ``refine`` (step 3): refine the word vectors on Ray Train; the teacher stays frozen.

The student is the static model itself: a sentence vector is the mean of its word rows
(``embedding_bag``), so the trained matrix drops straight back into a ``StaticModel``. Each
worker reads the refinement data (texts + teacher embeddings, or translation pairs), maps texts
to vocabulary rows with the same rule as inference, and runs Adam with gradient clipping.
Every ``eval_every`` steps the validation loss is computed and reported; every
``checkpoint_every`` steps (and when training stops) a checkpoint (current and best matrix, Adam
moments, counters, history) goes to the run's storage; a restarted worker or a rerun build
resumes from it. Early stopping after ``patience`` evaluations without a better
validation loss; the best matrix is ``<output>/step3`` and ``<output>/model``, the curves are in
``<output>/refinement/``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from swe import storage
from swe.build.markers import StageDir
from swe.build.runner import StageResult
from swe.model import StaticModel

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["RefineConfig", "Result", "plot_history", "run_training", "train_loop"]

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
    cpus_per_worker: float = field(default=1.0, metadata={"min": 0, "help": "Ray CPUs per worker"})
    gpus_per_worker: float = field(default=0.0, metadata={"min": 0, "help": "Ray GPUs per worker"})
    max_failures: int = field(default=3, metadata={
        "min": -1, "help": "worker failures survived from the last checkpoint; -1 = unlimited"})
    storage: str = field(default="", metadata={
        "help": "Ray Train storage path; default <output>/work/refine/runs"})


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """How training went."""

    steps: int
    best_step: int
    best_dev_loss: float
    initial_dev_loss: float
    first_eval_dev_loss: float
    resumed_at: list[int] = field(default_factory=list)
    train_rows: int
    dev_rows: int
    early_stopped: bool


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[refine]`` and its fit with the rest of the config."""
    r = cfg.refine
    if r.objective in ("contrastive", "kd") and not cfg.pairs:
        errors.append(f"refine.objective = {r.objective!r} trains on translation pairs: add "
                      "[pairs.SRC-TGT] paths = [...]")
    if r.objective == "distill" and cfg.extraction.mode != "sentence":
        errors.append("refine.objective = 'distill' samples the selected sentences: it needs "
                      "extraction.mode = 'sentence'")
    if r.min_sentences < r.train_per_word + r.dev_per_word:
        errors.append(f"refine.min_sentences = {r.min_sentences} < train_per_word + "
                      f"dev_per_word = {r.train_per_word + r.dev_per_word}")


def enabled(cfg: BuildConfig) -> bool:
    """Only with a refinement objective."""
    return cfg.refine.objective != "none"


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """Starts from step 2 and trains on the refinement data."""
    return ("pca", "train_data")


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """The optimisation settings (resources and checkpoint cadence do not count)."""
    r = cfg.refine
    return (r.batch_size, r.lr, r.clip, r.tau, r.max_steps, r.eval_every, r.patience, r.workers)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Train (or resume the run named by this stage's hash), save step 3 and the curves."""
    r = ctx.cfg.refine
    data = ctx.work("train_data")
    best, state = run_training(ctx.path("step2"), storage.join(data, "train.parquet"),
                               storage.join(data, "dev.parquet"), r.storage or st.path("runs"),
                               f"refine-{st.config_hash}", r, ctx.cfg.seed)
    ctx.save_step("step3", StaticModel.load(ctx.path("step2")).words, best)
    curves = ctx.path("refinement")
    storage.write_bytes(storage.join(curves, "history.json"),
                        json.dumps(state, indent=1).encode())
    plot_history(state, storage.join(curves, "loss.png"))
    return Result(steps=state["step"], best_step=state["best_step"],
                  best_dev_loss=round(state["best_loss"], 5),
                  initial_dev_loss=round(state["initial_dev_loss"], 5),
                  first_eval_dev_loss=round(state["history"][0]["dev_loss"], 5),
                  resumed_at=state["resumed_at"], train_rows=state["train_rows"],
                  dev_rows=state["dev_rows"], early_stopped=state["step"] < r.max_steps)


# -- data ---------------------------------------------------------------------------------------


class _Column:
    """A text column as vocabulary rows: flat ids + offsets (CSR)."""

    def __init__(self, model: StaticModel, texts: list[str]) -> None:
        ids = model.word_ids(texts)
        self.lengths = np.array([len(x) for x in ids], np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.ids = np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, np.int64)

    def bag(self, rows: np.ndarray):
        """Torch ``(ids, offsets)`` for ``embedding_bag`` over ``rows``."""
        import torch

        a, b = self.offsets[rows], self.offsets[rows + 1]
        flat = np.concatenate([self.ids[i:j] for i, j in zip(a, b, strict=True)])
        offs = np.concatenate([[0], np.cumsum(b - a)[:-1]])
        return torch.from_numpy(flat), torch.from_numpy(offs)


class _Split:
    """One split (train or dev): texts as id columns, teacher embeddings if any; rows whose
    texts have no known word are dropped (they would be zero vectors)."""

    def __init__(self, url: str, model: StaticModel) -> None:
        t = storage.read_parquet(url)
        self.src = _Column(model, t.column("src").to_pylist())
        self.tgt = _Column(model, t.column("tgt").to_pylist()) if "tgt" in t.column_names \
            else None
        keep = self.src.lengths > 0
        if self.tgt is not None:
            keep &= self.tgt.lengths > 0
        self.rows = np.flatnonzero(keep)
        self.teacher = None
        if "teacher" in t.column_names:
            col = t.column("teacher").combine_chunks()
            self.teacher = col.values.to_numpy().reshape(len(t), -1).astype(np.float32)
        self.dropped = int((~keep).sum())

    def __len__(self) -> int:
        return len(self.rows)


def _loss(objective: str, weight: Any, split: _Split, rows: np.ndarray, tau: float) -> Any:
    import torch
    import torch.nn.functional as F

    from swe.build import losses

    def enc(col: _Column) -> Any:
        ids, offs = col.bag(rows)
        return F.embedding_bag(ids.to(weight.device), weight, offs.to(weight.device),
                               mode="mean")

    if objective == "distill":
        teacher = torch.from_numpy(split.teacher[rows]).to(weight.device)
        return losses.distillation_loss(enc(split.src), teacher, tau)
    if objective == "contrastive":
        return losses.contrastive_loss(enc(split.src), enc(split.tgt), tau)
    if objective == "kd":
        teacher = torch.from_numpy(split.teacher[rows]).to(weight.device)
        return losses.kd_loss(enc(split.src), enc(split.tgt), teacher, tau)
    raise ValueError(f"unknown objective {objective!r}")


# -- checkpoints ----------------------------------------------------------------------------------


def _save_state(directory: str, weight: Any, best: Any, opt: Any, state: dict) -> None:
    from safetensors.torch import save_file

    moments = opt.state.get(weight, {})
    tensors = {"weight": weight.detach().cpu().contiguous(), "best": best.cpu().contiguous()}
    if moments:
        tensors["exp_avg"] = moments["exp_avg"].cpu().contiguous()
        tensors["exp_avg_sq"] = moments["exp_avg_sq"].cpu().contiguous()
        state = {**state, "adam_step": float(moments["step"])}
    save_file(tensors, os.path.join(directory, "state.safetensors"))
    with open(os.path.join(directory, "state.json"), "w") as f:
        json.dump(state, f)


def _load_state(directory: str) -> tuple[dict, dict]:
    from safetensors.torch import load_file

    with open(os.path.join(directory, "state.json")) as f:
        state = json.load(f)
    return load_file(os.path.join(directory, "state.safetensors")), state


def _restore(ckpt: Any, weight: Any, opt: Any, device: Any) -> tuple[Any, dict]:
    """Load a checkpoint into ``weight`` and Adam's moments; ``(best matrix, state)``."""
    import torch

    with ckpt.as_directory() as d:
        tensors, state = _load_state(d)
    with torch.no_grad():
        weight.copy_(tensors["weight"].to(device))
    if "exp_avg" in tensors:  # restore Adam's moments so the run continues, not restarts
        opt.state[weight] = {"step": torch.tensor(state["adam_step"]),
                             "exp_avg": tensors["exp_avg"].to(device),
                             "exp_avg_sq": tensors["exp_avg_sq"].to(device)}
    state["resumed_at"].append(state["step"])
    return tensors["best"].to(device), state


# -- the loop each Ray Train worker runs ---------------------------------------------------------


def train_loop(config: dict) -> None:
    """Ray Train worker loop (``config`` from :func:`run_training`)."""
    import ray.train
    import torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(max(1, int(config["threads"])))
    torch.manual_seed(config["seed"])
    device = ray.train.torch.get_device() if config["use_gpu"] else torch.device("cpu")
    model = StaticModel.load(config["init_model"])
    train = _Split(config["train"], model)
    dev = _Split(config["dev"], model)
    B, obj, tau = config["batch_size"], config["objective"], config["tau"]
    if len(train) < B * world or len(dev) < 2:
        raise ValueError(f"refinement needs at least batch_size x workers = {B * world} training "
                         f"rows and 2 validation rows; have {len(train)} and {len(dev)}")

    weight = torch.nn.Parameter(torch.from_numpy(model.vectors.copy()).to(device))
    opt = torch.optim.Adam([weight], lr=config["lr"])
    best = weight.detach().clone()
    state = {"step": 0, "best_loss": None, "best_step": 0, "bad": 0, "history": [],
             "resumed_at": [], "train_rows": len(train), "dev_rows": len(dev)}
    ckpt = ray.train.get_checkpoint()
    if ckpt:
        best, state = _restore(ckpt, weight, opt, device)

    def dev_loss() -> float:
        with torch.no_grad():
            vals = [float(_loss(obj, weight, dev, dev.rows[i:i + B], tau))
                    for i in range(0, len(dev) - 1, B) if len(dev.rows[i:i + B]) >= 2]
        return float(np.mean(vals))

    if not ckpt:
        state["initial_dev_loss"] = dev_loss()
    last_saved = state["step"]
    per_epoch = len(train) // (B * world)
    since: list[float] = []
    while state["step"] < config["max_steps"] and state["bad"] < config["patience"]:
        epoch, pos = divmod(state["step"], per_epoch)
        perm = np.random.default_rng([config["seed"], epoch]).permutation(train.rows)
        rows = perm[rank::world][pos * B:(pos + 1) * B]
        loss = _loss(obj, weight, train, rows, tau)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        if world > 1:
            torch.distributed.all_reduce(weight.grad)
            weight.grad /= world
        torch.nn.utils.clip_grad_norm_(weight, config["clip"])
        opt.step()
        state["step"] += 1
        since.append(float(loss))
        if state["step"] % config["eval_every"] and state["step"] < config["max_steps"]:
            continue
        d = dev_loss()
        if state["best_loss"] is None or d < state["best_loss"]:
            state.update(best_loss=d, best_step=state["step"], bad=0)
            best = weight.detach().clone()
        else:
            state["bad"] += 1
        entry = {"step": state["step"], "train_loss": float(np.mean(since)), "dev_loss": d}
        state["history"].append(entry)
        since = []
        metrics = {**entry, "best_dev_loss": state["best_loss"], "best_step": state["best_step"]}
        stopping = state["step"] >= config["max_steps"] or state["bad"] >= config["patience"]
        due = state["step"] - last_saved >= config["checkpoint_every"] or stopping
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if rank == 0 and due:
                _save_state(tmp, weight, best, opt, state)
                checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=checkpoint)
        if due:
            last_saved = state["step"]


# -- the driver side ---------------------------------------------------------------------------


def run_training(init_model: str, train_url: str, dev_url: str, run_storage: str,
                 run_name: str, refine: RefineConfig, seed: int) -> tuple[np.ndarray, dict]:
    """Run (or resume) the Ray Train job; returns ``(best matrix, final state)``."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    fs, path = storage.pyarrow_filesystem(run_storage)
    use_gpu = refine.gpus_per_worker > 0
    resources = {"CPU": refine.cpus_per_worker}
    if use_gpu:
        resources["GPU"] = refine.gpus_per_worker
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"init_model": init_model, "train": train_url, "dev": dev_url,
                           "objective": refine.objective, "batch_size": refine.batch_size,
                           "lr": refine.lr, "clip": refine.clip, "tau": refine.tau,
                           "max_steps": refine.max_steps, "eval_every": refine.eval_every,
                           "patience": refine.patience, "seed": seed, "use_gpu": use_gpu,
                           "checkpoint_every": refine.checkpoint_every,
                           "threads": max(1, int(refine.cpus_per_worker))},
        scaling_config=ScalingConfig(num_workers=refine.workers, use_gpu=use_gpu,
                                     resources_per_worker=resources),
        run_config=RunConfig(name=run_name, storage_path=path, storage_filesystem=fs,
                             failure_config=FailureConfig(max_failures=refine.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
    )
    result = trainer.fit()
    if result.checkpoint is None:
        raise RuntimeError("refinement finished without a checkpoint: no evaluation ran")
    with result.checkpoint.as_directory() as d:
        tensors, state = _load_state(d)
    return tensors["best"].float().numpy(), state


def plot_history(state: dict, url: str) -> None:
    """The training and validation loss curves as a PNG (best step marked)."""
    import io

    import matplotlib

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
    storage.write_bytes(url, buf.getvalue())
