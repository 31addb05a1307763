"""How a model's word matrix is stored in ``model.safetensors``: float32, float16 or symmetric
int8 with per-row or global float32 scales, and how each is read back into float32. A
*clustered* model (``swe quantize``) stores K shared unit vectors in any of those types, plus
one cluster index and one norm per word: row ``i`` is ``norms[i] * centroids[clusters[i]]``.

Needs numpy only."""

from __future__ import annotations

import numpy as np

from swe.modelfiles import ModelFileError, ModelFolder

__all__ = ["CLUSTERS", "DTYPES", "NORMS", "SCALES", "TENSOR", "clustered_tensors",
           "dequantize_int8", "matrix_tensors", "quantize_int8", "read_matrix"]

TENSOR = "embeddings"
_SCALES = "scales"  # int8 models: float32 [V] (scale "row") or [1] (scale "global")
#: Matrix types ``StaticModel.save`` writes and ``StaticModel.load`` reads.
DTYPES = ("float32", "float16", "int8")
#: int8 scale schemes: one scale per row (word) or one for the whole matrix.
SCALES = ("row", "global")
_F16_MAX = float(np.finfo(np.float16).max)
CLUSTERS = "clusters"  # clustered models: uint16 (K <= 65,536) or int32 [V], each row's centroid
NORMS = "norms"  # clustered models: float16 [V], each row's length


def quantize_int8(vectors: np.ndarray, scale: str = "row") -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 codes and float32 scales of a ``[V, d]`` matrix: ``q = round(x / s)`` with
    ``s = max|x| / 127`` per row (``scale="row"``, ``[V]`` scales) or over the whole matrix
    (``"global"``, ``[1]``); :func:`dequantize_int8` gives back ``x`` within ``s / 2``."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}; got {scale!r}")
    x = np.asarray(vectors, dtype=np.float32)
    amax = np.abs(x).max(axis=1) if scale == "row" else np.abs(x).max(keepdims=True).reshape(1)
    scales = (amax.astype(np.float64) / 127).astype(np.float32)
    divisor = np.where(scales > 0, scales, np.float32(1))
    q = np.rint(x / (divisor[:, None] if scale == "row" else divisor))
    return np.clip(q, -127, 127).astype(np.int8), scales


def dequantize_int8(q: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The float32 matrix ``q * s`` of int8 codes and their ``[V]`` (per-row) or ``[1]``
    (global) scales."""
    out = q.astype(np.float32)
    out *= np.asarray(scales, dtype=np.float32).reshape(-1, 1)
    return out


def matrix_tensors(vectors: np.ndarray, dtype: str, scale: str) -> tuple[dict, dict]:
    """The safetensors tensors of a matrix saved as ``dtype`` and the config keys naming it."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}; got {scale!r}")
    if dtype == "int8":
        q, scales = quantize_int8(vectors, scale)
        return {TENSOR: q, _SCALES: scales}, {"dtype": dtype, "scale": scale}
    if dtype == "float16" and vectors.size and float(np.abs(vectors).max()) > _F16_MAX:
        raise ValueError(f"a value of {float(np.abs(vectors).max()):g} does not fit float16 "
                         f"(max {_F16_MAX:g}); save as float32 or int8")
    return {TENSOR: vectors.astype(dtype)}, {"dtype": dtype}


def clustered_tensors(centroids: np.ndarray, clusters: np.ndarray, norms: np.ndarray,
                      dtype: str, scale: str) -> tuple[dict, dict]:
    """The safetensors tensors of a clustered matrix (``[K, d]`` centroids saved as ``dtype``)
    and the config keys naming it."""
    tensors, scheme = matrix_tensors(centroids, dtype, scale)
    index = np.uint16 if len(centroids) <= 1 << 16 else np.int32
    tensors[CLUSTERS] = np.asarray(clusters).astype(index)
    tensors[NORMS] = np.asarray(norms).astype(np.float16)
    return tensors, {**scheme, "clusters": len(centroids)}


