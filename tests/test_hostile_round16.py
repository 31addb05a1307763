"""Hostile round 16's cases (one test each, beside round 15's file)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile import tiny_model

from swe.build import build, load_config
from swe.build.config import ConfigError
from swe.build.teacher.store import (
    StoreError,
    descriptor,
    list_store,
    open_namespace,
    sentence_key,
    write_rows,
)
from swe.cli import main
from swe.ensemble import EnsembleModel
from swe.model import StaticModel

ROOT = Path(__file__).resolve().parents[1]


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


def test_a_socket_is_named_as_a_socket(tmp_path, capsys):
    """Round 16: ``swe info``/``swe export`` on a Unix socket said "is a file"."""
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        assert main(["info", str(tmp_path / "s")]) == 2
        assert "s is a socket, not a model folder" in capsys.readouterr().err
        assert main(["store", "list", str(tmp_path / "s")]) == 2
        assert "s is a socket, not a teacher store's folder" in capsys.readouterr().err
    finally:
        sock.close()


def test_a_tilde_path_of_no_user_offers_no_example_that_repeats_it(tmp_path, capsys):
    """Round 16: ``--output '~x/y'`` was refused with "write the full path, e.g. ~x/y"."""
    args = ["encode", "--model", str(tiny_model(tmp_path / "m")), "--input", "x.txt"]
    assert main([*args, "--output", "~no-such-user-swe/y"]) == 2
    err = capsys.readouterr().err
    assert "write the full path (or ./~no-such-user-swe/y)" in err and "e.g." not in err
    assert main([*args, "--output", "~/y"]) == 2
    assert f"e.g. {os.path.expanduser('~/y')}" in capsys.readouterr().err


def test_ctrl_c_in_export_and_reseal_is_one_line_and_changes_nothing(tmp_path, monkeypatch,
                                                                      capsys):
    """Round 16: a Ctrl-C during ``swe export`` printed a traceback; a Ctrl-C during a reseal
    could leave some configs resealed and others not."""
    model = tiny_model(tmp_path / "m")
    before = (model / "config.json").read_bytes()
    with monkeypatch.context() as m:
        m.setattr("swe.export.export_card", _interrupt)
        assert main(["export", str(model), "--to", "model2vec", str(tmp_path / "x")]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: interrupted; nothing was changed; rerun the same command to resume"]
    assert not (tmp_path / "x").exists()
    real = __import__("swe.modelfiles", fromlist=["reseal"]).reseal
    with monkeypatch.context() as m:
        m.setattr("swe.modelfiles.reseal", lambda *a, **k: (real(*a, **k), _interrupt())[0])
        assert main(["reseal", str(model)]) == 130
    assert (model / "config.json").read_bytes() == before
    capsys.readouterr()


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_an_ensemble_weight_read_back_as_none_is_named(tmp_path, capsys):
    """Round 16: a NaN weight (``NaN`` in JSON, read back as ``None``) gave "float() argument
    must be a string or a real number, not 'NoneType'"."""
    model = StaticModel.load(str(tiny_model(tmp_path / "m")))
    with pytest.raises(ValueError, match=r"weights must be positive and finite numbers, got "
                                         r"\[None, 1.0\]"):
        EnsembleModel([model, model], [None, 1.0])


@pytest.mark.usefixtures("ray_session")
def test_binary_data_with_a_carriage_return_is_named_binary_not_old_mac_text(tmp_path, capsys):
    """Round 16: a PNG given as text (first line ``\\x89PNG\\r``, too short to judge) was
    blamed on old Mac line endings, with a ``tr`` command to convert the image."""
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    (tmp_path / "image.txt").write_bytes(png)
    args = ["encode", "--model", str(tiny_model(tmp_path / "m")), "--input",
            str(tmp_path / "image.txt"), "--output", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "is not UTF-8 text: its first 4 KiB are" in err and "old Mac" not in err
    (tmp_path / "mac.txt").write_bytes(b"the cat\rsat dog\r" * 40)  # real CR-only text
    assert main([*args[:4], str(tmp_path / "mac.txt"), "--output", str(tmp_path / "o")]) == 2
    assert "old Mac (CR-only) line endings" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["refine.lr=1e308", "refine.tau=1e-320", "refine.clip=1e308"])
def test_a_value_float32_cannot_hold_is_refused_before_any_work(tmp_path, key):
    """Round 16: ``refine.lr=1e308`` passed validation and the refine stage died minutes later
    with a traceback ("value cannot be converted to type float without overflow")."""
    with pytest.raises(ConfigError, match=r"should be 0 or between 1.18e-38 and 3.4e\+38"):
        load_config(str(ROOT / "pipelines/configs/quickstart.toml"),
                    ["refine.objective='distill'", key], output=str(tmp_path / "o"))


def test_a_finetune_learning_rate_beyond_any_use_is_refused(tmp_path, capsys):
    """Round 16: ``swe finetune --table-lr 1e308`` died in training with a traceback."""
    model = tiny_model(tmp_path / "m")
    (tmp_path / "d.jsonl").write_text('{"text": "the cat", "label": "a"}\n' * 4)
    assert main(["finetune", "--model", str(model), "--data", str(tmp_path / "d.jsonl"),
                 "--output", str(tmp_path / "o"), "--table-lr", "1e308"]) == 2
    assert "--table-lr must be a finite number >= 0 (0: the table stays frozen) and at most " \
           "1000, got 1e+308" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_store_that_is_no_folder_is_named_and_a_refused_build_leaves_no_output(tmp_path):
    """Round 16: ``extraction.store`` naming a device, a pipe or a file was "not empty: name an
    empty or new folder", and the refused build left its new output folder behind, empty."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("mine")
    for store, kind in [("/dev/null", "a device"), (tmp_path / "fifo", "a named pipe"),
                        (tmp_path / "file", "a file")]:
        cfg = load_config(str(ROOT / "pipelines/configs/quickstart.toml"),
                          [f"extraction.store='{store}'", "extraction.runtime='torch'"],
                          output=str(tmp_path / "out"))
        with pytest.raises(StoreError, match=f"{store} is {kind}, not a folder"):
            build(cfg, until="corpus")
        assert not (tmp_path / "out").exists()
    assert (tmp_path / "file").read_text() == "mine"


def test_a_build_that_saves_no_model_never_rewrites_an_earlier_models_card(tmp_path):
    """Round 16: a refine that failed rewrote the previous good model's ``README.md`` with the
    failed config (its hash, ``tau = 1e-320``); the weights were the old ones. A card is
    written again only for a model saved since it was written."""
    from swe.build.card import write_cards

    out = tmp_path / "out"
    tiny_model(out / "model")
    old = load_config(str(ROOT / "pipelines/configs/quickstart.toml"), [], output=str(out))
    new = load_config(str(ROOT / "pipelines/configs/quickstart.toml"), ["pca.dim=33"],
                      output=str(out))
    assert write_cards(str(out), old) == [str(out / "model" / "README.md")]
    card = (out / "model" / "README.md").read_text()
    assert write_cards(str(out), new) == []  # the model was not saved again: its card stays
    assert (out / "model" / "README.md").read_text() == card
    tiny_model(out / "model")  # saved again (by the new build): its card follows
    assert write_cards(str(out), new) == [str(out / "model" / "README.md")]
    assert (out / "model" / "README.md").read_text() != card
