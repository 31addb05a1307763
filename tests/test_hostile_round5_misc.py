"""The fifth hostile round (issue 42), assorted inputs: a byte-order mark in vocab.txt or a
build config, a reader that stops early, Parquet or zip data under a text name, a file where a
model folder or an output folder belongs, an uppercase teacher prefix, a misspelt task name and
one file named twice through a hard link. Each test fails on the code before its fix."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from swe.build import ConfigError, load_config
from swe.cli import main
from swe.model import StaticModel
from swe.modelfiles import CONFIG, ModelFileError, write_folder

ROOT = Path(__file__).resolve().parents[1]
BOM = b"\xef\xbb\xbf"
TEXT = b"".join(b"A man plays a guitar number %d.\n" % i for i in range(50))


def _model(path: Path) -> Path:
    StaticModel.from_vectors(["the", "a", "man"], np.eye(3, dtype=np.float32)).save(str(path))
    return path


def _parquet(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["the man\rplays", "a dog"]}), str(path))
    return path


def _zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a.txt", TEXT.decode())
    return path


def test_a_vocab_txt_starting_with_a_bom_is_refused_by_reseal_and_load(tmp_path, capsys):
    """``swe reseal`` sealed a vocab.txt an editor had given a BOM: its first word became
    "\\ufeffthe", and "the" then encoded to a zero vector."""
    model = _model(tmp_path / "m")
    vocab = model / "vocab.txt"
    vocab.write_bytes(BOM + vocab.read_bytes())
    config = (model / CONFIG).read_bytes()
    assert main(["reseal", str(model)]) == 2
    err = capsys.readouterr().err
    assert "vocab.txt starts with a UTF-8 byte-order mark" in err, err
    assert f"sed -i '1s/^\\xEF\\xBB\\xBF//' {vocab}" in err, err
    assert (model / CONFIG).read_bytes() == config  # nothing sealed
    # A folder sealed with the BOM (by an older swe's reseal) is refused at load.
    sealed = json.loads(config)
    files = {n: (model / n).read_bytes() for n in ("model.safetensors", "vocab.txt")}
    write_folder(str(model), files, {k: v for k, v in sealed.items()
                                     if k not in ("files", "config_sha256")})
    with pytest.raises(ModelFileError, match="byte-order mark"):
        StaticModel.load(str(model))


@pytest.mark.parametrize("command", [["swe.build"], ["swe.cli", "info", "MODEL"]])
def test_output_to_a_reader_that_went_away_ends_quietly(command, tmp_path):
    """``python -m swe.build | head -1`` (the config reference ``swe build --help`` points to)
    ended in a BrokenPipeError traceback; ``swe info MODEL`` in "Exception ignored … Broken
    pipe" and exit status 120."""
    model = str(_model(tmp_path / "m"))
    command = [sys.executable, "-m", *(model if c == "MODEL" else c for c in command)]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        done = subprocess.run(command, stdout=write, stderr=subprocess.PIPE, cwd=ROOT,
                              timeout=120, check=False)
    finally:
        os.close(write)
    assert done.returncode == 1 and done.stderr == b"", done.stderr.decode()


def test_parquet_or_zip_data_under_a_text_name_is_called_what_it_is(tmp_path, ray_session):
    """Parquet data named x.txt was "old Mac (CR-only) line endings" to swe encode (or a few
    rows of garbage, exit 0), and a zip named z.txt was "UTF-16 or UTF-32 text"."""
    from swe.bulk import encode_files
    from swe.inputs import peek_lines

    parquet, archive = _parquet(tmp_path / "x.txt"), _zip(tmp_path / "z.txt")
    model = str(_model(tmp_path / "m"))
    with pytest.raises(ValueError, match=r"x\.txt holds Parquet data, not text: rename it to "
                                         r"end in \.parquet \(or set --format to parquet\)"):
        encode_files(model, [str(parquet)], str(tmp_path / "e1"))
    with pytest.raises(ValueError, match=r"z\.txt is a zip archive.*unzip it first"):
        encode_files(model, [str(archive)], str(tmp_path / "e2"))
    for path, expected in ((parquet, r"corpus\.en\.format to parquet"), (archive, "unzip")):
        with pytest.raises(ConfigError, match=expected):
            load_config("quickstart", [f"corpus.en.paths=['{path}']"],
                        output=str(tmp_path / "out"))
    assert peek_lines(str(_write(tmp_path / "t.txt", b"PAR1 is a word\n")), 1)  # text: read


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_build_config_starting_with_a_bom_is_read(tmp_path):
    """"not valid TOML: Invalid statement (line 1, column 1)" for a config an editor saved
    with a byte-order mark."""
    corpus = _write(tmp_path / "c.txt", TEXT)
    text = (ROOT / "swe" / "configs" / "quickstart.toml").read_bytes()
    config = _write(tmp_path / "bom.toml", BOM + text)
    cfg = load_config(str(config), [f"corpus.en.paths=['{corpus}']"],
                      output=str(tmp_path / "out"))
    assert cfg.name == load_config("quickstart", output=str(tmp_path / "out")).name