def read_matrix(folder: ModelFolder, tensors: dict, dim: int | None) -> np.ndarray:
    """The word matrix of a loaded ``model.safetensors``, int8 dequantised to float32 and a
    clustered one expanded, cut to the first ``dim`` columns; a dtype or scale this swe does not
    know is a one-line error."""
    rows = _read_rows(folder, tensors, dim)
    k = folder.get("clusters", int, None)
    return rows if k is None else _expand(folder, tensors, rows, k)


def _expand(folder: ModelFolder, tensors: dict, centroids: np.ndarray, k: int) -> np.ndarray:
    """A clustered model's ``[V, d]`` float32 rows from its checked index and norms."""
    where = f"{folder.path}/model.safetensors"
    index, norms = tensors.get(CLUSTERS), tensors.get(NORMS)
    if (len(centroids) != k or index is None or norms is None or index.ndim != 1
            or norms.shape != index.shape or index.dtype.kind not in "iu"):
        raise ModelFileError(f"{where}: a model of {k} clusters needs [{k}, d] centroids and "
                             f"one {CLUSTERS!r} index and one {NORMS!r} value per word; save "
                             "the model again")
    if index.size and (int(index.min()) < 0 or int(index.max()) >= k):
        raise ModelFileError(f"{where}: a cluster index lies outside 0..{k - 1}; save the "
                             "model again")
    out = centroids[index]
    out *= norms.astype(np.float32)[:, None]
    return out


def _read_rows(folder: ModelFolder, tensors: dict, dim: int | None) -> np.ndarray:
    where = f"{folder.path}/model.safetensors"
    dtype = folder.get("dtype", str, None)
    if dtype is not None and dtype not in DTYPES:
        raise ModelFileError(f"{folder.config_path}: dtype = {dtype!r} is not one this swe reads "
                             f"({', '.join(DTYPES)}); upgrade swe")
    matrix = tensors[TENSOR]
    if str(matrix.dtype) != (dtype or "float32"):  # no dtype: a model from before the key
        recorded = f"dtype {dtype!r}" if dtype else "no dtype (float32)"
        raise ModelFileError(f"{where}: the matrix is {matrix.dtype} but config.json records "
                             f"{recorded}; save the model again")
    if dim is not None and matrix.ndim == 2:
        if dim > matrix.shape[1]:
            raise ValueError(f"dim={dim} exceeds the {matrix.shape[1]} dimensions of the "
                             f"model at {folder.path}; use dim <= {matrix.shape[1]}")
        matrix = matrix[:, :dim]
    if dtype != "int8":
        return matrix
    return dequantize_int8(matrix, _int8_scales(folder, tensors, matrix, where))


def _int8_scales(folder: ModelFolder, tensors: dict, q: np.ndarray, where: str) -> np.ndarray:
    """An int8 model's checked scales: float32, finite, >= 0, ``[V]`` or ``[1]`` as recorded."""
    scale = folder.get("scale", str)
    if scale not in SCALES:
        raise ModelFileError(f"{folder.config_path}: scale = {scale!r} is not one this swe "
                             f"reads ({', '.join(SCALES)}); upgrade swe")
    scales = tensors.get(_SCALES)
    if q.ndim != 2:
        raise ModelFileError(f"{where}: the int8 matrix has shape {q.shape}, not [V, d]")
    want = (q.shape[0],) if scale == "row" else (1,)
    if scales is None or scales.dtype != np.float32 or scales.shape != want:
        got = "none" if scales is None else f"{scales.dtype} {list(scales.shape)}"
        raise ModelFileError(f"{where}: an int8 model with scale {scale!r} needs a float32 "
                             f"{_SCALES!r} tensor of shape {list(want)} (found {got}); save "
                             "the model again")
    if not (np.isfinite(scales).all() and (scales >= 0).all()):
        raise ModelFileError(f"{where}: {_SCALES!r} holds a negative or non-finite scale; "
                             "save the model again")
    return scales
