"""What each Ray Train worker runs in step 3 (stage ``refine``): batches of word ids from the
refinement data (the inference rule maps texts to rows), the objective's loss on the
``embedding_bag`` student, Adam with clipping, validation every ``eval_every`` steps with early
stopping, and checkpoints (current and best matrix, Adam moments, counters, history) that a
restarted worker resumes from. The driver side is ``swe.build.stages.refine``.

Two optimisers (``refine.optimizer``):

- ``sparse`` (:class:`RowAdam`, :func:`_sparse_step`): the loss runs on the batch's distinct
  rows only (a ``U x d`` copy, ``U`` <= the batch's words), so the gradient is ``U x d``;
  several workers all_gather each other's row ids and gradient rows (padded to the largest
  ``U``) and sum them into their union, so a step's compute and traffic follow the batch, not V.
  Lazy Adam: the touched rows and their moments are updated exactly as dense Adam would; rows
  the step did not touch keep their value and their moments (dense Adam would still move them
  by their decaying momentum and decay their moments).
- ``dense`` (:func:`_dense_step`): ``torch.optim.Adam`` over the whole ``V x d`` gradient,
  all_reduced over the workers (the behaviour before the option existed).

The hybrid loss's projection (``proj``) is dense and small under both; clipping is over the
norm of every gradient (touched rows and ``proj``: the same norm as the dense one, whose other
rows are zero). Both keep the same checkpoint layout (the weight's moments are ``V x d``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from swe.build.training.progress import progress
from swe.build.training.row_adam import RowAdam, clip, touched, union
from swe.model import StaticModel

if TYPE_CHECKING:
    from swe.build.stages.refine import RefineConfig

__all__ = ["Collate", "RowAdam", "TrainJob", "load_state", "train_loop", "train_step"]


@dataclass
class TrainJob:
    """What one Ray Train run needs: the ``[refine]`` section as itself (every option and its
    default live there, nowhere else) and the run's own facts. ``world`` and ``collate`` are set
    by each worker."""

    refine: RefineConfig
    init_model: str
    seed: int
    train_rows: int
    world: int = 1
    collate: Collate | None = None
    progress: Any = None  # a Ray queue for rank 0's progress lines (``progress.relay``)


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


def _counts(values: list[int], world: int) -> list[list[int]]:
    """``values`` (counts of this step: rows, touched word rows) of every worker."""
    import torch
    import torch.distributed as dist

    if world == 1:
        return [list(values)]
    bufs = [torch.zeros(len(values), dtype=torch.int64) for _ in range(world)]
    dist.all_gather(bufs, torch.tensor(values, dtype=torch.int64))
    return [b.tolist() for b in bufs]


def _sizes(rows: int, world: int) -> list[int]:
    """Rows of this step's batch on every worker."""
    return [c[0] for c in _counts([rows], world)]


def batch_loss(objective: str, weight: Any, batch: dict[str, Any], tau: float,
          sizes: list[int] | None = None, rank: int = 0, proj: Any = None,
          teacher_weight: float = 0.0, kd_weight: float = 0.0) -> Any:
    """The objective's loss on one batch; with ``sizes`` (several workers), over the global
    batch gathered from every worker, so in-batch negatives span all of them. With ``proj``
    (distill), plus ``teacher_weight`` times the mean cosine distance between the student's
    sentence vectors mapped by ``proj`` and the teacher's; with ``kd_weight`` (contrastive),
    plus that times the kd loss."""
    import torch.nn.functional as F

    from swe.build.training import losses

    def own(name: str) -> Any:
        ids, offs = batch[name]
        return F.embedding_bag(ids.to(weight.device), weight, offs.to(weight.device), mode="mean")

    def every(x: Any) -> Any:
        return x if sizes is None else _gather(x, sizes, rank)

    if objective == "contrastive" and not kd_weight:
        return losses.contrastive_loss(every(own("src")), every(own("tgt")), tau)
    src, teacher = own("src"), batch["teacher"].to(weight.device)
    if objective == "contrastive":
        s, t, tt = every(src), every(own("tgt")), every(teacher)
        return losses.contrastive_loss(s, t, tau) + kd_weight * losses.kd_loss(s, t, tt, tau)
    if objective == "kd":
        return losses.kd_loss(every(src), every(own("tgt")), every(teacher), tau)
    if objective != "distill":
        raise ValueError(f"unknown objective {objective!r}")
    loss = losses.distillation_loss(every(src), every(teacher), tau)
    if proj is None:
        return loss
    rows = len(src) if sizes is None else sum(sizes)  # a share of the global batch's mean
    return loss + teacher_weight * losses.cosine_distance(src @ proj, teacher).sum() / rows


