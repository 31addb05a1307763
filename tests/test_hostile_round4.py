"""Hostile input, fourth round (issue 42's second hostile round, new cases of the same kinds):
what hung or ate the machine's memory (a device or a pipe as a word list), read compressed data
as text without a word, took a damaged store marker for a store, wrote an export inside its own
input, loaded a config whose dim differs from its matrix, scored undefined metrics as numbers,
or waited a minute for a RAY_ADDRESS that can never answer."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zstandard

from swe.build import ConfigError, load_config
from swe.build.teacher.store import StoreError, descriptor, list_store, open_namespace
from swe.cli import main
from swe.model import StaticModel

TEXT = b"".join(b"A man plays a guitar number %d.\n" % i for i in range(50))


def _model(path: Path) -> Path:
    StaticModel.from_vectors(["a", "man", "the"], np.eye(3, dtype=np.float32)).save(str(path))
    return path


def _returns(fn, seconds: float = 30):
    """``fn()``'s exception (or None), failing the test instead of hanging when it blocks."""
    box: list = []

    def run():
        try:
            fn()
            box.append(None)
        except Exception as e:  # what the test inspects
            box.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"still running after {seconds} s: it blocks (a pipe read, an endless file)"
    return box[0]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_pipe_or_device_as_a_word_list_or_optional_corpus_is_refused_at_validation(tmp_path,
                                                                                     kind):
    """``vocab.word_lists = /dev/zero`` read one endless line until the kernel killed the build
    at 22.8 GB; a pipe blocked for ever. ``paths_if_present`` got past validation the same way."""
    corpus = tmp_path / "en.txt"
    corpus.write_bytes(TEXT)
    if kind == "fifo":
        bad = tmp_path / "list.tsv"
        os.mkfifo(bad)
    else:
        bad = Path("/dev/zero")
    for sets in ([f"vocab.word_lists='{bad}'"], [f"corpus.en.paths_if_present=['{bad}']"]):
        error = _returns(lambda sets=sets: load_config(
            "quickstart", [f"corpus.en.paths=['{corpus}']", *sets], output=str(tmp_path / "o")))
        assert isinstance(error, ConfigError), error
        assert "named pipe" in str(error) or "not a regular file" in str(error), error


@pytest.mark.parametrize("fmt", ["gz", "xz", "bz2", "zst"])
def test_compressed_data_named_as_plain_text_is_refused_by_name(tmp_path, fmt, ray_session):
    """gzip bytes named ``.txt`` were one row of invalid UTF-8 in `swe encode` (exit 0) and two
    contradictory warnings in a build; now both say what the file holds and how to name it."""
    from swe.bulk import encode_files

    pack = {"gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress,
            "zst": zstandard.ZstdCompressor().compress}[fmt]
    path = tmp_path / "packed.txt"
    path.write_bytes(pack(TEXT))
    want = f"holds {dict(gz='gzip', zst='zstd').get(fmt, fmt)}-compressed data"
    with pytest.raises(ConfigError, match=want) as e:
        load_config("quickstart", [f"corpus.en.paths=['{path}']"], output=str(tmp_path / "o"))
    assert f"rename it to end in .{fmt}" in str(e.value)
    with pytest.raises(ValueError, match=want):
        encode_files(str(_model(tmp_path / "m")), [str(path)], str(tmp_path / "enc"))
    assert not (tmp_path / "enc").exists(), "a refused input left an (empty) output folder"
    path.rename(path.with_name(f"packed.txt.{fmt}"))  # named for what it is: read
    load_config("quickstart", [f"corpus.en.paths=['{path.with_name(f'packed.txt.{fmt}')}']"],
                output=str(tmp_path / "o"))


def test_cr_only_line_endings_are_refused_by_the_encoder(tmp_path, ray_session):
    """The build reads a CR-only file as its lines; the encoder took all of it as one row."""
    from swe.bulk import encode_files

    path = tmp_path / "mac.txt"
    path.write_bytes(TEXT.replace(b"\n", b"\r"))
    with pytest.raises(ValueError, match=r"mac.txt line 1: a carriage return .*CR-only"):
        encode_files(str(_model(tmp_path / "m")), [str(path)], str(tmp_path / "enc"))
    crlf = tmp_path / "dos.txt"  # CRLF (Windows) stays one row per line
    crlf.write_bytes(TEXT.replace(b"\n", b"\r\n"))
    encode_files(str(_model(tmp_path / "m2")), [str(crlf)], str(tmp_path / "enc2"))


