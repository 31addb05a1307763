"""Hostile round 13's cases: a user file named like a cut-short manifest write, a killed export's
half-written folder, and the minor ones (one test each, beside round 10's file)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from hostile import tiny_model

from swe.cli import main
from swe.model import StaticModel


@pytest.mark.usefixtures("ray_session")
def test_encode_never_deletes_a_user_file_named_like_a_manifest_temporary(tmp_path, capsys):
    """Round 13: any ``_manifest.json.tmp-*`` counted as a cut-short manifest write, so a
    folder holding only a user's was taken as an encode output and the file deleted; a rerun
    deleted one kept beside an encode output too."""
    model = tiny_model(tmp_path / "m")
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


_KILL_AFTER = """
import os, sys
from swe import export, storage
k, to, model, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
written, write = [0], storage.write_bytes
def killing(url, data, *args, **kwargs):
    written[0] += 1
    if written[0] > k:
        os._exit(9)  # as SIGKILL: no clean-up runs
    return write(url, data, *args, **kwargs)
storage.write_bytes = killing
export.export(model, to, out, report=None, measure=False, table_lines=0)
"""


@pytest.mark.parametrize("to", ["model2vec", "sentence-transformers"])
def test_a_killed_exports_folder_never_loads_and_its_rerun_starts_clean(tmp_path, to):
    """Round 13: an export killed between two file writes left a folder that model2vec and
    sentence-transformers loaded (unnormalised, without the card), and the rerun was refused
    as not empty. The entry files are written last, and the rerun clears what the killed run
    declared in its lease, nothing else."""
    import subprocess
    import sys

    from model2vec import StaticModel as Model2Vec
    from sentence_transformers import SentenceTransformer

    from swe.export import export

    def encoded(folder: Path, library: str) -> np.ndarray:
        if library == "model2vec":
            return Model2Vec.from_pretrained(str(folder)).encode(["the cat"])[0]
        return SentenceTransformer(str(folder), device="cpu").encode(["the cat"])[0]

    model = tiny_model(tmp_path / "m")
    want = StaticModel.load(str(model)).encode(["the cat"])[0]
    for k in range(1, 6):  # each target writes 6 files
        out = tmp_path / f"cut{k}"
        done = subprocess.run([sys.executable, "-c", _KILL_AFTER, str(k), to, str(model),
                               str(out)], capture_output=True, text=True)
        assert done.returncode == 9, done.stderr
        assert (out / "_LEASE.json").is_file()  # the killed run's, naming what it writes
        for library in ("model2vec", "sentence-transformers"):
            try:
                got = encoded(out, library)
            except Exception:
                continue
            # loaded: only when the folder is whole for that library (card and normaliser in)
            assert (out / "README.md").is_file() and np.allclose(got, want, atol=1e-6)
    (tmp_path / "cut1" / "notes.txt").write_text("kept")
    with pytest.raises(ValueError, match="not an empty directory"):
        export(str(model), to, tmp_path / "cut1", report=None, measure=False, table_lines=0)
    assert (tmp_path / "cut1" / "notes.txt").read_text() == "kept"
    export(str(model), to, tmp_path / "cut5", report=None, measure=False, table_lines=0)
    assert not (tmp_path / "cut5" / "_LEASE.json").exists()
    assert np.allclose(encoded(tmp_path / "cut5", to), want, atol=1e-6)


def test_a_killed_new_folder_writers_leftovers_are_cleared_and_nothing_else(tmp_path, caplog):
    """What a killed ``swe quantize`` leaves (its lease, declaring the model files, and some
    of them, a temporary among them) is cleared by the rerun's ``lease_new_folder``; a stale
    lease declaring nothing (a build's), or a file it did not declare, refuses the rerun."""
    import json
    import logging
    import subprocess

    from swe.new_folder import holds_others_files, lease_new_folder

    dead = subprocess.Popen(["true"])
    dead.wait()

    def killed(folder: Path, writes: list[str] | None, files: list[str]) -> Path:
        """A killed quantize's folder: its lease records the vocabulary it copies (round 17:
        a declared file is removed only when its content is the run's)."""
        folder.mkdir()
        record = {"host": os.uname().nodename, "pid": dead.pid, "heartbeat": 1e12, "token": "t",
                  "purpose": "quantize", **({"writes": writes} if writes else {}),
                  "files": {"vocab.txt": [hashlib.sha256(b"the\n").hexdigest(), 4]}}
        (folder / "_LEASE.json").write_text(json.dumps(record))
        for name in files:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".npz"):
                np.savez(folder / name, clusters=np.zeros(2))
            else:  # the vocabulary; a cut temporary of the safetensors (its header's start)
                cut = b"\x10" + bytes(7) + b'{"'
                (folder / name).write_bytes(b"the\n" if name == "vocab.txt" else cut)
        return folder

    writes = [r"vocab\.txt", r"model\.safetensors", r"config\.json",
              r"_quantize_work/block-\d{12}\.npz"]
    left = ["vocab.txt", "model.safetensors.tmp-4242-0badc0de",
            "_quantize_work/block-000000000000.npz"]
    out = killed(tmp_path / "q", writes, left)
    assert not holds_others_files(str(out))
    with (caplog.at_level(logging.WARNING, logger="swe.lease"),
          lease_new_folder(str(out), "quantize", FileExistsError, writes=writes)):
        assert sorted(p.name for p in out.iterdir()) == ["_LEASE.json"]
    assert "the partial output of a killed run" in caplog.text
    assert not any(out.iterdir())
    for name, writes_, files in (("user", writes, [*left, "notes.txt"]),  # round 14: in a
                                 ("nested", writes, [*left, "_quantize_work/notes.txt"]),  # folder
                                 ("build", None, ["vocab.txt"]),
                                 ("named", writes, ["vocab.txt"])):  # round 17: its content
        out = killed(tmp_path / name, writes_, files)
        if name == "named":
            (out / "vocab.txt").write_text("my vocab list")
        assert holds_others_files(str(out))
        with (pytest.raises(FileExistsError),
              lease_new_folder(str(out), "quantize", FileExistsError, writes=writes)):
            pass
        assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()
                      and p.name != "_LEASE.json") == sorted(files)