# -- checkpoints ----------------------------------------------------------------------------------


def save_state(directory: str, params: dict[str, Any], best: Any, opt: Any,
                state: dict) -> None:
    """``params`` (``weight``, and ``proj`` with the hybrid loss), the best matrix and Adam's
    moments of each (``exp_avg``, ``proj.exp_avg``, ...)."""
    from safetensors.torch import save_file

    tensors = {"best": best.cpu().contiguous()}
    for name, p in params.items():
        prefix = "" if name == "weight" else f"{name}."
        tensors[name] = p.detach().cpu().contiguous()
        moments = opt.state.get(p, {})
        if moments:
            tensors[prefix + "exp_avg"] = moments["exp_avg"].cpu().contiguous()
            tensors[prefix + "exp_avg_sq"] = moments["exp_avg_sq"].cpu().contiguous()
            state = {**state, "adam_step": float(moments["step"])}
    save_file(tensors, os.path.join(directory, "state.safetensors"))
    with open(os.path.join(directory, "state.json"), "w") as f:
        json.dump(state, f)


def load_state(directory: str) -> tuple[dict, dict]:
    """A checkpoint directory's tensors (``weight``, ``best``, Adam moments) and state dict."""
    from safetensors.torch import load_file

    with open(os.path.join(directory, "state.json")) as f:
        state = json.load(f)
    return load_file(os.path.join(directory, "state.safetensors")), state


def restore_state(ckpt: Any, params: dict[str, Any], opt: Any, device: Any) -> tuple[Any, dict]:
    """Load a checkpoint into ``params`` and Adam's moments; ``(best matrix, state)``."""
    import torch

    with ckpt.as_directory() as d:
        tensors, state = load_state(d)
    for name, p in params.items():
        prefix = "" if name == "weight" else f"{name}."
        with torch.no_grad():
            p.copy_(tensors[name].to(device))
        if prefix + "exp_avg" in tensors:  # Adam's moments: the run continues, not restarts
            opt.state[p] = {"step": torch.tensor(state["adam_step"]),
                            "exp_avg": tensors[prefix + "exp_avg"].to(device),
                            "exp_avg_sq": tensors[prefix + "exp_avg_sq"].to(device)}
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
    """The objective's validation loss (the hybrid loss's cosine term left out, so runs with
    and without it are chosen and compared on one measure)."""
    import torch

    with torch.no_grad():
        return float(np.mean([float(batch_loss(obj, weight, b, tau)) for b in dev]))


def fit_projection(weight: Any, dev: list[dict]) -> Any:
    """The hybrid loss's map from student to teacher space, started at the least-squares fit
    of the teacher's validation embeddings from the student's (then trained with the words)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        src = torch.cat([F.embedding_bag(b["src"][0].to(weight.device), weight,
                                         b["src"][1].to(weight.device), mode="mean")
                         for b in dev])
        teacher = torch.cat([b["teacher"] for b in dev]).to(weight.device)
        return torch.linalg.lstsq(src, teacher).solution


def lr_factor(job: TrainJob, step: int) -> float:
    """The learning rate's multiplier before step ``step + 1`` (``refine.lr_schedule``)."""
    if job.refine.lr_schedule == "linear":
        return max(0.0, 1.0 - step / job.refine.max_steps)
    return 1.0


