"""Hostile round 17's cases (one test each; the build's reruns: tests/test_refine.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile import tiny_model
from safetensors.numpy import save_file

from swe.build.teacher.store import descriptor, list_store, open_namespace, sentence_key, write_rows
from swe.cli import main
from swe.leftovers import foreign_files, remove_leftovers
from swe.model import StaticModel
from swe.new_folder import lease_new_folder


def _a_killed_runs_files(run: Path) -> None:
    """What a Ray Train run and a killed extraction write, made as they make them."""
    ckpt = run / "checkpoint_2026-11-28_13-58-10.334365"
    ckpt.mkdir(parents=True)
    (run / ".validate_storage_marker").touch()
    (run / "checkpoint_manager_snapshot.json").write_text(json.dumps(
        {"ray_version": "2.60.0", "checkpoint_results": []}))
    save_file({"w": np.zeros((2, 2), np.float32)}, str(ckpt / "state.safetensors"))
    with open(ckpt / "state.json", "w") as f:
        json.dump({"step": 5, "epoch": 1}, f)
    np.savez(run / "b00000000000000000001.npz", x=np.ones(3))
    pq.write_table(pa.table({"x": [1]}), run / "part-0.parquet")
    (run / "cut.parquet.tmp-12-0123abcd").write_bytes(b"PAR1\x15")  # cut short by a kill
    (run / "empty.npz").touch()  # cut at its start


def test_leftovers_are_judged_by_name_and_content(tmp_path):
    """Round 17: reruns removed a killed refine run's folder, a folder named ``refine-*``,
    extraction's ``sums/`` entries, train_data's splits and a finetune's ``work/`` by name
    alone. Each file must be of a kind swe writes there, with that kind's first bytes."""
    run = tmp_path / "refine-0123"
    _a_killed_runs_files(run)
    assert foreign_files(str(run)) == []
    users = {"mine.txt": b"mine", "notes.npz": b"my notes", "x.parquet": b"not parquet",
             "checkpoint_2026-11-28_13-58-10.334365/state.json": b"my thesis draft",
             "checkpoint_manager_snapshot.json": None, "w.safetensors": b"12345678my data",
             ".validate_storage_marker": b"x", "_shards.json": b'{"note": "mine"}'}
    for name, data in users.items():
        if data is not None:
            (run / name).write_bytes(data)
    (run / "checkpoint_manager_snapshot.json").write_text('{"mine": 1}')
    os.symlink(tmp_path, run / "link")
    assert foreign_files(str(run)) == sorted([*users, "link"])
    with pytest.raises(FileExistsError, match=r"refine-0123 holds 9 file\(s\) swe did not write"):
        remove_leftovers(str(run), "it is an earlier run's")
    assert (run / "mine.txt").read_bytes() == b"mine" and (run / "part-0.parquet").exists()
    (tmp_path / "file.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds 1 file\(s\) swe did not write \(file.txt\)"):
        remove_leftovers(str(tmp_path / "file.txt"), "it is stale")
    clean = tmp_path / "clean"
    _a_killed_runs_files(clean)
    remove_leftovers(str(clean), "it is stale")
    assert not clean.exists()


def test_prune_judges_temporaries_and_uses_by_content(tmp_path, capsys):
    """Round 17: prune removed a user's file named like a row file's temporary, like the
    descriptor's temporary, or like a use (``_IN_USE/<32 hex>.json``) by name alone."""
    store = tmp_path / "store"
    ns = open_namespace(str(store), descriptor("a" * 64, "torch", 512, 384))
    folder = Path(ns.url)
    write_rows(ns, [(sentence_key("en", "a b"), "en", ["a", "b"], bytes(2 * 384 * 2),
                     bytes(384 * 4))], 0)
    (folder / "_IN_USE").mkdir(exist_ok=True)
    users = {f"b3/{0:020d}-0123456789ab.parquet.tmp-1-deadbeef": "user data",
             "_NAMESPACE.json.tmp-1-deadbeef": "my notes",
             f"_IN_USE/{'0' * 32}.json": '{"note": "mine"}'}
    for name, text in users.items():
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text(text)
    [entry] = list_store(str(store))
    assert sorted(entry["foreign"]) == sorted(users)
    assert main(["store", "prune", str(store), "--runtime", "torch"]) == 2
    assert "holds files that are not the store's" in capsys.readouterr().err
    for name, text in users.items():
        assert (folder / name).read_text() == text


