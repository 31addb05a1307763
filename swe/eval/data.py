"""Where the evaluation data lives: one setting for every module, job and benchmark.

The shared data dir (see its README) holds the corpora, parallel pairs and evaluation sets.
:func:`data_root` is ``$SWE_DATA`` when set, else ``../shared/data`` beside the repository (the
checkout this package is imported from). The constants below are paths inside it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["STSB", "TATOEBA", "WIKIPEDIA", "data_root", "stsb_file", "wikipedia_files"]

#: STS-B splits ``{train,dev,test}.tsv``.
STSB = "eval/sts/stsb"
#: Tatoeba v1 test pairs ``tatoeba.{lang}-eng.{lang|eng}``.
TATOEBA = "eval/tatoeba_v1"
#: English Wikipedia, one sentence per line, in numbered ``.txt.xz`` parts.
WIKIPEDIA = "corpora/en_wikipedia"


def data_root() -> Path:
    """``$SWE_DATA`` if set, else ``../shared/data`` relative to the repository root."""
    env = os.environ.get("SWE_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def stsb_file(split: str, root: str | os.PathLike | None = None) -> Path:
    """The STS-B ``split`` (``train``, ``dev`` or ``test``) TSV under ``root`` (default
    :func:`data_root`)."""
    return Path(root or data_root()) / STSB / f"{split}.tsv"


def wikipedia_files(root: str | os.PathLike | None = None) -> list[Path]:
    """The English Wikipedia sentence files under ``root`` (default :func:`data_root`), in
    order."""
    return sorted((Path(root or data_root()) / WIKIPEDIA).glob("enwiki_sents.*.txt.xz"))