def _train_batches(job: TrainJob, collate: Collate, epoch: int, skip: int) -> Iterator[dict]:
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
        batch_size=job.refine.batch_size // job.world, drop_last=True,
        collate_fn=Numpy(),
        local_shuffle_buffer_size=job.refine.shuffle_buffer or None,
        local_shuffle_seed=job.seed * 100_003 + epoch if job.refine.shuffle_buffer else None,
        prefetch_batches=2)
    for i, batch in enumerate(batches):
        if i >= skip:
            yield batch


def train_step(job: TrainJob, params: dict[str, Any], opt: Any, batch: dict, rank: int,
          step: int) -> float | None:
    """One optimiser step on the global batch; ``None`` when it had fewer than 2 rows."""
    if job.refine.optimizer == "sparse":
        return _sparse_step(job, params, opt, batch, rank, step)
    return _dense_step(job, params, opt, batch, rank, step)


def _dense_step(job: TrainJob, params: dict[str, Any], opt: Any, batch: dict, rank: int,
                step: int) -> float | None:
    """``refine.optimizer = 'dense'``: the ``V x d`` gradient, all_reduced, and Adam on it."""
    import torch

    world = job.world
    sizes = _sizes(batch["rows"], world)
    if sum(sizes) < 2:
        return None
    loss = batch_loss(job.refine.objective, params["weight"], batch, job.refine.tau,
                 sizes if world > 1 else None, rank, params.get("proj"),
                 job.refine.teacher_weight, job.refine.kd_weight)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    for p in params.values():
        if world > 1:  # each worker's gradient covers its own rows of the one global loss
            torch.distributed.all_reduce(p.grad)
    torch.nn.utils.clip_grad_norm_(list(params.values()), job.refine.clip)
    for group in opt.param_groups:
        group["lr"] = job.refine.lr * lr_factor(job, step)
    opt.step()
    return float(loss.detach())


def _sparse_step(job: TrainJob, params: dict[str, Any], opt: Any, batch: dict, rank: int,
                 step: int) -> float | None:
    """``refine.optimizer = 'sparse'``: the loss on a copy of the batch's rows, their gradient
    rows exchanged with the other workers (``proj``'s all_reduced), lazy Adam on them."""
    import torch

    world, weight, proj = job.world, params["weight"], params.get("proj")
    ids, local = touched(batch)
    counts = _counts([batch["rows"], len(ids)], world)
    sizes = [c[0] for c in counts]
    if sum(sizes) < 2:
        return None
    ids = ids.to(weight.device)
    rows = weight.detach()[ids].requires_grad_()
    r = job.refine
    loss = batch_loss(r.objective, rows, local, r.tau, sizes if world > 1 else None, rank, proj,
                      r.teacher_weight, r.kd_weight)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    grad = rows.grad if rows.grad is not None else torch.zeros_like(rows)
    if world > 1:
        ids, grad = union(ids, grad, [c[1] for c in counts])
        if proj is not None:
            torch.distributed.all_reduce(proj.grad)
    clip([grad] + ([proj.grad] if proj is not None else []), job.refine.clip)
    for group in opt.param_groups:
        group["lr"] = job.refine.lr * lr_factor(job, step)
    opt.step([(weight, ids, grad)])
    return float(loss.detach())


def _evaluate(job: TrainJob, state: dict, weight: Any, best: Any, dev: list[dict],
              since: list[float]) -> Any:
    """Validation loss, early-stopping counters and history; the (new) best matrix."""
    d = _dev_loss(job.refine.objective, weight, dev, job.refine.tau)
    if state["best_loss"] is None or d < state["best_loss"]:
        state.update(best_loss=d, best_step=state["step"], bad=0)
        best = weight.detach().clone()
    else:
        state["bad"] += 1
    state["history"].append({"step": state["step"], "train_loss": float(np.mean(since)),
                             "dev_loss": d})
    since.clear()
    return best


