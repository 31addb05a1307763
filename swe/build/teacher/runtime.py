"""Teacher runtimes: eager torch, ONNX Runtime fp32 (``onnx``) and ONNX Runtime int8
(``onnx-int8``), chosen by ``extraction.runtime`` for every teacher pass of a build.

The ONNX forms are made once per teacher, in a process of their own (an export in the same
process as a torch model changed that model's outputs), and kept in a cache folder keyed by the
teacher's checksum, because the teacher's folder may be read-only (site-packages)::

    <cache>/teachers/<teacher sha256[:16]>/<runtime>-v<FORMAT>/model.onnx, model.json

``model.json`` records the file's sha256, the teacher's checksum and how it was made. The
driver prepares the file before any work, reads it once, checks its sha256 and puts it in Ray's
object store; actors load it from there and never export.

``onnx-int8`` quantises the weight matrices of the linear layers to int8 per output channel
and their inputs to uint8 with **fixed scales**, calibrated once on the sentences shipped in
``calibration.txt``: a sentence's output never depends on the other sentences of its batch
(dynamic quantisation scales each batch by its own range, so it would). Measured on this box
(docs/teacher.md), quantising every linear layer lost too much (token cosine 0.88 to fp32);
keeping each layer's FFN output projection (its input is the GELU output, whose outliers set
the scale) and the attention products in fp32 gives 0.99 at most of the speed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "RUNTIMES", "TeacherRuntimeError", "cache_root", "load_model_bytes",
           "prepare", "session", "teacher_checksum"]

RUNTIMES = {"torch": "eager PyTorch, fp32 on CPU (bf16 autocast on GPU)",
            "onnx": "ONNX Runtime, fp32",
            "onnx-int8": "ONNX Runtime, int8 linear layers with fixed activation scales"}
FORMAT = 1  # bump when the export or the quantisation changes: old cache entries are not reused
_CALIBRATION = Path(__file__).with_name("calibration.txt")
_TEACHER_FILES = (".json", ".safetensors", ".bin", ".txt", ".model")

log = logging.getLogger("swe.build")


class TeacherRuntimeError(ValueError):
    """A teacher runtime could not be prepared or loaded (the message says what to do)."""


def cache_root() -> str:
    """``$SWE_CACHE``, else ``~/.cache/swe``."""
    return os.environ.get("SWE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "swe")


def teacher_checksum(path: str) -> str:
    """sha256 over the names and bytes of a teacher folder's weight, config and tokenizer files
    (read once per process while none of them changes: same size, mtime, ctime and inode)."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in _TEACHER_FILES
                   and not p.name.startswith(".") and p.name != "README.md")
    if not files:
        raise TeacherRuntimeError(f"teacher {path} holds no model files (config.json, weights)")
    return _folder_digest(str(root), tuple(
        (str(p.relative_to(root)), *_stamp(str(p))) for p in files))


def _sha256(path: str) -> str:
    return _file_digest(path, *_stamp(path))


def _stamp(path: str) -> tuple[int, ...]:
    """What changes whenever a file's bytes do (ctime even when mtime is set back)."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


@functools.lru_cache(maxsize=64)
def _folder_digest(root: str, files: tuple) -> str:
    h = hashlib.sha256()
    for name, *_ in files:
        h.update(name.encode() + b"\0")
        _update(h, os.path.join(root, name))
    return h.hexdigest()


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, *stamp: int) -> str:
    h = hashlib.sha256()
    _update(h, path)
    return h.hexdigest()


def _update(h: Any, path: str) -> None:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)


def prepare(teacher: str, runtime: str, cache: str | None = None,
            trust_remote_code: bool = False) -> dict | None:
    """The cached ONNX model of ``teacher`` for ``runtime`` (made now if missing): a dict with
    its ``path``, ``sha256``, ``teacher_sha256`` and ``runtime``; None for ``torch``."""
    if runtime == "torch":
        return None
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    teacher_sha = teacher_checksum(teacher)
    folder = os.path.join(cache or cache_root(), "teachers", teacher_sha[:16],
                          f"{runtime}-v{FORMAT}")
    info = _cached(folder, teacher_sha)
    if info is None:
        with _one_maker(folder):
            info = _cached(folder, teacher_sha)  # made by the process this one waited for
            if info is None:
                source = (None if runtime == "onnx"
                          else prepare(teacher, "onnx", cache, trust_remote_code))
                _make(teacher, runtime, folder, teacher_sha, source, trust_remote_code)
                info = _cached(folder, teacher_sha)
    if info is None:
        raise TeacherRuntimeError(f"the {runtime} form of teacher {teacher} was made in "
                                  f"{folder} but does not check out; remove it and rerun")
    return info


@contextlib.contextmanager
def _one_maker(folder: str) -> Iterator[None]:
    """Hold ``<folder>.lock`` while the entry is made: a second process (another build, another
    test worker) waits for the first and reuses its entry instead of making the same one beside
    it. The lock ends with its process, so a killed maker leaves none; where the file system
    cannot lock, each process makes its own and the first rename wins (:func:`_make`)."""
    import fcntl

    parent, lock = os.path.dirname(folder), f"{folder}.lock"
    try:
        os.makedirs(parent, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise TeacherRuntimeError(f"cannot write the teacher cache {parent} ({e}): set "
                                  "SWE_CACHE to a writable folder"
                                  + (f", or remove {lock}" if os.path.isdir(lock) else "")
                                  ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process making %s", folder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # no locks here (some network file systems): make it unlocked
        yield
    finally:
        os.close(fd)  # releases the lock


def _cached(folder: str, teacher_sha: str) -> dict | None:
    """The cache entry in ``folder`` if it is complete and its file matches its checksum."""
    try:
        with open(os.path.join(folder, "model.json"), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    path = os.path.join(folder, "model.onnx")
    if info.get("teacher_sha256") != teacher_sha or not os.path.exists(path) \
            or _sha256(path) != info.get("sha256"):
        return None
    return {**info, "path": path}


def _make(teacher: str, runtime: str, folder: str, teacher_sha: str, source: dict | None,
          trust_remote_code: bool) -> None:
    """Export (or quantise ``source``) in a child process into a temporary folder, then move it
    into place in one rename (concurrent builds: the first rename wins, the other is dropped)."""
    import shutil

    tmp = f"{folder}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    log.info("making the %s form of teacher %s, once (about a minute on 2 CPU cores; kept in %s)",
             runtime, teacher, folder)
    cmd = [sys.executable, "-m", "swe.build.teacher.runtime", runtime, teacher, tmp,
           source["path"] if source else "", "1" if trust_remote_code else "0"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            last = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise TeacherRuntimeError(
                f"teacher {teacher} could not be turned into the {runtime} runtime: {last}; "
                'use extraction.runtime = "torch"')
        path = os.path.join(tmp, "model.onnx")
        meta = {"runtime": runtime, "format": FORMAT, "teacher": teacher,
                "teacher_sha256": teacher_sha, "sha256": _sha256(path),
                **json.loads(Path(tmp, "made.json").read_text())}
        Path(tmp, "model.json").write_text(json.dumps(meta, indent=1))
        try:
            os.rename(tmp, folder)
        except OSError:  # another build made it first (or a broken entry is in the way)
            if _cached(folder, teacher_sha) is None:
                shutil.rmtree(folder, ignore_errors=True)
                os.rename(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_model_bytes(info: dict) -> bytes:
    """The ONNX file of a prepared runtime, checked against its sha256."""
    data = Path(info["path"]).read_bytes()
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise TeacherRuntimeError(f"{info['path']} does not match its checksum: remove its folder "
                            "and rerun (the runtime is made again)")
    return data


def session(model: bytes, threads: int | None, device: str = "cpu") -> Any:
    """An ONNX Runtime session over ``model`` (CUDA first on GPU actors: unrun on this box)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    providers = ["CPUExecutionProvider"]
    if device.startswith("cuda"):
        providers.insert(0, "CUDAExecutionProvider")
    return ort.InferenceSession(model, opts, providers=providers)


