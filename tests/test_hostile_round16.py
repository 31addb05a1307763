"""Hostile round 16's cases (one test each, beside round 15's file)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from swe.build.teacher.store import (
    descriptor,
    list_store,
    open_namespace,
    sentence_key,
    write_rows,
)
from swe.cli import main


def test_prune_judges_a_namespaces_row_files_by_content_not_by_name(tmp_path, capsys):
    """Round 16: a user's Parquet file inside a bucket folder (``bff/thesis.parquet``) was
    counted as rows and removed by prune. A row file is named as the store names it and holds
    the store's columns; anything else stops the prune, named, and is not counted."""
    store = tmp_path / "store"
    ns = open_namespace(str(store), descriptor("a" * 64, "torch", 512, 384))
    folder = Path(ns.url)
    write_rows(ns, [(sentence_key("en", "a b"), "en", ["a", "b"], bytes(2 * 384 * 2),
                     bytes(384 * 4))], 0)
    (folder / "bff").mkdir()
    pq.write_table(pa.table({"x": [1, 2, 3]}), folder / "bff" / "thesis.parquet")
    forged = folder / "b3" / f"{0:020d}-abcdefabcdef.parquet"  # named like a row file
    forged.parent.mkdir(exist_ok=True)
    pq.write_table(pa.table({"x": [4]}), forged)
    [entry] = list_store(str(store))
    assert entry["sentences"] == 1 and entry["files"] == 1
    assert sorted(entry["foreign"]) == ["b3/00000000000000000000-abcdefabcdef.parquet",
                                        "bff/thesis.parquet"]
    for extra in (["--dry-run"], []):
        assert main(["store", "prune", str(store), "--runtime", "torch", *extra]) == 2
        assert "holds files that are not the store's" in capsys.readouterr().err
    assert pq.read_table(folder / "bff" / "thesis.parquet").num_rows == 3
    assert pq.read_table(forged).num_rows == 1
