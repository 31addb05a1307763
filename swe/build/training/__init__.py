"""The training room: the Ray Train loop (:mod:`.trainer`), its row-sparse Adam
(:mod:`.row_adam`) and the losses (:mod:`.losses`)."""

from __future__ import annotations

__all__ = ["trainer_class"]


def trainer_class(workers: int, gpu: bool) -> type:
    """Ray Train's ``TorchTrainer`` when the workers exchange tensors (more than one) or use a
    GPU (it sets each worker's device); else the framework-free ``DataParallelTrainer``, the
    same loop without a torch process group, whose controller never imports torch (2-3 CPU-s
    and a few hundred MB a run, and the driver does not either)."""
    if workers > 1 or gpu:
        from ray.train.torch import TorchTrainer

        return TorchTrainer
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    return DataParallelTrainer