def test_a_file_where_a_folder_belongs_is_named(tmp_path, capsys):
    """``swe info m/config.json``, a FIFO or a regular file as the model, and a build output
    that is a file: "[Errno 20] Not a directory: '…/config.json/config.json'"."""
    from swe.export import export

    model = _model(tmp_path / "m")
    assert main(["info", str(model / CONFIG)]) == 2
    err = capsys.readouterr().err
    assert f"{model / CONFIG} is a file, not a model folder: give the folder that holds " \
           f"config.json ({model})" in err, err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for argv in (["info", str(fifo)], ["reseal", str(fifo)],
                 ["export", str(fifo), "--to", "model2vec", str(tmp_path / "o")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{fifo} is a named pipe, not a model folder" in err and "Errno" not in err, err
    with pytest.raises(ModelFileError, match="/dev/null is a device, not a model folder"):
        StaticModel.load("/dev/null")
    regular = _write(tmp_path / "reg", b"x\n")
    with pytest.raises(ModelFileError, match="reg is a file, not a model folder"):
        StaticModel.load(str(regular))
    corpus = _write(tmp_path / "c.txt", TEXT)
    with pytest.raises(ConfigError, match=r"--output .*reg is an existing file, not a folder"):
        load_config("quickstart", [f"corpus.en.paths=['{corpus}']"], output=str(regular))
    with pytest.raises(ConfigError, match=r"reg/sub lies under .*reg, which is a file"):
        load_config("quickstart", [f"corpus.en.paths=['{corpus}']"],
                    output=str(regular / "sub"))
    with pytest.raises(ValueError, match=r"reg/sub lies under .*reg, which is a file"):
        export(str(model), "model2vec", str(regular / "sub"))


def test_store_prune_takes_an_uppercase_teacher_prefix(tmp_path):
    """``--teacher CCCC`` was "not a teacher: give hex digits" though it was hex digits."""
    from swe.build.teacher.store import descriptor, list_store, open_namespace, prune

    store = str(tmp_path / "store")
    open_namespace(store, descriptor("c" * 64, "onnx", 512, 384))
    assert [n["runtime"] for n in prune(store, teacher="CCCC", dry_run=True)] == ["onnx"]
    assert main(["store", "prune", store, "--teacher", "CcCc"]) == 0
    assert list_store(store) == []


def test_an_unknown_task_is_refused_before_any_work_with_the_known_names(tmp_path, capsys):
    """``--tasks stsb-devv`` ran until "STS file not found: …/stsb/devv.tsv"; ``bucc-fra``
    until the distractors were looked for."""
    from swe.eval.tasks import UnknownTaskError, expand

    for task in ("stsb-devv", "bucc-fra", "nosuch"):
        with pytest.raises(UnknownTaskError, match=r"known tasks: stsb-dev, stsb-test.*bucc-deu"
                                                   r".*tatoeba-XXX.*classification"):
            expand([task])
    assert expand(["stsb-dev", "bucc-deu", "tatoeba-deu"]) == ["stsb-dev", "bucc-deu",
                                                              "tatoeba-deu"]
    model = str(_model(tmp_path / "m"))
    assert main(["evaluate", "--model", model, "--tasks", "stsb-devv"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown task 'stsb-devv'; known tasks: ") and \
        "not found" not in err, err


def test_a_file_named_twice_through_a_hard_link_is_read_once(tmp_path, caplog):
    """Two hard links to one file (one inode, two names) were both read: every row twice, and
    no "named twice" warning (only the real path was compared)."""
    from swe.inputs import expand_inputs

    first = _write(tmp_path / "a.txt", TEXT)
    second = tmp_path / "b.txt"
    os.link(first, second)
    with caplog.at_level(logging.WARNING, logger="swe.inputs"):
        assert expand_inputs([str(first), str(second)]) == [str(first)]
    assert f"{second} is named twice among the inputs (also as {first})" in caplog.text
    other = _write(tmp_path / "c.txt", TEXT)  # the same bytes in another file: both read
    assert expand_inputs([str(first), str(other)]) == [str(first), str(other)]