def test_finetune_judges_a_killed_runs_checkpoint_by_content(tmp_path, capsys):
    """Round 17: a user's ``state.json`` at a killed run's path in ``--output``'s ``work/`` was
    accepted as the run's and deleted with it."""
    model = tiny_model(tmp_path / "m")
    (tmp_path / "d.jsonl").write_text('{"text": "the cat", "label": "a"}\n' * 4)
    ckpt = tmp_path / "o/work/runs/finetune-0123456789ab/checkpoint_2024-01-01_00-00-00"
    ckpt.mkdir(parents=True)
    (ckpt / "state.json").write_text("my thesis draft")
    assert main(["finetune", "--model", str(model), "--data", str(tmp_path / "d.jsonl"),
                 "--output", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert "is not what a run writes" in err and "state.json" in err
    assert (ckpt / "state.json").read_text() == "my thesis draft"


def test_a_failed_new_folder_keeps_a_file_someone_else_put_there(tmp_path, caplog):
    """Round 17: an interrupted ``swe export`` removed every entry of its output besides the
    lease, a file another user wrote there meanwhile included. Only the declared files go."""
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(KeyboardInterrupt), lease_new_folder(
            str(out), "export", FileExistsError, writes=["model\\.safetensors", "sub/.*"]):
        (out / "model.safetensors").write_bytes(b"partial")
        (out / "sub").mkdir()
        (out / "sub" / "a.bin").write_bytes(b"x")
        (out / "mine.txt").write_text("mine")
        raise KeyboardInterrupt
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    assert "kept mine.txt" in caplog.text


@pytest.mark.usefixtures("ray_session")
def test_a_json_text_with_a_lone_surrogate_is_encoded_as_the_library_does(tmp_path):
    """Round 17: ``"\\ud800"`` in a JSONL text (valid JSON) stopped ``swe encode`` with
    "function takes exactly 5 arguments (1 given)"; the library makes it U+FFFD."""
    model = tiny_model(tmp_path / "m")
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "the cat"}\n'
                                       '{"id": "b", "text": "the \\ud800 cat"}\n')
    assert main(["encode", "--model", str(model), "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(tmp_path / "e"), "--id-column", "id"]) == 0
    table = pq.read_table(tmp_path / "e").sort_by("id")
    want = StaticModel.load(str(model)).encode(["the cat", "the \ud800 cat"])
    np.testing.assert_allclose(np.stack(table["embedding"].to_numpy(zero_copy_only=False)),
                               want, atol=1e-6)


def test_ensemble_weights_far_apart_or_tiny_give_unit_vectors(tmp_path):
    """Round 17: weights finite in float64 but not after squaring or in float32 (``[1e39, 1]``,
    ``[1e160, 1]``, ``[1e-200, 1e-200]``) gave inf or NaN vectors, saved and reported as fine."""
    from swe.ensemble import EnsembleModel

    model = StaticModel.load(str(tiny_model(tmp_path / "m")))
    for weights in ([1e39, 1.0], [1e160, 1.0], [1e-200, 1e-200]):
        ensemble = EnsembleModel([model, model], weights)
        ensemble.save(str(tmp_path / "e"))
        for m in (ensemble, EnsembleModel.load(str(tmp_path / "e"))):
            np.testing.assert_allclose(np.linalg.norm(m.encode(["the cat", "dog"]), axis=1), 1,
                                       rtol=1e-6)


def test_an_ensemble_given_where_one_model_is_taken_is_named_and_a_file_task_needs_no_data(
        tmp_path, capsys, monkeypatch):
    """Round 17: an ensemble folder given to ``swe encode``/``export``/``quantize`` was "a saved
    model, not a model"; ``swe evaluate --tasks sts:PATH`` asked for the shared data folder."""
    from swe.ensemble import EnsembleModel

    model = StaticModel.load(str(tiny_model(tmp_path / "m")))
    EnsembleModel([model, model], [1.0, 2.0]).save(str(tmp_path / "ens"))
    (tmp_path / "in.txt").write_text("the cat\n")
    for args in (["encode", "--model", str(tmp_path / "ens"), "--input", str(tmp_path / "in.txt"),
                  "--output", str(tmp_path / "out")],
                 ["export", str(tmp_path / "ens"), "--to", "model2vec", str(tmp_path / "out")],
                 ["quantize", str(tmp_path / "ens"), "--clusters", "2", "--output",
                  str(tmp_path / "out")]):
        assert main(args) == 2
        assert "is an ensemble (ensemble.json), not one model" in capsys.readouterr().err
        assert not (tmp_path / "out").exists()
    monkeypatch.setenv("SWE_DATA", str(tmp_path / "no-such-data"))
    (tmp_path / "sts.tsv").write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"the cat\t{b}\t{i}\n" for i, b in enumerate(["the cat", "cat sat", "sat dog", "dog"])))
    assert main(["evaluate", "--model", str(tmp_path / "m"), "--tasks",
                 f"sts:{tmp_path / 'sts.tsv'}"]) == 0
