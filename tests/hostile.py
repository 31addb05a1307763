"""What the hostile-round tests share: a four-word model and a first encode of two lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from swe.cli import main
from swe.model import StaticModel


def tiny_model(path: Path) -> Path:
    """A saved model of ``the cat sat dog`` (one-hot vectors); its path."""
    StaticModel.from_vectors(["the", "cat", "sat", "dog"], np.eye(4, dtype=np.float32)).save(
        str(path))
    return path


def first_encode(tmp_path: Path) -> tuple[list[str], Path]:
    """``swe encode`` of two lines into ``tmp_path/enc`` (run once here): its arguments, to run
    again with more, and the output."""
    out = tmp_path / "enc"
    (tmp_path / "in.txt").write_text("the cat\nsat dog\n")
    args = ["encode", "--model", str(tiny_model(tmp_path / "m")), "--input",
            str(tmp_path / "in.txt"), "--output", str(out)]
    assert main(args) == 0
    return args, out