def test_report_files_never_write_through_a_hard_link(tmp_path, capsys):
    """Round 13: ``--markdown``/``--json`` (evaluate) and ``--json`` (analyze) wrote into the
    named file, so a hard link into a saved model rewrote the model."""
    model = tiny_model(tmp_path / "m")
    keep = tiny_model(tmp_path / "keep")
    tsv = tmp_path / "sts.tsv"
    tsv.write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"the cat\t{b}\t{i}\n" for i, b in enumerate(["the cat", "cat sat", "sat dog", "dog"])))
    before = {p.name: p.read_bytes() for p in keep.iterdir()}
    links = {}
    for flag, name in (("--markdown", "model.safetensors"), ("--json", "vocab.txt")):
        links[flag] = tmp_path / f"report{flag}"
        os.link(keep / name, links[flag])
    assert main(["evaluate", "--model", str(model), "--tasks", f"sts:{tsv}",
                 "--markdown", str(links["--markdown"]), "--json", str(links["--json"])]) == 0
    os.link(keep / "config.json", tmp_path / "analysis.json")
    vectors = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    StaticModel.from_vectors([f"w{i}" for i in range(300)], vectors).save(str(tmp_path / "r"))
    assert main(["analyze", "--model", str(tmp_path / "r"), "--json",
                 str(tmp_path / "analysis.json")]) == 0
    capsys.readouterr()
    assert {p.name: p.read_bytes() for p in keep.iterdir()} == before
    assert StaticModel.load(str(keep)).words == ["the", "cat", "sat", "dog"]
    assert links["--markdown"].read_text().startswith("|")


