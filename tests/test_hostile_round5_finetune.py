"""Hostile input, fifth round, ``swe finetune``: a CSV's label codes (``007``, ``01``) that type
inference turned into integers (merging ``01`` and ``1``), a ``--dev`` that is the ``--data``
file under another name (dev scores and early stopping on training rows), and UTF-16 or
Latin-1 files reported as parse errors or binary columns instead of by their encoding."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from swe.cli import main
from swe.finetune.data import read_labelled
from swe.finetune.job import finetune
from swe.model import StaticModel


def _model(path: Path) -> Path:
    StaticModel.from_vectors(["a", "good", "film"], np.eye(3, dtype=np.float32)).save(str(path))
    return path


def _csv(path: Path, rows: list[tuple[str, str]], encoding: str = "utf-8") -> Path:
    text = "text,label\n" + "".join(f"{t},{label}\n" for t, label in rows)
    data = text.encode(encoding)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _jsonl(path: Path, rows: list[tuple[str, str]], encoding: str = "utf-8") -> Path:
    text = "".join(json.dumps({"text": t, "label": label}, ensure_ascii=False) + "\n"
                   for t, label in rows)
    path.write_bytes(text.encode(encoding))
    return path


@pytest.mark.parametrize("name", ["codes.csv", "codes.csv.gz"])
def test_csv_label_codes_are_kept_as_written(tmp_path, name):
    rows = [("a good film", "007"), ("a bad film", "042"), ("meh", "01"), ("ok", "1"),
            ("1234", "007")]  # a text of digits is still a text
    data = read_labelled(str(_csv(tmp_path / name, rows)), "text", "label")
    assert data.classes == ["007", "01", "042", "1"]  # not [1, 42, 7]: 01 and 1 stay apart
    assert data.labels == [[label] for _, label in rows]
    assert data.texts[-1] == "1234"


@pytest.mark.parametrize("labels", [("0.5", "1.5"), ("1.0", "2.0"), ("1e3", "2"), ("nan", "1")])
def test_a_csv_label_column_of_decimal_numbers_is_refused(tmp_path, labels):
    path = _csv(tmp_path / "f.csv", [("a good film", labels[0]), ("a bad film", labels[1])])
    with pytest.raises(ValueError, match=r"decimal numbers .*regression target, not classes; "
                                         r"a label must be a string or an integer"):
        read_labelled(str(path), "text", "label")


def test_csv_words_and_missing_labels(tmp_path):
    rows = [("a good film", "true"), ("a bad film", "false"), ("so so", "0.5")]
    data = read_labelled(str(_csv(tmp_path / "w.csv", rows)), "text", "label")
    assert data.classes == ["0.5", "false", "true"]  # words, not numbers: classes as written
    path = _csv(tmp_path / "m.csv", [("a good film", "x"), ("a bad film", ""),
                                     ("meh", "  ")])
    with pytest.raises(ValueError, match=r"2 rows have no label in 'label' \(first: row 1"):
        read_labelled(str(path), "text", "label")


@pytest.fixture
def dev_files(tmp_path, monkeypatch):
    """A model, a data file and a Ray that must not start."""
    import swe.raysetup

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray started")

    monkeypatch.setattr(swe.raysetup, "init_ray", no_ray)
    (tmp_path / "d").mkdir()
    data = _csv(tmp_path / "d/train.csv", [("a good film", "x"), ("a bad film", "y")])
    return _model(tmp_path / "m"), data


@pytest.mark.parametrize("spelling", ["same", "symlink", "dotdot", "hardlink", "relative"])
def test_dev_naming_the_data_file_is_refused_before_ray(tmp_path, dev_files, spelling,
                                                        monkeypatch):
    model, data = dev_files
    dev = {"same": str(data), "dotdot": str(tmp_path / "d/../d/train.csv"),
           "relative": "d/train.csv"}.get(spelling, str(tmp_path / "dev.csv"))
    if spelling == "symlink":
        os.symlink(data, dev)
    elif spelling == "hardlink":
        os.link(data, dev)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"--dev .* is the --data file .*training rows"):
        finetune(str(model), str(data), str(tmp_path / "out"), dev=dev)
    assert not (tmp_path / "out").exists()


def test_dev_naming_the_data_object_is_refused(tmp_path, dev_files):
    model, _ = dev_files
    for dev in ("s3://bucket/train.csv", "s3a://bucket/train.csv", "s3://bucket/train.csv/"):
        with pytest.raises(ValueError, match="is the --data file"):
            finetune(str(model), "s3://bucket/train.csv", str(tmp_path / "out"), dev=dev)


def test_dev_data_refusal_is_one_cli_line(tmp_path, dev_files, capsys):
    model, data = dev_files
    os.symlink(data, tmp_path / "dev.csv")
    assert main(["finetune", "--model", str(model), "--data", str(data), "--dev",
                 str(tmp_path / "dev.csv"), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --dev ") and "--data file" in err[0]


def test_a_separate_dev_file_passes_the_check(tmp_path, dev_files):
    _, data = dev_files
    dev = _csv(tmp_path / "dev.csv", [("a good film", "x"), ("a bad film", "y")])
    with pytest.raises(Exception, match="no-such-model") as e:  # past the check: the model
        finetune(str(tmp_path / "no-such-model"), str(data), str(tmp_path / "out"),
                 dev=str(dev))
    assert "--data file" not in str(e.value)


ROWS = [("a good film", "x"), ("a bad film", "y")]


@pytest.mark.parametrize("encoding, source", [
    ("utf-16", "UTF-16"), ("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE"),
    ("utf-32", "UTF-32")])
@pytest.mark.parametrize("write, name", [(_csv, "w.csv"), (_jsonl, "w.jsonl")])
def test_a_utf16_file_is_named_with_its_conversion(tmp_path, encoding, source, write, name):
    path = write(tmp_path / name, ROWS, encoding)
    stem, ext = name.split(".")
    with pytest.raises(ValueError) as e:
        read_labelled(str(path), "text", "label")
    assert str(e.value) == (f"{path} is {source} text, not UTF-8: convert it (e.g. iconv -f "
                            f"{source} -t UTF-8 {path} > {stem}.utf8.{ext}) and "
                            "pass that")


@pytest.mark.parametrize("encoding, source", [("latin-1", "CP1252"), ("cp1252", "CP1252")])
@pytest.mark.parametrize("write, name", [(_csv, "l.csv"), (_jsonl, "l.jsonl"),
                                         (_csv, "l.csv.gz")])
def test_a_latin1_file_is_not_utf8_not_binary(tmp_path, encoding, source, write, name):
    rows = [("a good film", "x"), ("café crème naïve", "y")]
    path = write(tmp_path / name, rows, encoding)
    with pytest.raises(ValueError) as e:
        read_labelled(str(path), "text", "label")
    message = str(e.value)
    assert message.startswith(f"{path} is not UTF-8 text (line ")
    assert "looks like Latin-1 or cp1252" in message and "binary" not in message
    want = (f"gzip -dc {path} | iconv -f {source} -t UTF-8 > l.utf8.csv"
            if name.endswith(".gz") else f"iconv -f {source} -t UTF-8 {path} > ")
    assert want in message


def test_latin1_without_a_cp1252_reading_is_named_latin1(tmp_path):
    path = tmp_path / "c1.csv"
    path.write_bytes(b"text,label\na good film,x\nctrl \x81 byte,y\n")
    with pytest.raises(ValueError, match=r"line 3, byte 0x81 .*iconv -f LATIN1 -t UTF-8"):
        read_labelled(str(path), "text", "label")


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("encoding, words", [
    ("utf-16", "is UTF-16 text, not UTF-8: convert it (e.g. iconv -f UTF-16"),
    ("latin-1", "is not UTF-8 text (line "),
])
@pytest.mark.parametrize("write, name", [(_csv, "bad.csv"), (_jsonl, "bad.jsonl")])
def test_cli_names_the_encoding_in_one_line(tmp_path, capsys, encoding, words, write, name):
    rows = [("a good film", "x"), ("a bad film", "y"), ("café", "y")]
    path = write(tmp_path / name, rows, encoding)
    argv = ["finetune", "--model", str(_model(tmp_path / "m")), "--data", str(path),
            "--output", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path} ") and words in err[0], err
    assert not (tmp_path / "out").exists()
