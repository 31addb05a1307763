"""The Ray Train worker's pieces without Ray: the hybrid loss, its projection's start, the
learning-rate schedule and the checkpoint round trip (the whole loop on real Ray Train, killed
and resumed with these options on: tests/test_refine.py)."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

from swe.build.losses import contrastive_loss, distillation_loss, kd_loss
from swe.build.trainer import _fit_projection, _loss, _lr_factor, _restore, _save_state


def _batch(rows: list[list[int]], teacher: torch.Tensor) -> dict:
    ids = torch.tensor([i for r in rows for i in r])
    offsets = torch.tensor([0, *torch.tensor([len(r) for r in rows]).cumsum(0)[:-1].tolist()])
    return {"src": (ids, offsets), "teacher": teacher, "rows": len(rows)}


ROWS = [[0, 1], [2], [1, 3, 4], [4, 0], [3]]


def test_hybrid_loss_adds_the_weighted_cosine_distance_and_trains_the_projection():
    g = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(5, 4, generator=g))
    proj = torch.nn.Parameter(torch.randn(4, 6, generator=g))
    teacher = torch.randn(5, 6, generator=g)
    batch = _batch(ROWS, teacher)
    src = torch.stack([weight[r].mean(0) for r in ROWS])
    relational = distillation_loss(src, teacher, 0.05)
    cos = (1 - F.cosine_similarity(src @ proj, teacher, dim=-1)).mean()
    assert torch.allclose(_loss("distill", weight, batch, 0.05), relational)
    hybrid = _loss("distill", weight, batch, 0.05, proj=proj, teacher_weight=0.7)
    assert torch.allclose(hybrid, relational + 0.7 * cos)
    hybrid.backward()
    assert proj.grad.abs().sum() > 0 and weight.grad.abs().sum() > 0


def test_contrastive_with_kd_weight_adds_the_weighted_kd_loss():
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(5, 4, generator=g)
    teacher = torch.randn(4, 6, generator=g)
    tgt_rows = [[4], [3, 2], [0], [1, 2], [0, 4]]
    batch = _batch(ROWS[:4], teacher)
    batch["tgt"] = _batch(tgt_rows[:4], teacher)["src"]
    src = torch.stack([weight[r].mean(0) for r in ROWS[:4]])
    tgt = torch.stack([weight[r].mean(0) for r in tgt_rows[:4]])
    plain = contrastive_loss(src, tgt, 0.05)
    assert torch.allclose(_loss("contrastive", weight, batch, 0.05), plain)
    assert torch.allclose(_loss("contrastive", weight, batch, 0.05, kd_weight=0.5),
                          plain + 0.5 * kd_loss(src, tgt, teacher, 0.05))


def test_projection_starts_at_the_least_squares_fit():
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(5, 4, generator=g)
    true = torch.randn(4, 6, generator=g)
    rows = ROWS * 2 + [[0], [1], [2, 3]]
    src = torch.stack([weight[r].mean(0) for r in rows])
    dev = [_batch(rows[:6], src[:6] @ true), _batch(rows[6:], src[6:] @ true)]
    torch.testing.assert_close(_fit_projection(weight, dev), true, atol=1e-4, rtol=1e-4)


def test_linear_schedule_decays_to_zero_at_max_steps():
    linear = {"lr_schedule": "linear", "max_steps": 100}
    assert [_lr_factor(linear, s) for s in (0, 50, 99, 100)] == pytest.approx([1, .5, .01, 0])
    assert _lr_factor({"lr_schedule": "constant", "max_steps": 100}, 99) == 1.0
    assert _lr_factor({"max_steps": 100}, 99) == 1.0  # configs from before the option


class _Checkpoint:
    def __init__(self, path):
        self.path = path

    @contextlib.contextmanager
    def as_directory(self):
        yield self.path


def test_checkpoint_restores_the_projection_and_both_params_adam_moments(tmp_path):
    g = torch.Generator().manual_seed(2)
    params = {"weight": torch.nn.Parameter(torch.randn(5, 4, generator=g)),
              "proj": torch.nn.Parameter(torch.randn(4, 6, generator=g))}
    opt = torch.optim.Adam(list(params.values()), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        _loss("distill", params["weight"], _batch(ROWS, torch.randn(5, 6, generator=g)), 0.05,
              proj=params["proj"], teacher_weight=1.0).backward()
        opt.step()
    best = params["weight"].detach() * 2
    _save_state(str(tmp_path), params, best, opt, {"step": 3, "resumed_at": []})

    fresh = {k: torch.nn.Parameter(torch.zeros_like(p)) for k, p in params.items()}
    fresh_opt = torch.optim.Adam(list(fresh.values()), lr=0.1)
    got_best, state = _restore(_Checkpoint(str(tmp_path)), fresh, fresh_opt, torch.device("cpu"))
    assert state["resumed_at"] == [3] and state["adam_step"] == 3
    torch.testing.assert_close(got_best, best)
    for k, p in params.items():
        torch.testing.assert_close(fresh[k].detach(), p.detach())
        for m in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(fresh_opt.state[fresh[k]][m], opt.state[p][m])
