"""Row-sparse refinement's pieces (``refine.optimizer = 'sparse'``): a batch's distinct rows,
their gradient rows summed over the workers (bytes follow the batch, not V), clipping over
them, and :class:`RowAdam`, lazy Adam on the given rows. The step itself is
``swe.build.training.trainer._sparse_step``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RowAdam", "clip", "touched", "union"]


def touched(batch: dict) -> tuple[Any, dict]:
    """The batch's distinct word rows (sorted) and the batch with its ids renumbered to
    positions among them."""
    import torch

    sides = [name for name in ("src", "tgt") if name in batch]
    ids = torch.cat([batch[name][0] for name in sides])
    rows, inverse = torch.unique(ids, return_inverse=True)
    local, start = dict(batch), 0
    for name in sides:
        n = len(batch[name][0])
        local[name] = (inverse[start:start + n], batch[name][1])
        start += n
    return rows, local


def union(ids: Any, grad: Any, counts: list[int]) -> tuple[Any, Any]:
    """Every worker's touched rows and their gradient rows, summed over the workers into the
    union of the rows (the same on every worker): two all_gathers of ``max(counts)`` ids and
    gradient rows each, so the bytes follow the batch, not V."""
    import torch
    import torch.distributed as dist

    n = max(counts)
    pad_ids = ids.new_zeros(n)
    pad_ids[:len(ids)] = ids
    pad_grad = grad.new_zeros((n, grad.shape[1]))
    pad_grad[:len(grad)] = grad
    all_ids = [torch.empty_like(pad_ids) for _ in counts]
    all_grads = [torch.empty_like(pad_grad) for _ in counts]
    dist.all_gather(all_ids, pad_ids)
    dist.all_gather(all_grads, pad_grad)
    every = torch.cat([b[:c] for b, c in zip(all_ids, counts, strict=True)])
    union, inverse = torch.unique(every, return_inverse=True)
    rows = torch.cat([b[:c] for b, c in zip(all_grads, counts, strict=True)])
    return union, grad.new_zeros((len(union), grad.shape[1])).index_add_(0, inverse, rows)


def clip(grads: list[Any], max_norm: float) -> None:
    """Scale ``grads`` in place to a total norm of at most ``max_norm`` (as
    ``torch.nn.utils.clip_grad_norm_``)."""
    import torch

    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)



class RowAdam:
    """Adam (no weight decay) whose step updates given rows of a parameter, and nothing else of
    it (lazy Adam); parameters given no rows step densely on their ``.grad`` (the projection).

    On the rows it is given, one step is exactly ``torch.optim.Adam``'s (moments, bias
    correction by the global step count, ``eps`` outside the corrected square root), so the two
    agree when every row is touched at every step. A row left out keeps its value and its
    moments; dense Adam would decay its moments and still move it by ``lr * m̂ / (√v̂ + eps)``.
    ``state`` and ``param_groups`` have ``torch.optim.Adam``'s layout (``step``, ``exp_avg``,
    ``exp_avg_sq`` per parameter), so checkpoints are the same."""

    def __init__(self, params: list[Any], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.param_groups = [{"params": list(params), "lr": lr, "betas": betas, "eps": eps}]
        self.state: dict[Any, dict] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the dense parameters' ``.grad`` (as ``torch.optim.Optimizer.zero_grad``)."""
        for p in self.param_groups[0]["params"]:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    def _moments(self, p: Any) -> dict:
        import torch

        if p not in self.state:
            self.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                             "exp_avg_sq": torch.zeros_like(p)}
        return self.state[p]

    def step(self, rows: list[tuple[Any, Any, Any]] = ()) -> None:
        """``rows``: ``(param, ids, grad)`` with distinct ``ids`` and ``grad`` of shape
        ``[len(ids), ...]``: those rows step; the other parameters step on their ``.grad``."""
        import torch

        group = self.param_groups[0]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        sparse = {id(p): (ids, grad) for p, ids, grad in rows}
        with torch.no_grad():
            for p in group["params"]:
                ids, grad = sparse.get(id(p), (None, p.grad))
                if grad is None:
                    continue
                state = self._moments(p)
                state["step"] += 1
                t = float(state["step"])
                step_size, bc2_sqrt = lr / (1 - beta1 ** t), (1 - beta2 ** t) ** 0.5
                if ids is None:
                    m, v, w = state["exp_avg"], state["exp_avg_sq"], p
                else:
                    m, v, w = state["exp_avg"][ids], state["exp_avg_sq"][ids], p[ids]
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                w.addcdiv_(m, (v.sqrt() / bc2_sqrt).add_(eps), value=-step_size)
                if ids is not None:
                    state["exp_avg"].index_copy_(0, ids, m)
                    state["exp_avg_sq"].index_copy_(0, ids, v)
                    p.index_copy_(0, ids, w)
