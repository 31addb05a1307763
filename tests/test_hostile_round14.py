"""Hostile round 14's cases (one test each, beside round 13's file)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from hostile import first_encode

from swe.build.teacher.store import StoreError, descriptor, list_store, open_namespace, prune
from swe.cli import main
from swe.lease import USES, use_lease


@pytest.mark.usefixtures("ray_session")
def test_a_rerun_keeps_an_earlier_run_folder_holding_a_users_files(tmp_path, caplog, capsys):
    """Round 14: a rerun with a changed option removed the previous ``v-<run>/`` whole, user
    files in it included. A run folder holding files a run does not write is kept, named."""
    args, out = first_encode(tmp_path)
    (first,) = out.glob("v-*")
    (first / "notes.txt").write_text("mine")
    (first / "_receipts" / "mine.txt").write_text("mine")
    with caplog.at_level(logging.WARNING, logger="swe.bulk"):
        assert main([*args, "--dtype", "float16"]) == 0
    assert (first / "notes.txt").read_text() == "mine"
    assert (first / "_receipts" / "mine.txt").read_text() == "mine"
    assert "holds files swe did not write (_receipts/mine.txt, notes.txt)" in caplog.text
    (first / "notes.txt").unlink()
    (first / "_receipts" / "mine.txt").unlink()
    assert main([*args, "--dtype", "int8"]) == 0  # only the runs' own files: removed
    assert len(list(out.glob("v-*"))) == 1 and not first.exists()
    capsys.readouterr()


def test_a_namespace_a_build_wrote_into_while_it_was_pruned_does_not_block_the_store(
        tmp_path, caplog, capsys):
    """Round 14: ``swe store prune`` while a build wrote the same namespace left its rows
    without ``_NAMESPACE.json``, and ``store list``/``prune`` then refused the whole store,
    telling the user to remove it. Such a folder is skipped with a warning (the next build
    with that teacher writes the descriptor again); the other namespaces stay usable."""
    from swe.build.teacher.store import descriptor, list_store, open_namespace

    store = tmp_path / "store"
    keep = open_namespace(str(store), descriptor("a" * 64, "torch", 512, 384))
    pruned = open_namespace(str(store), descriptor("b" * 64, "torch", 512, 384))
    (Path(pruned.url) / "_NAMESPACE.json").unlink()  # pruned; then the build wrote a row file
    (Path(pruned.url) / "b3").mkdir()
    (Path(pruned.url) / "b3" / "0-abc.parquet").write_bytes(b"PAR1")
    with caplog.at_level(logging.WARNING, logger="swe.build"):
        assert [n["namespace"] for n in list_store(str(store))] == [Path(keep.url).name]
    assert "has no _NAMESPACE.json" in caplog.text
    assert main(["store", "prune", str(store), "--teacher", "bb"]) == 0
    assert (Path(pruned.url) / "b3" / "0-abc.parquet").exists()  # nothing matched it
    again = open_namespace(str(store), descriptor("b" * 64, "torch", 512, 384))
    assert again.url == pruned.url and len(list_store(str(store))) == 2
    capsys.readouterr()


def test_a_worker_that_died_on_every_retry_is_one_line(capsys):
    """Round 14: a Ray worker killed on every retry (out of memory) in ``swe quantize`` was
    Ray's own traceback; it is one line naming what happened and what to do."""
    import ray.exceptions

    from swe.commands import failed

    for error in (ray.exceptions.WorkerCrashedError(), ray.exceptions.NodeDiedError("n1")):
        assert failed(error, []) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: a Ray worker died and its retries were used up") and \
            err.count("\n") == 1 and "give the job more memory" in err, err


def test_store_commands_name_what_a_path_that_is_no_store_folder_is(tmp_path, capsys):
    """Round 14: a link loop, a dangling link, a named pipe, a file and a missing path all
    read "is not a teacher store (no _SWE_STORE.json)"."""
    import os

    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    for name, needle in (("loop", "cannot be opened"), ("dangling", "a dangling symbolic link"),
                         ("fifo", "is a named pipe"), ("file", "is a file"),
                         ("missing", "is missing")):
        assert main(["store", "list", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err


def test_prune_refuses_a_namespace_a_live_run_uses_and_not_a_dead_ones(tmp_path):
    """Round 14: a prune while a build used the namespace removed it under the build. A build
    holds a use of its namespace (swe.lease.use_lease); prune refuses while one is live."""
    store = str(tmp_path / "store")
    ns = open_namespace(store, descriptor("d" * 64, "torch", 512, 384))
    use = use_lease(ns.url, "build en into /x")
    try:
        with pytest.raises(StoreError, match=r"ns-\w+ is in use by .*pid \d+ \(build en into /x"):
            prune(store, teacher="dd")
        assert len(list_store(store)) == 1
    finally:
        use.release()
    dead = Path(ns.url) / USES / ("0" * 32 + ".json")  # a killed run's: no heartbeat for long
    dead.write_text(json.dumps({"token": "0" * 32, "heartbeat": time.time() - 10_000,
                                "host": "elsewhere", "pid": 1}))
    assert [n["namespace"] for n in prune(store, teacher="dd")] == [Path(ns.url).name]
    assert list_store(store) == [] and not Path(ns.url).exists()
