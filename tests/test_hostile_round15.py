"""Hostile round 15's cases (one test each, beside round 14's file)."""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile import first_encode

from swe.cli import main


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
