"""The fifth hostile round (issue 42): data loss, silently wrong results, hangs and misleading
messages found by new cases of the earlier rounds' kinds. Each test fails on the code before
its fix. (`swe analyze` and `swe finetune`'s input: test_hostile_round5_analyze.py and
test_hostile_round5_finetune.py.)"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from swe.build import ConfigError, load_config
from swe.model import StaticModel

TEXT = b"".join(b"A man plays a guitar number %d.\n" % i for i in range(50))


def _model(path: Path) -> Path:
    StaticModel.from_vectors(["a", "man", "the"], np.eye(3, dtype=np.float32)).save(str(path))
    return path


def _errors(tmp_path: Path, output: str, extra: list[str]) -> str:
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(TEXT)
    with pytest.raises(ConfigError) as info:
        load_config("quickstart", [f"corpus.en.paths=['{corpus}']", *extra], output=output)
    return str(info.value)


def test_an_output_inside_the_teacher_word_lists_or_languages_file_is_refused(tmp_path):
    """A build whose output was the teacher's own folder overwrote its config.json, weights and
    tokenizer, and exited 0: only corpus and pairs paths were checked."""
    from swe.build.teacher import minilm_dir

    teacher = tmp_path / "teacher"
    shutil.copytree(minilm_dir(), teacher)
    errors = _errors(tmp_path, str(teacher), [f"teacher='{teacher}'"])
    assert "overlaps the teacher folder" in errors, errors
    errors = _errors(tmp_path, str(teacher / "out"), [f"teacher='{teacher}'"])
    assert "overlaps the teacher folder" in errors, errors
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "en.tsv").write_text("word\tcount\nman\t3\n")
    errors = _errors(tmp_path, str(lists), [f"vocab.word_lists='{lists}/{{lang}}.tsv'"])
    assert "overlaps vocab.word_lists" in errors, errors
    table = tmp_path / "langs" / "languages.tsv"
    table.parent.mkdir()
    table.write_text("code\nen\n")
    errors = _errors(tmp_path, str(table.parent), [f"languages_file='{table}'"])
    assert "overlaps languages_file" in errors, errors


def test_builds_sharing_refine_storage_each_get_a_folder_of_their_own(tmp_path):
    """Two builds with one ``refine.storage``: the second removed the first's checkpoints as
    "an earlier refine run", so a killed first build lost its resume point."""
    from swe.build.stages.refine import runs_folder

    shared = str(tmp_path / "ckpt")
    a, b = runs_folder(shared, str(tmp_path / "a")), runs_folder(shared, str(tmp_path / "b"))
    assert a != b and a.startswith(shared + "/") and b.startswith(shared + "/")
    assert runs_folder(shared, str(tmp_path / "a") + "/") == a  # one output, one folder
    assert runs_folder("", str(tmp_path / "a")) == ""  # the default: <output>/work/refine/runs


def test_a_lone_carriage_return_on_any_line_is_refused_by_the_encoder(tmp_path, ray_session):
    """Only line 1 was checked: a file whose later lines end in a lone \\r gave 2 rows for 4
    lines (the build reads 4) and exited 0."""
    from swe.bulk import encode_files
    from swe.bulk.read import count_rows

    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(b"the man\nthe dog\rthe cat\rthe end\n")
    with pytest.raises(ValueError, match=r"mixed.txt line 2: a carriage return"):
        encode_files(str(_model(tmp_path / "m")), [str(mixed)], str(tmp_path / "enc"))
    assert not (tmp_path / "enc" / "_SUCCESS.json").exists()
    # The row count reads the file in 4 MiB chunks: a lone \r at a chunk's end is seen, a CRLF
    # split across two chunks is not one.
    edge = tmp_path / "edge.txt"
    edge.write_bytes(b"x" * ((1 << 22) - 1) + b"\ry\n")
    with pytest.raises(ValueError, match=r"edge\.txt line 1: a carriage return"):
        count_rows(str(edge), "text")
    edge.write_bytes(b"x" * ((1 << 22) - 1) + b"\r\nz\n")
    assert count_rows(str(edge), "text") == 2


def test_a_corpus_changed_after_its_stage_ran_is_not_reused_silently(tmp_path, ray_session):
    """A rerun after the corpus file was rewritten, or a file added to its folder, said
    "[corpus] already done" and went on from the old text."""
    from swe.build import build

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_bytes(TEXT)
    out = tmp_path / "out"
    cfg = load_config("quickstart", [f"corpus.en.paths=['{folder}']"], output=str(out))
    assert build(cfg, until="corpus")["corpus"].lines == 50
    assert build(cfg, until="corpus")["corpus"].lines == 50  # unchanged: reused
    (folder / "b.txt").write_bytes(TEXT[:200])
    with pytest.raises(ValueError, match="corpus files of en changed since"):
        build(cfg, until="corpus")
    (folder / "b.txt").unlink()
    (folder / "a.txt").write_bytes(TEXT + b"One more line.\n")  # rewritten, another size
    with pytest.raises(ValueError, match=re.escape(f"remove {out}/work to build this one again")):
        build(cfg, until="corpus")
    shutil.rmtree(out / "work")
    assert build(cfg, until="corpus")["corpus"].lines == 51
    # Round 6: a rewrite that keeps the size (sed 's/ and / AND /') was not noticed.
    (folder / "a.txt").write_bytes((TEXT + b"One more line.\n").replace(b"man", b"MAN"))
    with pytest.raises(ValueError, match="corpus files of en changed since"):
        build(cfg, until="corpus")


def test_a_ray_address_where_something_else_answers_is_refused_in_seconds(ray_session):
    """RAY_ADDRESS naming a web server: the connection is accepted, and Ray then retried
    "Failed to get cluster ID from GCS" for over 150 s, with no error of swe's."""
    import http.server
    import threading
    import time

    import ray

    from swe.raysetup import check_reachable

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        t = time.monotonic()
        with pytest.raises(ConnectionError, match="it is not a Ray cluster's head"):
            check_reachable(f"127.0.0.1:{server.server_address[1]}")
        assert time.monotonic() - t < 15
    finally:
        server.shutdown()
    check_reachable(ray.get_runtime_context().gcs_address, timeout=5)  # a real head passes


