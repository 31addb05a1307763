"""The classifier folder ``swe finetune`` writes: the best table as the folder's model, then
its head (``head.safetensors``) and ``classifier.json`` (read by :class:`swe.StaticClassifier`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swe.finetune.train import FinetuneJob

__all__ = ["save_classifier"]


def save_classifier(job: FinetuneJob, model: Any, best: dict, classes: list[str], multi: bool,
                    state: dict) -> None:
    """Write the best table as the folder's model, then its head and ``classifier.json``."""
    from safetensors.numpy import save as st_save

    from swe.classifier import CLASSIFIER, CLASSIFIER_FORMAT
    from swe.model import StaticModel
    from swe.modelfiles import write_folder

    provenance = {**model.provenance, "finetuned_from": job.model}
    StaticModel(model.words, best["table"].numpy(), tokenizer=model.tokenizer,
                lowercase=model.lowercase, languages=model.languages, oov=model.oov,
                provenance=provenance).save(job.output)
    weights = [k for k in best if k.startswith("head.") and k.endswith(".weight")]
    layers = sorted(weights, key=lambda k: int(k.split(".")[1]))
    tensors = {}
    for i, key in enumerate(layers):
        tensors[f"w{i}"] = best[key].numpy()
        tensors[f"b{i}"] = best[key.replace(".weight", ".bias")].numpy()
    training = {k: state[k] for k in ("step", "best_step", "history", "resumed_at")}
    write_folder(job.output, {"head.safetensors": st_save(tensors)}, {
        "format": CLASSIFIER_FORMAT, "format_version": 1, "labels": classes,
        "multi_label": multi, "head": job.head, "layers": len(layers),
        "options": {k: v for k, v in asdict(job).items() if k not in ("output",)},
        "training": training}, config_name=CLASSIFIER)
