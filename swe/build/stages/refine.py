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
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from swe import storage
from swe.build.markers import StageDir
from swe.build.runner import StageResult
from swe.build.stages.train_data import split_urls
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
    shuffle_buffer: int = field(default=10_000, metadata={
        "min": 0, "help": "rows in each worker's local shuffle buffer, reshuffled per epoch "
                          "(0 = the global order train_data wrote)"})
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
    if r.sentences == "selected" and r.objective != "distill":
        errors.append("refine.sentences = 'selected' is for refine.objective = 'distill'")
    if r.batch_size % r.workers:
        errors.append(f"refine.batch_size = {r.batch_size} must be a multiple of refine.workers "
                      f"= {r.workers}: each worker takes an equal share of every batch")
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
    return (r.batch_size, r.lr, r.clip, r.tau, r.max_steps, r.eval_every, r.patience, r.workers,
            r.shuffle_buffer)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Train (or resume the run named by this stage's hash), save step 3 and the curves."""
    r = ctx.cfg.refine
    runs, name = r.storage or st.path("runs"), f"refine-{st.config_hash}"
    _remove_other_runs(runs, name)
    best, state = run_training(ctx.path("step2"), split_urls(ctx), runs, name, r,
                               ctx.cfg.seed, done["train_data"].train_rows)
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
                  dev_rows=state["dev_rows"], early_stopped=state["step"] < r.max_steps,
                  rows_per_s_per_worker=round(state["step"] * r.batch_size / r.workers / max(
                      state.get("step_seconds", 0.0), 1e-9), 1))