def test_an_input_named_twice_is_warned_about_once_naming_both_spellings(tmp_path, caplog):
    from swe.inputs import expand_inputs

    a = tmp_path / "a.txt"
    a.write_bytes(TEXT)
    link = tmp_path / "link.txt"
    link.symlink_to(a)
    for _ in range(3):  # validation, the corpus stage, the card: one warning in all
        assert expand_inputs([str(a), str(link)]) == [str(a)]
    warned = [r.getMessage() for r in caplog.records if "named twice" in r.getMessage()]
    assert warned == [f"{link} is named twice among the inputs (also as {a}); it is read once"]


def test_a_folder_input_skips_what_lies_under_underscore_and_dot_folders(tmp_path):
    """An earlier encode's output folder as input read its ``_receipts/*.json`` as data."""
    from swe.inputs import expand_inputs

    for name in ("a.txt", "sub/b.txt", "_receipts/0-0.json", ".cache/x.txt", "_SUCCESS"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(TEXT)
    assert expand_inputs([str(tmp_path)]) == [str(tmp_path / "a.txt"), str(tmp_path / "sub/b.txt")]


@pytest.mark.parametrize("damage", ["garbage", "directory", "empty path", "ns as a file",
                                    "namespace file a folder"])
def test_a_store_that_is_not_one_is_refused_not_listed_or_pruned(tmp_path, damage, capsys,
                                                                 monkeypatch):
    store = tmp_path / "store"
    open_namespace(str(store), descriptor("c" * 64, "onnx", 512, 384))
    namespaces = sorted(p.name for p in store.iterdir())
    arg, needle = str(store), "is not a teacher store's marker"
    if damage == "garbage":
        (store / "_SWE_STORE.json").write_text("garbage")
        needle = "cannot be read as a store's marker"
    elif damage == "directory":
        (store / "_SWE_STORE.json").unlink()
        (store / "_SWE_STORE.json").mkdir()
        needle = "cannot be read as a store's marker"
    elif damage == "empty path":  # '' is not the working folder, even when that is a store
        monkeypatch.chdir(store)
        arg, needle = "", "is not a path"
    elif damage == "ns as a file":
        (store / "ns-zzzz").write_text("x")
        needle = "is not a complete namespace"
    else:
        meta = next(store.glob("ns-*/_NAMESPACE.json"))
        meta.unlink()
        meta.mkdir()
        needle = "is a folder, not a namespace's descriptor"
    for args in (["list", arg], ["prune", arg, "--teacher", "cc", "--dry-run"],
                 ["prune", arg, "--teacher", "cc"]):
        assert main(["store", *args]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    assert set(namespaces) <= {p.name for p in store.iterdir()}  # nothing removed
    if damage == "garbage":
        with pytest.raises(StoreError):
            list_store(str(store))


def test_export_refuses_an_output_inside_its_input_or_with_a_line_break(tmp_path, capsys):
    model = _model(tmp_path / "m")
    before = sorted(p.name for p in model.iterdir())
    for out, needle in ((model / "sub", "overlaps the input model"),
                        (tmp_path / "a\nb", "holds a line break")):
        assert main(["export", str(model), "--to", "model2vec", str(out)]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    assert sorted(p.name for p in model.iterdir()) == before
    assert not (tmp_path / "a\nb").exists()


@pytest.mark.parametrize("key,value", [("dim", 2), ("vocab_size", 7)])
def test_a_config_whose_dim_or_vocab_size_differs_from_the_files_does_not_load(tmp_path, key,
                                                                               value, capsys):
    """`swe reseal` sealed an edited ``dim``; ``swe info`` refused it but ``StaticModel.load``,
    `swe encode`, `swe export` and `swe quantize` used it. Now reseal refuses it, naming the
    mismatch, and leaves config.json as it was (round 7), so the model still does not load."""
    from swe.modelfiles import ModelFileError

    model = _model(tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, key: value}))
    edited = (model / "config.json").read_bytes()
    assert main(["reseal", str(model)]) == 2
    err = capsys.readouterr().err
    assert f"{key} = {value} but the model holds" in err and err.count("\n") == 1, err
    assert (model / "config.json").read_bytes() == edited
    with pytest.raises(ModelFileError, match=r"config\.json was changed after the save"):
        StaticModel.load(str(model))


def test_ray_shares_below_its_unit_and_a_blank_name_are_refused_before_any_work(tmp_path):
    corpus = tmp_path / "en.txt"
    corpus.write_bytes(TEXT)
    base = [f"corpus.en.paths=['{corpus}']"]
    for item, needle in (("extraction.cpus_per_actor=1e-300", "0 or >= 0.0001"),
                         ("refine.gpus_per_worker=0.00001", "0 or >= 0.0001"),
                         ("name=' '", "should not be empty")):
        with pytest.raises(ConfigError, match=needle):
            load_config("quickstart", [*base, item], output=str(tmp_path / "o"))
    load_config("quickstart", [*base, "extraction.cpus_per_actor=0.0001"],
                output=str(tmp_path / "o"))
    from swe.bulk import encode_files

    with pytest.raises(ValueError, match=r"--cpus-per-actor must be a number of at least 0\.0001"):
        encode_files(str(_model(tmp_path / "m")), [str(corpus)], str(tmp_path / "enc"),
                     cpus_per_actor=1e-300)


def test_a_config_path_with_a_line_break_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="--config 'quick\\\\nstart' holds a line break"):
        load_config("quick\nstart", output=str(tmp_path / "o"))


