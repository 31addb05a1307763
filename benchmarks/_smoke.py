"""The set-up every benchmark's ``--smoke`` mode shares (a helper, not a benchmark: test_benchmarks
runs the scripts beside it, never this module). Scripts import it as ``from _smoke import …``:
Python puts a script's own folder on ``sys.path``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

__all__ = ["parse", "quickstart_build", "random_model", "smoke_model"]


def parse(p: argparse.ArgumentParser, argv: Sequence[str] | None, smoke: dict,
          required: str | None = None) -> argparse.Namespace:
    """The arguments, with ``smoke``'s values as defaults under ``--smoke``; ``required`` names
    an option (``model``) that only ``--smoke`` may leave out."""
    if p.parse_args(argv).smoke:
        p.set_defaults(**smoke)
    args = p.parse_args(argv)
    if required and not (getattr(args, required) or args.smoke):
        p.error(f"--{required} is required (or --smoke)")
    return args


def random_model(words: list[str], path: str | Path, dim: int = 64, seed: int = 0,
                 **kwargs: object) -> str:
    """A model of ``words`` with seeded random float32 vectors saved at ``path`` (``kwargs``:
    ``StaticModel.from_vectors``'s, e.g. ``tokenizer``); its path."""
    import numpy as np

    from swe import StaticModel

    vectors = np.random.default_rng(seed).standard_normal((len(words), dim), dtype=np.float32)
    StaticModel.from_vectors(words, vectors, **kwargs).save(str(path))
    return str(path)


def smoke_model(texts: list[str], path: str | Path, minilm_tokenizer: bool = True,
                **kwargs: object) -> str:
    """A 2,000-word model of the texts' most frequent (lowercased) words with random 64-d
    vectors, by default with the MiniLM tokenizer for the OOV rule; its path."""
    from collections import Counter

    words = [w for w, _ in Counter(" ".join(texts).lower().split()).most_common(2000)]
    if minilm_tokenizer:
        from swe.build.teacher import minilm_dir

        kwargs.setdefault("tokenizer", minilm_dir())
    return random_model(words, path, **kwargs)


def quickstart_build(build: str | None, tmp: str, overrides: list[str], until: str) -> str:
    """``build`` itself, or (with none given) a small quickstart build under ``tmp`` run through
    the stage ``until`` with the ``--set`` ``overrides``; its folder."""
    if build:
        return build
    import os

    from swe.build import build as run_build
    from swe.build import load_config

    build = os.path.join(tmp, "build")
    run_build(load_config("quickstart", overrides, output=build), until=until)
    return build