def _report(job: TrainJob, state: dict, params: dict[str, Any], best: Any, opt: Any, rank: int,
            due: bool) -> None:
    import ray.train

    metrics = {**state["history"][-1], "best_dev_loss": state["best_loss"],
               "best_step": state["best_step"]}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0 and due:
            save_state(tmp, params, best, opt, state)
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report(metrics, checkpoint=checkpoint)


def train_loop(config: dict[str, TrainJob]) -> None:
    """Ray Train worker loop; ``config["job"]`` is the run's :class:`TrainJob`."""
    import ray.train
    import torch

    job = config["job"]
    ctx = ray.train.get_context()
    rank, job.world = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(max(1, int(job.refine.cpus_per_worker)))
    torch.manual_seed(job.seed)
    device = ray.train.torch.get_device() if job.refine.gpus_per_worker > 0 else torch.device("cpu")
    model = StaticModel.load(job.init_model)
    job.collate = collate = Collate(model)
    dev = _dev_batches(collate, job.refine.batch_size)
    if not dev:
        raise ValueError("refinement needs at least 2 validation rows with known words")
    weight = torch.nn.Parameter(torch.from_numpy(model.vectors.copy()).to(device))
    params = {"weight": weight}
    if job.refine.teacher_weight > 0 and job.refine.objective == "distill":
        params["proj"] = torch.nn.Parameter(fit_projection(weight, dev))
    adam = RowAdam if job.refine.optimizer == "sparse" else torch.optim.Adam
    opt = adam(list(params.values()), **job.refine.adam_options())
    best = weight.detach().clone()
    state = {"step": 0, "epoch": 0, "pos": 0, "best_loss": None, "best_step": 0, "bad": 0,
             "history": [], "resumed_at": [], "train_rows": job.train_rows,
             "dev_rows": sum(b["rows"] for b in dev)}
    ckpt = ray.train.get_checkpoint()
    if ckpt:
        best, state = restore_state(ckpt, params, opt, device)
    else:
        state["initial_dev_loss"] = _dev_loss(job.refine.objective, weight, dev, job.refine.tau)
    _epochs(job, state, params, opt, best, dev, rank)


def _stopping(job: TrainJob, state: dict) -> bool:
    return state["step"] >= job.refine.max_steps or state["bad"] >= job.refine.patience


def _epochs(job: TrainJob, state: dict, params: dict[str, Any], opt: Any, best: Any,
            dev: list[dict], rank: int) -> None:
    """Train epoch after epoch until ``max_steps`` or early stopping."""
    last_saved, since = state["step"], []
    clock = {"at": time.monotonic(), "step": state["step"]}
    while not _stopping(job, state):
        stepped = False
        for batch in _train_batches(job, job.collate, state["epoch"],
                                    state["pos"]):
            t = time.perf_counter()
            loss = train_step(job, params, opt, batch, rank, state["step"])
            state["step_seconds"] = state.get("step_seconds", 0.0) + time.perf_counter() - t
            state["pos"] += 1
            if loss is None:
                continue
            stepped = True
            state["step"] += 1
            since.append(loss)
            progress(job.refine.max_steps, state, since, rank, clock, job.progress)
            if state["step"] % job.refine.eval_every and state["step"] < job.refine.max_steps:
                continue
            best = _evaluate(job, state, params["weight"], best, dev, since)
            due = state["step"] - last_saved >= job.refine.checkpoint_every or _stopping(
                job, state)
            _report(job, state, params, best, opt, rank, due)
            last_saved = state["step"] if due else last_saved
            if _stopping(job, state):
                return
        if not stepped and state["pos"] == 0:
            raise ValueError("an epoch of the training split gave no batch: it has fewer rows "
                             "than refine.batch_size")
        state["epoch"], state["pos"] = state["epoch"] + 1, 0
