"""Hostile round 18's cases (one test each)."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from swe import storage
from swe.build.markers import StageDir
from swe.build.teacher.store import descriptor, list_store, open_namespace, sentence_key, write_rows
from swe.lease import Lease
from swe.leftovers import foreign_files


def _returns_within(seconds: float, fn, *args):
    """``fn(*args)`` (or its error), failing, not hanging, when it blocks: a named pipe opened
    for reading waits for a writer for ever."""
    out: list = []

    def call() -> None:
        try:
            out.append((fn(*args), None))
        except Exception as e:
            out.append((None, e))

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{fn.__name__} blocked (it opened a named pipe?)"
    if out[0][1] is not None:
        raise out[0][1]
    return out[0][0]


def test_a_stage_that_wrote_no_file_in_its_folder_never_removes_one_found_there(tmp_path):
    """Round 18: ``work/pca/``'s ``_DONE.json`` lists no file (the stage writes none there), and
    an empty list skipped the check: a rerun with ``pca.dim`` changed deleted a user's file and
    folder there."""
    stage = StageDir(str(tmp_path), "pca", "old")
    Path(stage.dir).mkdir(parents=True)
    stage.write_marker({})
    (Path(stage.dir) / "notes.txt").write_text("mine")
    (Path(stage.dir) / "mine").mkdir()
    (Path(stage.dir) / "mine" / "x.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds 2 file\(s\) the pca stage did not write"):
        StageDir(str(tmp_path), "pca", "new").clear_if_stale()
    assert (Path(stage.dir) / "mine" / "x.txt").read_text() == "mine"


def test_a_named_pipe_among_leftovers_or_store_rows_is_foreign_not_a_hang(tmp_path):
    """Round 18: a named pipe named like a wave's sums (``x.npz``) or a store row file hung the
    rerun and ``swe store list``/``prune``: each opened it to read its first bytes."""
    wave = tmp_path / "sums" / "wave00001-abc"
    wave.mkdir(parents=True)
    os.mkfifo(wave / "x.npz")
    assert _returns_within(20, foreign_files, str(wave)) == ["x.npz"]
    store = tmp_path / "store"
    ns = open_namespace(str(store), descriptor("a" * 64, "torch", 512, 384))
    write_rows(ns, [(sentence_key("en", "a b"), "en", ["a", "b"], bytes(2 * 384 * 2),
                     bytes(384 * 4))], 0)
    fifo = Path(ns.url) / "b0" / f"{1:020d}-0123456789ab.parquet"
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    [entry] = _returns_within(20, list_store, str(store))
    assert entry["foreign"] == [f"b0/{1:020d}-0123456789ab.parquet"] and entry["sentences"] == 1
    os.mkfifo(tmp_path / "marker")  # any file swe reads whole (a store's marker, a descriptor)
    with pytest.raises(OSError, match="is not a regular file"):
        _returns_within(20, storage.read_bytes, str(tmp_path / "marker"))
    os.mkfifo(tmp_path / "_LEASE.json")  # a lease file that is a pipe: not a swe lease
    assert _returns_within(20, Lease(str(tmp_path)).holder) == {"foreign": "not a regular file"}


def test_an_ensemble_of_more_members_than_load_takes_is_refused_when_made(tmp_path):
    """Round 18: ``EnsembleModel([m] * 65).save(p)`` wrote a folder that ``load`` and ``swe
    reseal`` then refused ("members = 65 should be 1 to 64")."""
    import numpy as np

    from swe.ensemble import MAX_MEMBERS, EnsembleModel
    from swe.model import StaticModel

    model = StaticModel.from_vectors(["a", "b"], np.eye(2, dtype=np.float32))
    with pytest.raises(ValueError, match="an ensemble takes at most 64 models, got 65"):
        EnsembleModel([model] * (MAX_MEMBERS + 1))
    EnsembleModel([model] * MAX_MEMBERS).save(str(tmp_path / "e"))
    assert len(EnsembleModel.load(str(tmp_path / "e")).models) == MAX_MEMBERS


@pytest.mark.parametrize("address, hint", [("garbage::://", ""),
                                           ("http://127.0.0.1:8265", "a dashboard's")])
def test_a_ray_address_with_a_scheme_ray_does_not_join_is_named(address, hint):
    """Round 18: ``RAY_ADDRESS=garbage::://`` gave Ray's "Module: garbage:: does not exist"."""
    from swe.raysetup import check_reachable

    with pytest.raises(ConnectionError, match=rf"RAY_ADDRESS={re.escape(address)} is not "
                                              rf"HOST:PORT or ray://HOST:PORT.*{hint}"):
        check_reachable(address)


