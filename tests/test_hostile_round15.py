"""Hostile round 15's cases (one test each, beside round 14's file)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile import first_encode

from swe.build import load_config
from swe.build.config import ConfigError
from swe.cli import main
from swe.ensemble import EnsembleModel
from swe.model import StaticModel

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.usefixtures("ray_session")
def test_a_rerun_judges_an_earlier_run_folder_by_content_not_by_name(tmp_path, caplog, capsys):
    """Round 15: files named like a run's parts and receipts (``7-0.parquet``,
    ``_receipts/7-0.json``) that the run never wrote were removed with it. A part is the run's
    when its receipt names it (with its size), or, cut off before its receipt by a kill, when
    it is Parquet with the encoder's ``embedding`` column."""
    args, out = first_encode(tmp_path)
    (first,) = out.glob("v-*")
    (first / "7-0.parquet").write_text("userdata")
    (first / "_receipts" / "7-0.json").write_text("userdata")
    pq.write_table(pa.table({"id": [1]}), first / "3-1.parquet")  # a user's Parquet
    with caplog.at_level(logging.WARNING, logger="swe.bulk"):
        assert main([*args, "--dtype", "float16"]) == 0
    assert (first / "7-0.parquet").read_text() == "userdata"
    assert (first / "_receipts" / "7-0.json").read_text() == "userdata"
    assert pq.read_table(first / "3-1.parquet").num_rows == 1
    assert "(3-1.parquet, 7-0.parquet, _receipts/7-0.json)" in caplog.text
    for name in ("7-0.parquet", "3-1.parquet", "_receipts/7-0.json"):
        (first / name).unlink()
    (first / "_receipts" / "0-0.json").unlink()  # a part a kill left without its receipt
    assert main([*args, "--dtype", "int8"]) == 0
    assert len(list(out.glob("v-*"))) == 1 and not first.exists()
    capsys.readouterr()


def _ensemble(path):
    words = ["the", "cat", "sat", "dog"]
    members = [StaticModel.from_vectors(words, np.eye(4, dtype=np.float32) * (i + 1))
               for i in range(2)]
    EnsembleModel(members, [1, 2]).save(str(path))
    return path


def test_reseal_and_info_take_an_ensemble_and_a_failed_reseal_restores_every_config(
        tmp_path, capsys):
    """Round 15: ``swe reseal`` refused every ensemble (its ``ensemble.json`` was checked as a
    model's config), and ``swe info`` called one "a saved model, not a model"."""
    ens = _ensemble(tmp_path / "ens")
    assert main(["reseal", str(ens)]) == 0
    assert "resealed the ensemble" in capsys.readouterr().out
    assert main(["info", str(ens)]) == 0
    out = capsys.readouterr().out
    assert "2 members, weights [1.0, 2.0]" in out and "member_1       dim 4, 4 words" in out
    configs = [ens / "ensemble.json", ens / "member_0/config.json", ens / "member_1/config.json"]
    before = [p.read_bytes() for p in configs]
    cut = ens / "member_1/model.safetensors"
    cut.write_bytes(cut.read_bytes()[:-9])  # sealed as it is, it would no longer load
    assert main(["reseal", str(ens)]) != 0
    assert "model.safetensors" in capsys.readouterr().err
    assert [p.read_bytes() for p in configs] == before
    (ens / "ensemble.json").write_text(json.dumps({**json.loads(before[0]), "members": 10**9}))
    assert main(["reseal", str(ens)]) == 2
    assert "members = 1000000000 should be 1 to 64" in capsys.readouterr().err


def test_a_refused_value_is_not_cross_checked_as_its_default(tmp_path):
    """Round 15: ``selection.n = 0`` was refused, and then cross-checked as its default 100
    ("selection.n = 100 > selection.candidates = 40"), a second, wrong line."""
    with pytest.raises(ConfigError) as e:
        load_config("pipelines/configs/quickstart.toml",
                    ["selection.candidates=40", "selection.n=0"], output=str(tmp_path / "o"))
    assert str(e.value).count("\n- ") == 1 and "selection.n = 0 should be >= 1" in str(e.value)
    with pytest.raises(ConfigError, match=r"selection.n = 50 > selection.candidates = 40"):
        load_config("pipelines/configs/quickstart.toml",
                    ["selection.candidates=40", "selection.n=50"], output=str(tmp_path / "o"))


@pytest.mark.parametrize("store", ["~", "~/store", "~nobody/store"])
def test_a_path_starting_with_a_tilde_is_refused_not_made_a_folder_named_tilde(
        tmp_path, monkeypatch, store):
    """Round 15: ``extraction.store = "~"`` made a folder named ``~`` in the current directory
    (TOML and ``--set`` values are not expanded by a shell)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"starts with '~', which only a shell expands"):
        load_config(str(ROOT / "pipelines/configs/quickstart.toml"),
                    [f"extraction.store='{store}'"], output=str(tmp_path / "o"))
    assert list(tmp_path.iterdir()) == []


def test_store_commands_name_a_device_as_a_device(capsys):
    """Round 15: ``swe store list /dev/null`` said "is a file"."""
    assert main(["store", "list", "/dev/null"]) == 2
    assert "/dev/null is a device, not a teacher store's folder" in capsys.readouterr().err