def test_rows_that_are_not_utf8_are_warned_about_not_only_counted(tmp_path, ray_session, capsys):
    """A gzip holding binary, or text in another encoding: exit 0 with most rows replaced
    characters, said only as a count in the last line."""
    from swe.bulk import encode_files

    path = tmp_path / "latin1.txt"
    path.write_bytes("Café crème à la française.\n".encode("latin-1") * 3 + b"the man\n")
    summary = encode_files(str(_model(tmp_path / "m")), [str(path)], str(tmp_path / "enc"))
    assert summary.invalid_utf8_rows == 3 and summary.rows == 4
    assert "warning: 3 of 4 rows were not valid UTF-8" in capsys.readouterr().err


def test_a_truncated_compressed_finetune_file_is_one_line(tmp_path):
    """Round 6: a cut-short .csv.gz for swe finetune was an EOFError traceback from a Ray task."""
    import gzip

    from swe.finetune.data import read_labelled

    data = gzip.compress(b"text,label\n" + b"the man plays,a\nthe dog runs,b\n" * 200)
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.csv\.gz: truncated or corrupt compressed file"):
        read_labelled(str(path), "text", "label")


def test_an_output_that_is_a_hard_link_of_an_input_is_refused(tmp_path, capsys):
    """Round 6: ``--json`` onto a hard link of the model's config.json (another name, the same
    file) rewrote the model's config; the path checks saw two different names."""
    import os

    from swe.cli import main

    model = _model(tmp_path / "m")
    os.link(model / "config.json", tmp_path / "c.json")
    sts = tmp_path / "s.tsv"
    sts.write_text("a man\tthe man\t4.0\nthe a\ta the\t1.0\nman\ta\t2.5\n")
    before = (model / "config.json").read_bytes()
    assert main(["evaluate", "--model", str(model), "--tasks", f"sts:{sts}",
                 "--json", str(tmp_path / "c.json")]) == 2
    assert "would overwrite" in capsys.readouterr().err
    assert main(["analyze", "--model", str(model), "--json", str(tmp_path / "c.json")]) == 2
    assert (model / "config.json").read_bytes() == before


def test_output_to_a_full_disk_is_one_line(tmp_path):
    """Round 6: ``swe info M > /dev/full`` was an OSError (ENOSPC) traceback."""
    import subprocess
    import sys

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    model = _model(tmp_path / "m")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "swe.cli", "info", str(model)], stdout=full,
                              stderr=subprocess.PIPE, text=True)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: cannot write the output (No space left on device): free space where it goes"]
