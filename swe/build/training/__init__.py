"""The training room: the Ray Train loop (:mod:`.trainer`), its row-sparse Adam
(:mod:`.row_adam`) and the losses (:mod:`.losses`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.train import ScalingConfig

__all__ = ["trainer_class"]


def trainer_class(scaling: ScalingConfig) -> type:
    """The Ray Train trainer for ``scaling``: ``TorchTrainer`` when the workers exchange tensors
    (more than one) or use a GPU (it sets each worker's device); else the framework-free
    ``DataParallelTrainer``, the same loop without a torch process group, whose controller
    never imports torch (about 3 CPU-s a run here), nor does the driver."""
    if scaling.num_workers > 1 or scaling.use_gpu:
        from ray.train.torch import TorchTrainer

        return TorchTrainer
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    return DataParallelTrainer