# -- the child process: export and quantisation --------------------------------------------------


def _inputs(tokenizer: Any, texts: list[str]) -> dict:
    import numpy as np

    enc = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="np")
    return {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")
            if k in enc}


def _export(teacher: str, out: str, trust_remote_code: bool) -> dict:
    """The teacher's last hidden state as ONNX (opset 17, dynamic batch and length)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(teacher, local_files_only=True,
                                        trust_remote_code=trust_remote_code)
    model = AutoModel.from_pretrained(teacher, local_files_only=True, attn_implementation="eager",
                                      trust_remote_code=trust_remote_code).eval()
    sample = _inputs(tok, ["a short one", "and a somewhat longer second sentence"])
    names = list(sample)

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args, strict=True))).last_hidden_state

    axes = {k: {0: "batch", 1: "tokens"} for k in [*names, "last_hidden_state"]}
    with torch.inference_mode():
        torch.onnx.export(LastHidden(), tuple(torch.from_numpy(sample[k]) for k in names),
                          os.path.join(out, "model.onnx"), input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    return {"inputs": names, "torch": torch.__version__}


def _quantize(teacher: str, source: str, out: str, trust_remote_code: bool) -> dict:
    """Static int8 quantisation of ``source``'s linear layers (see the module's docstring)."""
    import onnx
    import onnxruntime
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(teacher, local_files_only=True,
                                        trust_remote_code=trust_remote_code)
    lines = [s for s in _CALIBRATION.read_text(encoding="utf-8").splitlines()
             if s and not s.startswith("#")]
    pre = os.path.join(out, "pre.onnx")
    quant_pre_process(source, pre, skip_symbolic_shape=True)
    graph = onnx.load(pre).graph
    weights = {i.name for i in graph.initializer}
    linear = [n.name for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    kept = [n for n in linear if _is_ffn_output(n)]
    batches = iter([_inputs(tok, lines[i:i + 32]) for i in range(0, len(lines), 32)])

    class Calibration(CalibrationDataReader):
        def get_next(self) -> dict | None:
            return next(batches, None)

    quantize_static(pre, os.path.join(out, "model.onnx"), Calibration(),
                    quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True,
                    calibrate_method=CalibrationMethod.MinMax,
                    nodes_to_quantize=[n for n in linear if n not in kept],
                    extra_options={"WeightSymmetric": True})
    os.remove(pre)
    return {"onnxruntime": onnxruntime.__version__, "quantized": len(linear) - len(kept),
            "kept_fp32": kept, "calibration_sha256": _sha256(str(_CALIBRATION)),
            "calibration_sentences": len(lines)}


def _is_ffn_output(node: str) -> bool:
    """A transformer layer's FFN output projection (BERT's ``layer.N/output/dense``)."""
    return "/output/dense/" in node and "/attention/" not in node


def main(argv: list[str]) -> int:
    """``python -m swe.build.teacher.runtime RUNTIME TEACHER OUT SOURCE TRUST``: make one cache
    entry."""
    runtime, teacher, out, source, trust = argv
    os.makedirs(out, exist_ok=True)
    made = (_export(teacher, out, trust == "1") if runtime == "onnx"
            else _quantize(teacher, source, out, trust == "1"))
    Path(out, "made.json").write_text(json.dumps(made))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