def _remove_other_runs(runs: str, keep: str) -> None:
    """Remove the checkpoints of earlier refine runs (another config) under ``runs``."""
    fs, path = storage.filesystem(runs)
    fs.invalidate_cache()
    if not fs.exists(path):
        return
    for entry in fs.ls(path, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith("refine-") and name != keep:
            log.warning("[refine] removing the checkpoints of an earlier refine run %s (its "
                        "config differs from this run's %s)", name, keep)
            storage.remove_tree(storage.join(runs, name))


# -- data ---------------------------------------------------------------------------------------


def _bag(ids: list[np.ndarray]) -> tuple[Any, Any]:
    """Torch ``(ids, offsets)`` for ``embedding_bag`` over rows of vocabulary ids."""
    import torch

    lengths = np.array([len(x) for x in ids], np.int64)
    flat = np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return torch.from_numpy(flat), torch.from_numpy(offsets)


class Collate:
    """A streamed batch (``src``, ``tgt``, ``teacher`` columns) as training tensors: texts to
    vocabulary rows with the same rule as inference; rows with a side that has no known word
    are dropped (they would be zero vectors)."""

    def __init__(self, model: StaticModel) -> None:
        self.model = model

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """Tensors ``src`` (and ``tgt``): ``(ids, offsets)``; ``teacher``: a float matrix."""
        import torch

        sides = {c: self.model.word_ids([str(t) for t in batch[c]])
                 for c in ("src", "tgt") if c in batch}
        keep = np.flatnonzero(np.logical_and.reduce(
            [np.array([len(x) > 0 for x in ids], bool) for ids in sides.values()]))
        out: dict[str, Any] = {c: _bag([ids[i] for i in keep]) for c, ids in sides.items()}
        if "teacher" in batch:
            teacher = np.stack(list(batch["teacher"])).astype(np.float32)
            out["teacher"] = torch.from_numpy(teacher[keep])
        out["rows"] = len(keep)
        return out


def _gather(x: Any, sizes: list[int], rank: int) -> Any:
    """Every worker's rows of ``x`` concatenated; this worker's slot keeps its gradient."""
    import torch
    import torch.distributed as dist

    pad = torch.zeros((max(sizes), *x.shape[1:]), dtype=x.dtype, device=x.device)
    pad[:len(x)] = x.detach()
    bufs = [torch.empty_like(pad) for _ in sizes]
    dist.all_gather(bufs, pad)
    parts = [b[:n] for b, n in zip(bufs, sizes, strict=True)]
    parts[rank] = x
    return torch.cat(parts)


def _sizes(rows: int, world: int) -> list[int]:
    """Rows of this step's batch on every worker."""
    import torch
    import torch.distributed as dist

    if world == 1:
        return [rows]
    bufs = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(bufs, torch.tensor([rows], dtype=torch.int64))
    return [int(b) for b in bufs]


def _loss(objective: str, weight: Any, batch: dict[str, Any], tau: float,
          sizes: list[int] | None = None, rank: int = 0) -> Any:
    """The objective's loss on one batch; with ``sizes`` (several workers), over the global
    batch gathered from every worker, so in-batch negatives span all of them."""
    import torch.nn.functional as F

    from swe.build import losses

    def side(name: str) -> Any:
        ids, offs = batch[name]
        x = F.embedding_bag(ids.to(weight.device), weight, offs.to(weight.device), mode="mean")
        return x if sizes is None else _gather(x, sizes, rank)

    def teacher() -> Any:
        t = batch["teacher"].to(weight.device)
        return t if sizes is None else _gather(t, sizes, rank)

    if objective == "distill":
        return losses.distillation_loss(side("src"), teacher(), tau)
    if objective == "contrastive":
        return losses.contrastive_loss(side("src"), side("tgt"), tau)
    if objective == "kd":
        return losses.kd_loss(side("src"), side("tgt"), teacher(), tau)
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
    state.setdefault("epoch", 0)
    state.setdefault("pos", 0)
    state["resumed_at"].append(state["step"])
    return tensors["best"].to(device), state


# -- the loop each Ray Train worker runs ---------------------------------------------------------


def _dev_batches(collate: Collate, batch_size: int) -> list[dict]:
    """The validation split, collated once and kept (it is at most ``refine.dev_max`` rows;
    every worker holds all of it, so every worker computes the same validation loss)."""
    import ray.train

    rows = ray.train.get_dataset_shard("dev").iter_batches(batch_size=batch_size,
                                                           batch_format="numpy")
    return [b for b in map(collate, rows) if b["rows"] >= 2]


def _dev_loss(obj: str, weight: Any, dev: list[dict], tau: float) -> float:
    import torch

    with torch.no_grad():
        return float(np.mean([float(_loss(obj, weight, b, tau)) for b in dev]))


def _train_batches(config: dict, collate: Collate, epoch: int, skip: int) -> Iterator[dict]:
    """This worker's share of the training stream for one epoch, collated ahead in a thread:
    the global order from ``train_data`` plus a seeded local shuffle buffer per epoch; the
    first ``skip`` batches (already trained before a restart) are passed over."""
    import ray.train
    from ray.data.collate_fn import NumpyBatchCollateFn

    class Numpy(NumpyBatchCollateFn):
        def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
            return collate(batch)

    shard = ray.train.get_dataset_shard("train")
    batches = shard.iter_torch_batches(
        batch_size=config["batch_size"] // config["world"], drop_last=True,
        collate_fn=Numpy(),
        local_shuffle_buffer_size=config["shuffle_buffer"] or None,
        local_shuffle_seed=config["seed"] * 100_003 + epoch if config["shuffle_buffer"] else None,
        prefetch_batches=2)
    for i, batch in enumerate(batches):
        if i >= skip:
            yield batch


def _step(config: dict, weight: Any, opt: Any, batch: dict, rank: int) -> float | None:
    """One optimiser step on the global batch; ``None`` when it had fewer than 2 rows."""
    import torch

    world = config["world"]
    sizes = _sizes(batch["rows"], world)
    if sum(sizes) < 2:
        return None
    loss = _loss(config["objective"], weight, batch, config["tau"],
                 sizes if world > 1 else None, rank)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    if world > 1:  # each worker's gradient covers its own rows of the one global loss
        torch.distributed.all_reduce(weight.grad)
    torch.nn.utils.clip_grad_norm_(weight, config["clip"])
    opt.step()
    return float(loss)


def _evaluate(config: dict, state: dict, weight: Any, best: Any, dev: list[dict],
              since: list[float]) -> Any:
    """Validation loss, early-stopping counters and history; the (new) best matrix."""
    d = _dev_loss(config["objective"], weight, dev, config["tau"])
    if state["best_loss"] is None or d < state["best_loss"]:
        state.update(best_loss=d, best_step=state["step"], bad=0)
        best = weight.detach().clone()
    else:
        state["bad"] += 1
    state["history"].append({"step": state["step"], "train_loss": float(np.mean(since)),
                             "dev_loss": d})
    since.clear()
    return best


def _report(config: dict, state: dict, weight: Any, best: Any, opt: Any, rank: int,
            due: bool) -> None:
    import ray.train

    metrics = {**state["history"][-1], "best_dev_loss": state["best_loss"],
               "best_step": state["best_step"]}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0 and due:
            _save_state(tmp, weight, best, opt, state)
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report(metrics, checkpoint=checkpoint)


def train_loop(config: dict) -> None:
    """Ray Train worker loop (``config`` from :func:`run_training`)."""
    import ray.train
    import torch

    ctx = ray.train.get_context()
    rank, config["world"] = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(max(1, int(config["threads"])))
    torch.manual_seed(config["seed"])
    device = ray.train.torch.get_device() if config["use_gpu"] else torch.device("cpu")
    model = StaticModel.load(config["init_model"])
    config["collate"] = collate = Collate(model)
    dev = _dev_batches(collate, config["batch_size"])
    if not dev:
        raise ValueError("refinement needs at least 2 validation rows with known words")
    weight = torch.nn.Parameter(torch.from_numpy(model.vectors.copy()).to(device))
    opt = torch.optim.Adam([weight], lr=config["lr"])
    best = weight.detach().clone()
    state = {"step": 0, "epoch": 0, "pos": 0, "best_loss": None, "best_step": 0, "bad": 0,
             "history": [], "resumed_at": [], "train_rows": config["train_rows"],
             "dev_rows": sum(b["rows"] for b in dev)}
    ckpt = ray.train.get_checkpoint()
    if ckpt:
        best, state = _restore(ckpt, weight, opt, device)
    else:
        state["initial_dev_loss"] = _dev_loss(config["objective"], weight, dev, config["tau"])
    _epochs(config, state, weight, opt, best, dev, rank)


def _stopping(config: dict, state: dict) -> bool:
    return state["step"] >= config["max_steps"] or state["bad"] >= config["patience"]


def _epochs(config: dict, state: dict, weight: Any, opt: Any, best: Any, dev: list[dict],
            rank: int) -> None:
    """Train epoch after epoch until ``max_steps`` or early stopping."""
    last_saved, since = state["step"], []
    while not _stopping(config, state):
        stepped = False
        for batch in _train_batches(config, config["collate"], state["epoch"],
                                    state["pos"]):
            t = time.perf_counter()
            loss = _step(config, weight, opt, batch, rank)
            state["step_seconds"] = state.get("step_seconds", 0.0) + time.perf_counter() - t
            state["pos"] += 1
            if loss is None:
                continue
            stepped = True
            state["step"] += 1
            since.append(loss)
            if state["step"] % config["eval_every"] and state["step"] < config["max_steps"]:
                continue
            best = _evaluate(config, state, weight, best, dev, since)
            due = state["step"] - last_saved >= config["checkpoint_every"] or _stopping(
                config, state)
            _report(config, state, weight, best, opt, rank, due)
            last_saved = state["step"] if due else last_saved
            if _stopping(config, state):
                return
        if not stepped and state["pos"] == 0:
            raise ValueError("an epoch of the training split gave no batch: it has fewer rows "
                             "than refine.batch_size")
        state["epoch"], state["pos"] = state["epoch"] + 1, 0


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
                 refine: RefineConfig, seed: int, train_rows: int) -> tuple[np.ndarray, dict]:
    """Run (or resume) the Ray Train job; returns ``(best matrix, final state)``."""
    from ray.data import ExecutionOptions
    from ray.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    fs, path = storage.pyarrow_filesystem(run_storage)
    use_gpu = refine.gpus_per_worker > 0
    resources = {"CPU": refine.cpus_per_worker}
    if use_gpu:
        resources["GPU"] = refine.gpus_per_worker
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"init_model": init_model, "objective": refine.objective,
                           "batch_size": refine.batch_size, "lr": refine.lr,
                           "clip": refine.clip, "tau": refine.tau,
                           "max_steps": refine.max_steps, "eval_every": refine.eval_every,
                           "patience": refine.patience, "seed": seed, "use_gpu": use_gpu,
                           "checkpoint_every": refine.checkpoint_every,
                           "shuffle_buffer": refine.shuffle_buffer, "train_rows": train_rows,
                           "threads": max(1, int(refine.cpus_per_worker))},
        datasets=_datasets(*data),
        dataset_config=DataConfig(datasets_to_split=["train"],
                                  execution_options=ExecutionOptions(preserve_order=True)),
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