def test_a_killed_exports_files_on_s3_are_judged_by_their_recorded_checksums(s3, caplog):
    """Round 18: on ``s3://``, the rerun of a killed export read its files through a local path
    ("no such file: bucket/…/README.md"). A file under a declared name is the killed run's only
    when its bytes are those the run recorded in its lease; anything else refuses the rerun."""
    import hashlib
    import json

    from swe.new_folder import lease_new_folder

    def killed(name: str, readme: bytes) -> str:
        out = f"{s3}/r18/{name}"
        record = {"host": "elsewhere", "pid": 1, "heartbeat": 0, "token": "t",
                  "purpose": "export to model2vec", "writes": [r"README\.md"],
                  "files": {"README.md": [hashlib.sha256(b"# card\n").hexdigest(), 7]}}
        storage.write_bytes(f"{out}/_LEASE.json", json.dumps(record).encode())
        storage.write_bytes(f"{out}/README.md", readme)
        return out

    out = killed("user", b"my own notes")
    with pytest.raises(FileExistsError), lease_new_folder(out, "export", FileExistsError,
                                                          writes=[r"README\.md"]):
        pass
    assert storage.read_bytes(f"{out}/README.md") == b"my own notes"
    out = killed("own", b"# card\n")
    with lease_new_folder(out, "export", FileExistsError, writes=[r"README\.md"]):
        assert storage.child_names(out) == ["_LEASE.json"]


def test_the_command_starts_before_numpy_so_an_early_ctrl_c_is_one_line():
    """Round 18: a Ctrl-C in the first 0.3 s of any ``swe`` command was a traceback from
    ``from swe.cli import main``, which imported numpy and the model through ``swe``'s
    ``__init__``. Those are imported on first use now: ``swe.cli`` loads in milliseconds, and
    ``main`` turns a Ctrl-C into one line. ``swe.StaticModel`` still works as before."""
    import subprocess
    import sys

    code = ("import sys, swe.cli\n"
            "assert 'numpy' not in sys.modules, 'swe.cli imports numpy'\n"
            "import swe\n"
            "from swe import EnsembleModel, StaticClassifier\n"
            "assert swe.StaticModel.__module__ == 'swe.model' and EnsembleModel and "
            "StaticClassifier\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        import swe

        swe.Nope  # noqa: B018


@pytest.mark.usefixtures("ray_session")
def test_named_pipes_in_an_old_encode_run_or_a_killed_exports_folder_never_block(tmp_path,
                                                                                  caplog):
    """Round 18: a named pipe named like a part (``9-9.parquet``) or a receipt in an earlier
    encode run's folder hung the rerun after it published; one named ``tokenizer.json`` in a
    killed export's folder hung the export's rerun. Each is foreign now, never opened."""
    import json

    from hostile import first_encode

    from swe.cli import main
    from swe.new_folder import lease_new_folder

    args, out = first_encode(tmp_path)
    [old] = [p for p in out.iterdir() if p.name.startswith("v-")]
    os.mkfifo(old / "9-9.parquet")
    (old / "_receipts").mkdir(exist_ok=True)
    os.mkfifo(old / "_receipts" / "9-9.json")
    assert _returns_within(120, main, [*args, "--dim", "2"]) == 0
    assert "9-9.parquet" in caplog.text and (old / "9-9.parquet").exists()

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "_LEASE.json").write_text(json.dumps(
        {"host": "elsewhere", "pid": 1, "heartbeat": 0, "token": "t", "purpose": "export",
         "writes": [r"tokenizer\.json"], "files": {"tokenizer.json": ["0" * 64, 2]}}))
    os.mkfifo(folder / "tokenizer.json")

    def rerun() -> None:
        with lease_new_folder(str(folder), "export", FileExistsError,
                              writes=[r"tokenizer\.json"]):
            pass

    with pytest.raises(FileExistsError):
        _returns_within(20, rerun)
    assert (folder / "tokenizer.json").exists()