def test_a_ray_address_that_can_never_answer_is_refused_at_once():
    from swe.raysetup import check_reachable

    for address, needle in (("127.0.0.1:99999", "a port of 1-65535"),
                            ("no-such-host.invalid:6379", "cannot be resolved")):
        t = time.monotonic()
        with pytest.raises(ConnectionError, match=needle):
            check_reachable(address)
        assert time.monotonic() - t < 20, "it retried an address that cannot ever answer"


def test_a_bracketed_ipv6_ray_address_is_reached():
    try:
        server = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    from swe.raysetup import check_reachable

    def answer_like_a_ray_head():  # an HTTP/2 SETTINGS frame, as a GCS sends (round 5)
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")

    with server:
        threading.Thread(target=answer_like_a_ray_head, daemon=True).start()
        check_reachable(f"[::1]:{server.getsockname()[1]}", timeout=5)


def test_undefined_metrics_say_so_instead_of_a_number():
    from swe.eval.metrics import macro_f1, spearman
    from swe.eval.mining import best_threshold, f1_at, margin_candidates

    with pytest.raises(ValueError, match="the second sequence is constant"):
        spearman([1, 2, 3], [5, 5, 5])
    with pytest.raises(ValueError, match="1-D"):
        spearman(np.ones((3, 2)), [1, 2, 3])
    for gold, pred in (([1, 2], [1]), ([], [])):
        with pytest.raises(ValueError, match="as many predictions as gold labels"):
            macro_f1(gold, pred)
    # Sentences with no vector (every word unknown): their margins are -inf, never NaN, and the
    # threshold chosen is one that the F1 at that threshold reproduces.
    x = np.vstack([np.zeros((2, 4)), np.eye(4)[:2]]).astype(np.float32)
    y = np.vstack([np.zeros((2, 4)), np.eye(4)[:2]]).astype(np.float32)
    cands = margin_candidates(x, y, k=2)
    assert not any(np.isnan(s) for _, _, s in cands)
    gold = {(2, 2), (3, 3)}
    threshold, f1 = best_threshold(cands, gold)
    assert np.isfinite(threshold) and f1_at(cands, gold, threshold)["f1"] == pytest.approx(f1)


def test_a_corpus_in_latin1_is_named_as_such_not_called_empty(tmp_path, ray_session, caplog):
    """A Latin-1 corpus drew two warnings that contradict each other: "no non-blank lines
    (empty file?)" and "20 line(s) not valid UTF-8, skipped"."""
    from swe.build import build

    path = tmp_path / "latin1.txt"
    path.write_bytes("Café crème à la française.\n".encode("latin-1") * 20)
    cfg = load_config("quickstart", [f"corpus.en.paths=['{path}']"], output=str(tmp_path / "o"))
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="UTF-8 text"):
        build(cfg, until="corpus")
    warned = {r.getMessage() for r in caplog.records if "latin1.txt" in r.getMessage()}
    assert len(warned) == 1, warned
    assert "none of its lines is UTF-8 text (20 skipped)" in warned.pop()


def test_a_byte_order_mark_is_read_past_in_jsonl(tmp_path, ray_session):
    """JSONL that begins with a UTF-8 BOM (what Notepad writes) was refused as "not valid
    JSON"."""
    import pyarrow.parquet as pq

    from swe.bulk import encode_files
    from swe.bulk.options import EncodeOptions

    (tmp_path / "bom.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "a man"}\n{"text": "the man"}\n')
    out = tmp_path / "enc"
    encode_files(str(_model(tmp_path / "m")), [str(tmp_path / "bom.jsonl")], str(out),
                 options=EncodeOptions(keep_columns=("text",)))
    rows = pq.read_table(next(out.glob("v-*")), columns=["text"]).column("text").to_pylist()
    assert rows == ["a man", "the man"], rows
