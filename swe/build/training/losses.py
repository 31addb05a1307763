"""Refinement losses (torch): the student's sentence vectors against the teacher's, or against
their translations. All take ``[B, d]`` batches; dimensions of student and teacher may differ.

- :func:`distillation_loss`: Wada et al. eq. 2–3. In-batch cosine matrices of student and
  teacher, diagonal excluded, softmax with temperature τ per row; cross-entropy of the student's
  distribution against the teacher's, averaged over rows.
- :func:`contrastive_loss`: eq. 4–5. Symmetric InfoNCE over translation pairs with τ.
- :func:`kd_loss`: multilingual knowledge distillation (Reimers & Gurevych 2020) in relational
  form, so a d′-dimensional student can learn from a d-dimensional teacher without a projection:
  student(s) must reproduce the teacher's similarity distribution over the batch's sources, and
  student(t) must reproduce, against the student's sources, the teacher's distribution of s over
  the sources — diagonal included, where the teacher's similarity is maximal (cos = 1), so t is
  pulled onto s with soft, teacher-given negatives.
- :func:`cosine_distance`: 1 − cos per row; the hybrid loss (``refine.teacher_weight``) adds it
  between the student mapped by a learned linear projection and the teacher.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["contrastive_loss", "cosine_distance", "cosine_matrix", "distillation_loss",
           "kd_loss"]


def cosine_matrix(a: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """``[len(a), len(b)]`` cosine similarities (``b`` defaults to ``a``)."""
    a = F.normalize(a, dim=-1)
    b = a if b is None else F.normalize(b, dim=-1)
    return a @ b.T


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[B]``: 1 − cos between row i of ``a`` and row i of ``b`` (the hybrid loss's term)."""
    return 1 - F.cosine_similarity(a, b, dim=-1)


def _off_diagonal(m: torch.Tensor) -> torch.Tensor:
    """``[n, n-1]``: each row without its diagonal entry."""
    n = m.shape[0]
    return m.flatten()[1:].view(n - 1, n + 1)[:, :-1].reshape(n, n - 1)


def _soft_ce(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    target = teacher_logits.softmax(dim=-1)
    return -(target * student_logits.log_softmax(dim=-1)).sum(dim=-1).mean()


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor,
                      tau: float = 0.05) -> torch.Tensor:
    """Soft cross-entropy between in-batch similarity distributions (j ≠ i), eq. 2–3."""
    if student.shape[0] < 2:
        raise ValueError("distillation needs a batch of at least 2 sentences")
    s = _off_diagonal(cosine_matrix(student)) / tau
    t = _off_diagonal(cosine_matrix(teacher)) / tau
    return _soft_ce(s, t.detach())


def contrastive_loss(x: torch.Tensor, y: torch.Tensor, tau: float = 0.05) -> torch.Tensor:
    """Symmetric InfoNCE: row i of ``x`` and row i of ``y`` are translations, eq. 4–5."""
    logits = cosine_matrix(x, y) / tau
    target = torch.arange(len(x), device=x.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def kd_loss(student_src: torch.Tensor, student_tgt: torch.Tensor, teacher_src: torch.Tensor,
            tau: float = 0.05) -> torch.Tensor:
    """Relational multilingual distillation: ``student(s) ≈ teacher(s)`` and
    ``student(t) ≈ teacher(s)``, each as a match of in-batch similarity distributions."""
    t = cosine_matrix(teacher_src).detach() / tau
    mono = distillation_loss(student_src, teacher_src, tau)
    cross = _soft_ce(cosine_matrix(student_tgt, student_src) / tau, t)
    return (mono + cross) / 2
