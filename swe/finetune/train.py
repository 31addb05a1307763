"""The Ray Train worker of ``swe finetune``: a head (linear, or a one-hidden-layer MLP) on the
model's sentence vectors, trained with the static table through the row-sparse Adam of the build
(only the rows a batch touches move).

The sentence vector is the model's own: the L2-normalised mean of the text's word rows, by the
same units and OOV rule as ``encode``. Batches follow a seeded permutation per epoch; every
evaluation on dev is a checkpoint holding the table, the head, both optimisers' moments and the
position, so a killed run resumes to the same result, bit for bit. Training stops after
``patience`` evaluations without a lower dev loss; the best table and head are kept.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FinetuneJob", "train_loop"]


@dataclass(frozen=True)
class FinetuneJob:
    """Everything the worker needs (it crosses into Ray Train as itself)."""

    model: str
    data: str
    output: str
    dev: str | None = None
    text_column: str = "text"
    label_column: str = "label"
    head: str = "linear"  # or "mlp"
    hidden: int = 256
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-2  # the head's
    table_lr: float = 1e-3  # the static table's (0: frozen)
    dev_share: float = 0.1
    eval_every: int = 0  # steps between evaluations; 0: once per epoch
    patience: int = 3
    seed: int = 0


class _Data:
    """A split's word rows (as an ``embedding_bag`` input) and targets."""

    def __init__(self, ids: list[np.ndarray], targets: np.ndarray) -> None:
        self.ids, self.targets = ids, targets

    def batch(self, index: np.ndarray) -> tuple[Any, Any, Any, Any]:
        """Distinct rows, their local ids, offsets, and the targets of texts ``index``."""
        import torch

        parts = [self.ids[i] for i in index]
        flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        rows, local = np.unique(flat, return_inverse=True)
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])[:-1]])
        return (torch.from_numpy(rows), torch.from_numpy(local.astype(np.int64)),
                torch.from_numpy(offsets.astype(np.int64)),
                torch.from_numpy(self.targets[index]))


def _splits(job: FinetuneJob, model: Any) -> tuple[_Data, _Data, list[str], bool]:
    from swe.finetune.data import dev_mask, read_labelled

    data = read_labelled(job.data, job.text_column, job.label_column)
    if job.dev:
        dev = read_labelled(job.dev, job.text_column, job.label_column)
        train_texts, train_labels = data.texts, data.labels
        dev_texts, dev_labels = dev.texts, dev.labels
        classes = sorted(set(data.classes) | set(dev.classes))
    else:
        mask = dev_mask(data.texts, job.dev_share, job.seed)
        train_texts = [t for t, m in zip(data.texts, mask, strict=True) if not m]
        train_labels = [y for y, m in zip(data.labels, mask, strict=True) if not m]
        dev_texts = [t for t, m in zip(data.texts, mask, strict=True) if m]
        dev_labels = [y for y, m in zip(data.labels, mask, strict=True) if m]
        classes = data.classes
    index = {c: i for i, c in enumerate(classes)}

    def targets(labels: list[list[str]]) -> np.ndarray:
        if not data.multi_label:
            return np.array([index[y[0]] for y in labels], np.int64)
        out = np.zeros((len(labels), len(classes)), np.float32)
        for r, ys in enumerate(labels):
            out[r, [index[y] for y in ys]] = 1
        return out

    return (_Data(model.word_ids(train_texts), targets(train_labels)),
            _Data(model.word_ids(dev_texts), targets(dev_labels)), classes, data.multi_label)


def _head(job: FinetuneJob, dim: int, classes: int) -> Any:
    import torch

    torch.manual_seed(job.seed)
    if job.head == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(dim, job.hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(job.hidden, classes))
    return torch.nn.Sequential(torch.nn.Linear(dim, classes))


def _logits(table_rows: Any, local: Any, offsets: Any, head: Any) -> Any:
    """The head's logits on the texts' sentence vectors (normalised mean of their rows)."""
    import torch.nn.functional as F

    pooled = F.embedding_bag(local, table_rows, offsets, mode="sum")
    return head(F.normalize(pooled, dim=1, eps=1e-12))


def _loss(logits: Any, targets: Any, multi: bool) -> Any:
    import torch.nn.functional as F

    if multi:
        return F.binary_cross_entropy_with_logits(logits, targets)
    return F.cross_entropy(logits, targets)


def _evaluate(table: Any, head: Any, dev: _Data, multi: bool) -> tuple[float, float]:
    """Dev loss and accuracy (multi-label: exact set matches at 0.5)."""
    import torch

    with torch.no_grad():
        rows, local, offsets, y = dev.batch(np.arange(len(dev.ids)))
        logits = _logits(table[rows], local, offsets, head)
        loss = float(_loss(logits, y, multi))
        if multi:
            acc = float(((logits > 0).float() == y).all(dim=1).float().mean())
        else:
            acc = float((logits.argmax(dim=1) == y).float().mean())
    return loss, 100 * acc


def _checkpoint(tensors: dict, state: dict, metrics: dict) -> None:
    import ray.train
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as d:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                  os.path.join(d, "state.safetensors"))
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump(state, f)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))


