"""Hostile input, fifth round, ``swe analyze``: outputs that overwrote the command's own inputs (a
model's config.json or matrix, the --speed file) or were folders found only after the work,
pipes that blocked for ever, tracebacks for a missing or malformed --speed file or model, and
messages that named neither the option nor the form it expects."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from swe.commands.analyze import main
from swe.model import StaticModel

WORDS = ["the", "of", "cat", "dog", "zebra", "quokka"]
SPEED = {"results": [{"spec": "qs", "threads": 1, "sentences_per_s": 1000.0,
                      "size_bytes": 4096}]}


def _model(path: Path, **options) -> Path:
    vectors = np.random.default_rng(0).standard_normal((len(WORDS), 4)).astype(np.float32)
    StaticModel.from_vectors(WORDS, vectors, **options).save(str(path))
    return path


def _speed(path: Path, data: object = SPEED) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _refused(capsys, argv: list[str], seconds: float = 60) -> str:
    """Run ``swe analyze argv`` (failing the test if it blocks); assert it was refused with one
    ``error:`` line, exit 2, and nothing computed (no table printed); that line."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(main(argv)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"still running after {seconds} s: it blocks (a pipe read)"
    out, err = capsys.readouterr()
    assert box[0] == 2, err
    assert out == "", "the analysis ran before the refusal"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    return {"model": _model(tmp_path / "qs" / "model"), "speed": _speed(tmp_path / "sp.json")}


@pytest.mark.parametrize("case", ["json-config", "png-matrix", "png-speed", "json-speed",
                                  "json-in-model"])
def test_an_output_on_an_input_is_refused_and_the_input_kept(tmp_path, files, capsys, case):
    model, speed = files["model"], files["speed"]
    plot = ["--speed", str(speed), "--quality", "qs=60"]
    argv, target = {
        "json-config": (["--model", str(model), "--json", str(model / "config.json")],
                        model / "config.json"),
        "png-matrix": (["--png", str(model / "model.safetensors"), *plot],
                       model / "model.safetensors"),
        "png-speed": (["--png", str(speed), *plot], speed),
        "json-speed": (["--png", str(tmp_path / "p.png"), "--json", str(speed), *plot], speed),
        "json-in-model": (["--model", str(model), "--json", str(model / "new.json")], None),
    }[case]
    before = {p: p.read_bytes() for p in [*model.iterdir(), speed]}
    line = _refused(capsys, argv)
    assert "overwrite" in line or "damage" in line, line
    assert {p: p.read_bytes() for p in [*model.iterdir(), speed]} == before
    assert not (model / "new.json").exists() and not (tmp_path / "p.png").exists()
    if target is not None:
        StaticModel.load(model)  # still a whole model


@pytest.mark.parametrize("where", ["folder", "root", "cwd", "parent", "home"])
def test_an_output_that_is_a_folder_root_home_or_cwd_is_refused_before_any_work(
        tmp_path, files, capsys, monkeypatch, where):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    out = {"folder": str(tmp_path / "results"), "root": "/", "cwd": ".", "parent": "..",
           "home": str(home)}[where]
    (tmp_path / "results").mkdir()
    for flag in ("--json", "--png"):
        argv = ["--model", str(files["model"]), flag, out]
        if flag == "--png":
            argv += ["--speed", str(files["speed"]), "--quality", "qs=60"]
        assert flag in _refused(capsys, argv)


def test_a_named_pipe_as_speed_or_model_config_is_refused_not_read(tmp_path, files, capsys):
    fifo = tmp_path / "speed.fifo"
    os.mkfifo(fifo)
    line = _refused(capsys, ["--png", str(tmp_path / "p.png"), "--speed", str(fifo),
                             "--quality", "x=1"])
    assert "--speed" in line and "named pipe" in line
    model = _model(tmp_path / "m")
    (model / "config.json").unlink()
    os.mkfifo(model / "config.json")
    assert "not a regular file" in _refused(capsys, ["--model", str(model)])
    assert "not a regular file" in _refused(capsys, ["--model", str(files["model"]), "--json",
                                                     str(fifo)])


@pytest.mark.parametrize("content, needle", [
    (None, "no such file"),
    ("not json", "is not JSON"),
    ("[1, 2]", "holds no speed results"),
    ('{"speed": {}}', "no result at --threads 1"),
    ('{"results": [7]}', "result 1 is not a speed result"),
    ('{"results": [{"spec": "qs", "threads": 1, "size_bytes": 5}]}', "sentences_per_s"),
    ('{"results": [{"spec": "qs", "threads": 1, "sentences_per_s": 9, "size_bytes": "x"}]}',
     "size_bytes"),
    ("[" * 100_000, "is not JSON"),
])
def test_a_missing_or_malformed_speed_file_is_one_line(tmp_path, capsys, content, needle):
    speed = tmp_path / "sp.json"
    if content is not None:
        speed.write_text(content, encoding="utf-8")
    line = _refused(capsys, ["--png", str(tmp_path / "p.png"), "--speed", str(speed),
                             "--quality", "qs=60"])
    assert "--speed" in line and needle in line, line
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("damage, needle", [
    ("absent", "no swe model"), ("tokenizer.json", "tokenizer.json is missing"),
    ("vocab.txt", "vocab.txt is missing"), ("file", "is a file"),
])
def test_a_missing_or_incomplete_model_is_one_line(tmp_path, capsys, minilm, damage, needle):
    model = tmp_path / "m"
    if damage == "file":
        model.write_text("x")
    elif damage != "absent":
        _model(model, tokenizer=minilm)
        (model / damage).unlink()
    assert needle in _refused(capsys, ["--model", str(model), "--json", str(tmp_path / "a.json")])
    assert not (tmp_path / "a.json").exists()


@pytest.mark.parametrize("argv, needles", [
    (["--quality", "x=abc"], ["--quality x=abc", "SPEC=SCORE", "number"]),
    (["--quality", "x=nan"], ["--quality x=nan", "SPEC=SCORE"]),
    (["--quality", "qs=60", "--words", "0"], ["--words 0", "whole number >= 1"]),
    (["--quality", "qs=60", "--components", "-1"], ["--components -1", "whole number >= 1"]),
])
def test_a_bad_number_names_its_option_and_form(tmp_path, files, capsys, argv, needles):
    line = _refused(capsys, ["--model", str(files["model"]), "--png", str(tmp_path / "p.png"),
                             "--speed", str(files["speed"]), *argv])
    assert all(n in line for n in needles), line


def test_a_good_run_still_writes_the_plot_and_report(tmp_path, files, capsys):
    """The checks let a real run through: an evaluate-style --speed file without size_bytes."""
    speed = _speed(tmp_path / "eval.json", {"results": {}, "speed": {
        "qs": {"spec": "qs", "threads": 1, "sentences_per_s": 500}}})
    png, report = tmp_path / "plots" / "p.png", tmp_path / "out" / "a.json"
    assert main(["--model", str(files["model"]), "--png", str(png), "--speed", str(speed),
                 "--quality", "qs=60", "--json", str(report), "--words", "2"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(report.read_text())["plot"]["points"][0]["quality"] == 60.0
    assert "| PC |" in capsys.readouterr().out
