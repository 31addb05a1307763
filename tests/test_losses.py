"""The refinement losses against values computed by hand (plain math, element by element)."""

import math

import pytest
import torch

from swe.build.training.losses import contrastive_loss, distillation_loss, kd_loss

S = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]
T = [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 3.0]]


def _cos(a, b):
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def _soft_ce_row(student_logits, teacher_logits):
    zt = sum(math.exp(v) for v in teacher_logits)
    zs = sum(math.exp(v) for v in student_logits)
    return -sum(math.exp(t) / zt * (s - math.log(zs))
                for s, t in zip(student_logits, teacher_logits, strict=True))


def _hand_distill(s, t, tau, diagonal=False, s2=None):
    rows = []
    for i in range(len(s)):
        js = [j for j in range(len(s)) if diagonal or j != i]
        sl = [_cos((s2 or s)[i], s[j]) / tau for j in js]
        tl = [_cos(t[i], t[j]) / tau for j in js]
        rows.append(_soft_ce_row(sl, tl))
    return sum(rows) / len(rows)


@pytest.mark.parametrize("tau", [0.05, 1.0])
def test_distillation_matches_hand_computation(tau):
    got = distillation_loss(torch.tensor(S), torch.tensor(T), tau)
    assert got.item() == pytest.approx(_hand_distill(S, T, tau), rel=1e-5)


def test_distillation_is_smallest_when_student_equals_teacher():
    t = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    other = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    assert distillation_loss(t, t) < distillation_loss(other, t)
    with pytest.raises(ValueError):
        distillation_loss(t[:1], t[:1])


def test_distillation_gradient_flows_to_student_only():
    s = torch.tensor(S, requires_grad=True)
    t = torch.tensor(T, requires_grad=True)
    distillation_loss(s, t).backward()
    assert s.grad is not None and s.grad.abs().sum() > 0
    assert t.grad is None


def test_contrastive_orthonormal_pairs():
    x = torch.eye(4)
    expected = math.log(1 + 3 * math.exp(-1 / 0.5))  # diagonal 1/tau, off-diagonal 0
    assert contrastive_loss(x, x, 0.5).item() == pytest.approx(expected, rel=1e-5)


def test_contrastive_matches_hand_computation():
    x = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    y = [[1.0, 0.2], [0.3, 1.0], [-1.0, 1.0]]
    tau = 0.5
    rows = cols = 0.0
    for i in range(3):
        li = [_cos(x[i], y[j]) / tau for j in range(3)]
        rows += -(li[i] - math.log(sum(math.exp(v) for v in li)))
        lc = [_cos(x[j], y[i]) / tau for j in range(3)]
        cols += -(lc[i] - math.log(sum(math.exp(v) for v in lc)))
    expected = (rows / 3 + cols / 3) / 2
    got = contrastive_loss(torch.tensor(x), torch.tensor(y), tau)
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_kd_matches_hand_computation():
    src = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]
    tgt = [[0.9, 0.1], [0.2, 1.0], [1.0, 0.5]]
    tau = 0.5
    mono = _hand_distill(src, T, tau)
    cross = _hand_distill(src, T, tau, diagonal=True, s2=tgt)  # rows: tgt_i vs src_j
    got = kd_loss(torch.tensor(src), torch.tensor(tgt), torch.tensor(T), tau)
    assert got.item() == pytest.approx((mono + cross) / 2, rel=1e-5)


def test_kd_prefers_translations_on_their_source():
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(32, 12, generator=g)
    src = torch.randn(32, 6, generator=g)
    aligned = kd_loss(src, src + 0.01 * torch.randn(32, 6, generator=g), teacher)
    shuffled = kd_loss(src, src[torch.randperm(32, generator=g)], teacher)
    assert aligned < shuffled