@pytest.mark.usefixtures("ray_session")
def test_a_users_lease_named_file_is_never_taken_over(tmp_path, capsys):
    """Round 13: a user's ``_LEASE.json`` (any content) was taken over and removed by export
    and encode, with no --overwrite. It is refused in one line and kept."""
    from swe.export import export
    from swe.lease import LeaseHeldError

    model = tiny_model(tmp_path / "m")
    (tmp_path / "in.txt").write_text("the cat\n")
    for name in ("exp", "enc"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "_LEASE.json").write_text('{"my": "important settings"}')
    with pytest.raises(LeaseHeldError, match="is not a swe lease"):
        export(str(model), "model2vec", tmp_path / "exp", report=None, measure=False,
               table_lines=0)
    assert main(["encode", "--model", str(model), "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "enc")]) != 0
    assert "is not a swe lease" in capsys.readouterr().err
    for name in ("exp", "enc"):
        assert [p.name for p in (tmp_path / name).iterdir()] == ["_LEASE.json"]
        assert "important" in (tmp_path / name / "_LEASE.json").read_text()


def test_redoing_a_stage_never_deletes_a_file_it_did_not_write(tmp_path):
    """Round 13: a rebuild with a changed config removed ``work/<stage>/`` whole, a user's files
    in it included. A finished stage's folder is removed only when it holds nothing but the
    files its marker lists; otherwise the build stops, naming them."""
    from swe.build.markers import StageDir

    st = StageDir(str(tmp_path), "vocab", "hash1")
    storage_dir = Path(st.dir)
    (storage_dir / "_shards").mkdir(parents=True)
    (storage_dir / "words.parquet").write_bytes(b"x" * 10)
    (storage_dir / "_shards" / "0.json").write_text("{}")
    st.write_marker({"words": 1})
    (storage_dir / "mydir").mkdir()
    (storage_dir / "mydir" / "keep.txt").write_text("mine")
    changed = StageDir(str(tmp_path), "vocab", "hash2")
    with pytest.raises(FileExistsError, match=r"holds 1 file\(s\) the vocab stage did not write "
                                              r"\(mydir/keep.txt\).*its config changed"):
        changed.clear_if_stale()
    (storage_dir / "words.parquet").write_bytes(b"short")  # damaged since it finished
    with pytest.raises(FileExistsError, match=r"mydir/keep.txt.*changed"):
        st.done_stats()
    assert (storage_dir / "mydir" / "keep.txt").read_text() == "mine"
    (storage_dir / "mydir" / "keep.txt").unlink()
    changed.clear_if_stale()  # only the stage's own files: removed, as before
    assert not storage_dir.exists()


@pytest.mark.parametrize("char", ["\u200b", "\u200e", "\u200f", "\u202e", "\u2066", "\u061c",
                                  "\u180e", "\u2062",  # round 14: every other Cf, and the
                                  "\u206a", "\ufffa", "\U000e0041", "\U0001d173",  # Hangul
                                  "\u3164", "\uffa0",  # fillers; round 15: the rest
                                  "\u17b4", "\u17b5", "\u180f", "\u034f", "\u2065",  # of
                                  "\ufff0", "\U000e0000", "\U000e0080"])  # Default_Ignorable
def test_invisible_format_characters_inside_a_word_are_dropped_as_the_teacher_does(char):
    """Round 13: a zero-width space or a direction mark inside a word split it (ci|ty), where
    the teacher's normaliser drops it; joiners (U+200C, U+200D) still stay."""
    from swe.text import word_spans, words

    text = f"the ci{char}ty of"
    assert words(text) == ["the", "city", "of"]
    assert word_spans(text)[1] == ("city", 4, 9)
    model = StaticModel.from_vectors(["the", "city", "of", "ci", "ty"],
                                     np.eye(5, dtype=np.float32))
    assert np.allclose(model.encode([text]), model.encode(["the city of"]))
    assert words("a\u200db") == ["a", "b"]  # BlingFire's split at a joiner, as before


@pytest.mark.usefixtures("ray_session")
def test_a_ctrl_c_during_rays_shutdown_at_exit_is_ignored(tmp_path, monkeypatch, capsys):
    """Round 13: a Ctrl-C after ``swe encode`` printed its summary, while Ray shut down at exit,
    printed a traceback. Once a job command returns with Ray running, SIGINT (and, since round
    20, SIGTERM) is ignored by an exit handler that runs before Ray's (checked by hand: ``kill
    -INT`` to the process group after the summary, 2 of 2 tracebacks before, 0 of 2 after; in a
    subprocess: test_hostile_round20.py)."""
    import atexit
    import signal

    registered = []
    monkeypatch.setattr(atexit, "register", lambda *a: registered.append(a))
    (tmp_path / "in.txt").write_text("the cat\n")
    assert main(["encode", "--model", str(tiny_model(tmp_path / "m")), "--input",
                 str(tmp_path / "in.txt"), "--output", str(tmp_path / "out")]) == 0
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for fn, *args in registered:  # what exit would run, last registered first
            fn(*args)
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in before)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    capsys.readouterr()


def test_prune_never_deletes_a_file_that_is_not_the_stores(tmp_path, capsys):
    """Round 13: prune removed a user file kept in a namespace along with it, and the dry run
    did not count it. A namespace holding anything but its descriptor and row files stops the
    prune (the dry run too), named; nothing is removed."""
    from swe.build.teacher.store import (
        descriptor,
        list_store,
        open_namespace,
        sentence_key,
        write_rows,
    )

    store = tmp_path / "store"
    ns = open_namespace(str(store), descriptor("a" * 64, "torch", 512, 384))
    folder = Path(ns.url)
    write_rows(ns, [(sentence_key("en", "a b"), "en", ["a", "b"], bytes(2 * 384 * 2),
                     bytes(384 * 4))], 0)
    (row,) = folder.glob("b*/*.parquet")
    (row.parent / f"{row.name}.tmp-42-0badc0de").write_bytes(b"PA")  # a cut-short write
    (folder / "userfile.txt").write_text("mine")
    for extra in (["--dry-run"], []):
        assert main(["store", "prune", str(store), "--runtime", "torch", *extra]) == 2
        err = capsys.readouterr().err
        assert "holds files that are not the store's, or are damaged (userfile.txt)" in err, err
    assert (folder / "userfile.txt").read_text() == "mine"
    (folder / "userfile.txt").unlink()
    assert main(["store", "prune", str(store), "--runtime", "torch"]) == 0
    assert list_store(str(store)) == [] and not folder.exists()
    capsys.readouterr()


def test_sts_says_when_some_pairs_have_no_known_word(tmp_path, caplog):
    """Round 13: a Spearman over 20 pairs, 10 of them with a zero vector (undefined cosine,
    scored as 0), was printed with no note."""
    model = tiny_model(tmp_path / "m")
    rows = [f"qqq{i}\tthe cat\t{i}" for i in range(10)] + [
        f"the cat\t{'sat dog' if i % 2 else 'the cat sat'}\t{i}" for i in range(10)]
    (tmp_path / "sts.tsv").write_text("sentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n")
    assert main(["evaluate", "--model", str(model), "--tasks", f"sts:{tmp_path / 'sts.tsv'}"]) == 0
    assert "10 of 20 pairs have a text with no known word" in caplog.text


def test_a_build_refused_at_the_lease_leaves_no_work_folder_behind(tmp_path):
    """Round 13: a build refused because another command held the output left an empty
    ``work/`` in that command's folder (which then looked like a build's)."""
    from swe.build import build, load_config
    from swe.lease import Lease, LeaseHeldError

    out = tmp_path / "exported"
    with Lease(str(out), purpose="export to model2vec"):
        with pytest.raises(LeaseHeldError, match="export to model2vec"):
            build(load_config("quickstart", [], output=str(out)))
        assert [p.name for p in out.iterdir()] == ["_LEASE.json"]