def _restore() -> tuple[dict, dict] | None:
    import ray.train
    from safetensors.torch import load_file

    ckpt = ray.train.get_checkpoint()
    if ckpt is None:
        return None
    with ckpt.as_directory() as d:
        with open(os.path.join(d, "state.json")) as f:
            state = json.load(f)
        return load_file(os.path.join(d, "state.safetensors")), state


def train_loop(config: dict[str, FinetuneJob]) -> None:
    """One Ray Train worker: train, evaluate, checkpoint; at the end write the best table and
    head to the output (:func:`swe.finetune.output.save_classifier`)."""
    import torch

    from swe.build.training.row_adam import RowAdam
    from swe.finetune.output import save_classifier
    from swe.model import StaticModel

    job = config["job"]
    torch.set_num_threads(1)
    model = StaticModel.load(job.model)
    train, dev, classes, multi = _splits(job, model)
    table = torch.from_numpy(model.vectors.copy())
    head = _head(job, model.dim, len(classes))
    table_opt = RowAdam([table], lr=job.table_lr)
    head_opt = torch.optim.Adam(head.parameters(), lr=job.lr)
    state = {"step": 0, "epoch": 0, "pos": 0, "best_loss": None, "best_step": 0, "bad": 0,
             "history": [], "resumed_at": []}
    best = {"table": table.clone(), **{f"head.{k}": v.clone()
                                       for k, v in head.state_dict().items()}}
    restored = _restore()
    if restored:
        state = _load(restored, table, head, table_opt, head_opt, best)
    per_epoch = -(-len(train.ids) // job.batch_size)
    every = job.eval_every or per_epoch
    while state["epoch"] < job.epochs and state["bad"] < job.patience:
        order = np.random.default_rng([job.seed, state["epoch"]]).permutation(len(train.ids))
        while state["pos"] < len(order) and state["bad"] < job.patience:
            index = order[state["pos"]:state["pos"] + job.batch_size]
            _step(table, head, table_opt, head_opt, train.batch(index), multi, job.table_lr)
            state["pos"] += len(index)
            state["step"] += 1
            if state["step"] % every == 0:
                _eval_and_save(state, table, head, table_opt, head_opt, best, dev, multi)
        if state["pos"] >= len(order):
            state["epoch"], state["pos"] = state["epoch"] + 1, 0
    if _rank() == 0:
        save_classifier(job, model, best, classes, multi, state)


def _rank() -> int:
    import ray.train

    return ray.train.get_context().get_world_rank()


def _step(table: Any, head: Any, table_opt: Any, head_opt: Any, batch: tuple, multi: bool,
          table_lr: float) -> None:
    rows, local, offsets, y = batch
    table_rows = table[rows].requires_grad_(table_lr > 0)
    loss = _loss(_logits(table_rows, local, offsets, head), y, multi)
    head_opt.zero_grad()
    loss.backward()
    head_opt.step()
    if table_lr > 0:
        table_opt.step([(table, rows, table_rows.grad)])


def _eval_and_save(state: dict, table: Any, head: Any, table_opt: Any, head_opt: Any,
                   best: dict, dev: _Data, multi: bool) -> None:
    loss, acc = _evaluate(table, head, dev, multi)
    state["history"].append({"step": state["step"], "dev_loss": loss, "dev_acc": acc})
    if state["best_loss"] is None or loss < state["best_loss"]:
        state.update(best_loss=loss, best_step=state["step"], bad=0)
        best["table"] = table.clone()
        best.update({f"head.{k}": v.clone() for k, v in head.state_dict().items()})
    else:
        state["bad"] += 1
    tensors = {"table": table, **{f"head.{k}": v for k, v in head.state_dict().items()},
               **{f"best.{k}": v for k, v in best.items()}}
    for name, opt in (("table_opt", table_opt), ("head_opt", head_opt)):
        for i, p in enumerate(opt.param_groups[0]["params"]):
            for m in ("exp_avg", "exp_avg_sq"):
                if p in opt.state:
                    tensors[f"{name}.{i}.{m}"] = opt.state[p][m]
                    state[f"{name}.{i}.step"] = float(opt.state[p]["step"])
    _checkpoint(tensors, state, {"step": state["step"], "dev_loss": loss, "dev_acc": acc})


def _load(restored: tuple[dict, dict], table: Any, head: Any, table_opt: Any, head_opt: Any,
          best: dict) -> dict:
    import torch

    tensors, state = restored
    with torch.no_grad():
        table.copy_(tensors["table"])
    head.load_state_dict({k[5:]: v for k, v in tensors.items() if k.startswith("head.")})
    best.update({k[5:]: v for k, v in tensors.items() if k.startswith("best.")})
    for name, opt in (("table_opt", table_opt), ("head_opt", head_opt)):
        for i, p in enumerate(opt.param_groups[0]["params"]):
            if f"{name}.{i}.exp_avg" in tensors:
                opt.state[p] = {"step": torch.tensor(state[f"{name}.{i}.step"]),
                                "exp_avg": tensors[f"{name}.{i}.exp_avg"].clone(),
                                "exp_avg_sq": tensors[f"{name}.{i}.exp_avg_sq"].clone()}
    state["resumed_at"].append(state["step"])
    return state
