"""Hostile round 13's cases: a user file named like a cut-short manifest write, a killed export's
half-written folder, and the minor ones (one test each, beside round 10's file)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from swe.cli import main
from swe.model import StaticModel


def _model(path: Path) -> Path:
    StaticModel.from_vectors(["the", "cat", "sat", "dog"], np.eye(4, dtype=np.float32)).save(
        str(path))
    return path


@pytest.mark.usefixtures("ray_session")
def test_encode_never_deletes_a_user_file_named_like_a_manifest_temporary(tmp_path, capsys):
    """Round 13: any ``_manifest.json.tmp-*`` counted as a cut-short manifest write, so a
    folder holding only a user's was taken as an encode output and the file deleted; a rerun
    deleted one kept beside an encode output too."""
    model = _model(tmp_path / "m")
    (tmp_path / "in.txt").write_text("the cat\nsat dog\n")
    new = tmp_path / "new"
    new.mkdir()
    (new / "_manifest.json.tmp-notes").write_text("kept")
    args = ["encode", "--model", str(model), "--input", str(tmp_path / "in.txt"), "--output"]
    assert main([*args, str(new)]) == 2
    assert "is a folder that is not an encode output" in capsys.readouterr().err
    assert (new / "_manifest.json.tmp-notes").read_text() == "kept"
    out = tmp_path / "enc"
    assert main([*args, str(out)]) == 0
    (out / "_manifest.json.tmp-keep").write_text("kept")
    (out / "_manifest.json.tmp-123-0badc0de").write_text("{")  # swe's own cut-short write
    assert main([*args, str(out), "--dtype", "float16"]) == 0
    assert (out / "_manifest.json.tmp-keep").read_text() == "kept"
    assert not (out / "_manifest.json.tmp-123-0badc0de").exists()
