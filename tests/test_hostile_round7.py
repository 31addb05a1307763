"""The seventh hostile round (issue 42): a device or pipe that ``--overwrite`` deleted, a failed
``swe reseal`` that had already rewritten config.json, invisible characters that split a word,
a header-only finetune file, a full disk inside a Ray task, SIGTERM, a UTF-16 fix that did not
work, a symbolic link loop and duplicate ``swe analyze`` specs. Each fix has a test that fails
on the code before it; the guards beside them check what must not change."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from swe.cli import main
from swe.commands import failed
from swe.finetune.data import read_labelled
from swe.inputs import refuse_utf16
from swe.model import StaticModel
from swe.text import words

ROOT = Path(__file__).resolve().parents[1]


def _model(path: Path) -> Path:
    words_ = ["first", "which", "the", "a"]
    StaticModel.from_vectors(words_, np.eye(4, dtype=np.float32)).save(str(path))
    return path


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_encode_never_replaces_a_named_pipe_given_as_output(tmp_path, capsys, overwrite):
    (tmp_path / "in.txt").write_text("the first\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(["encode", "--model", str(_model(tmp_path / "m")), "--input",
                 str(tmp_path / "in.txt"), "--output", str(fifo), *overwrite]) == 2
    assert "is a device, named pipe or socket, not a folder" in capsys.readouterr().err
    assert fifo.is_fifo()


def test_finetune_names_a_device_output(tmp_path):
    from swe.finetune.job import finetune

    (tmp_path / "d.csv").write_text("text,label\nthe first,x\na which,y\n")
    with pytest.raises(ValueError, match=r"/dev/full is a device, named pipe or socket"):
        finetune(str(_model(tmp_path / "m")), str(tmp_path / "d.csv"), "/dev/full")


@pytest.mark.parametrize("damage", ["cut", "extra word"])
def test_a_failed_reseal_leaves_config_json_as_it_was(tmp_path, capsys, damage):
    folder = _model(tmp_path / "m")
    before = (folder / "config.json").read_bytes()
    if damage == "cut":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[:-16])
    else:
        with open(folder / "vocab.txt", "a") as f:
            f.write("extra\n")
    assert main(["reseal", str(folder)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert (folder / "config.json").read_bytes() == before  # the checksums that catch it


def test_reseal_refuses_a_pipe_or_a_build_folder_as_before(tmp_path, capsys):
    folder = _model(tmp_path / "m")
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")  # read whole, it would block for ever
    assert main(["reseal", str(folder)]) == 2
    assert "not a regular file" in capsys.readouterr().err
    _model(tmp_path / "build" / "model")
    assert main(["reseal", str(tmp_path / "build")]) == 2
    assert f"its model is {tmp_path / 'build' / 'model'}" in capsys.readouterr().err


def test_reseal_still_reseals_an_edited_config(tmp_path, capsys):
    folder = _model(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["note"] = "edited on purpose"
    (folder / "config.json").write_text(json.dumps(config))
    assert main(["reseal", str(folder)]) == 0
    assert StaticModel.load(str(folder)).words == ["first", "which", "the", "a"]
    assert capsys.readouterr().out.startswith(f"resealed {folder}: config.json and ")


@pytest.mark.parametrize("mark", ["\u00ad", "\u2060", "\ufeff"])
def test_invisible_characters_inside_a_word_do_not_split_it(tmp_path, mark):
    """A soft hyphen, word joiner or byte-order mark, as the teacher's normaliser drops them."""
    model = StaticModel.load(str(_model(tmp_path / "m")))
    assert words(f"fir{mark}st wh{mark}ich") == ["first", "which"]
    np.testing.assert_array_equal(model.encode([f"fir{mark}st"]), model.encode(["first"]))


def test_word_spans_index_the_text_the_teacher_reads():
    """The extractor lines words up with the teacher's token offsets, which index the raw
    text: a span covers the invisible character inside its word."""
    from swe.text import word_spans

    text = "\ufeffHello wor\u00adld again"
    spans = word_spans(text)
    assert [w for w, _, _ in spans] == words(text) == ["Hello", "world", "again"]
    assert [text[a:b] for _, a, b in spans] == ["Hello", "wor\u00adld", "again"]


def test_the_exported_tokenizer_drops_them_too(tmp_path):
    from swe.export import export_arrays

    arrays = export_arrays(StaticModel.load(str(_model(tmp_path / "m"))), 0)
    tok = arrays.tokenizer()
    assert tok.encode("fir\u00adst wh\u2060ich").tokens == tok.encode("first which").tokens


@pytest.mark.parametrize("joiner", ["\u200c", "\u200d"])
def test_zero_width_joiners_are_left_as_the_vocabularies_were_built(joiner):
    import blingfire

    text = f"\u0645\u06cc{joiner}\u062e\u0648\u0627\u0647\u0645 fir{joiner}st"  # Persian
    assert words(text) == blingfire.text_to_words(text).split()  # what the splitter gives


def test_a_finetune_file_of_a_header_only_is_one_line(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("text,label\n")
    with pytest.raises(ValueError, match=r"h.csv has no rows \(a header at most\)"):
        read_labelled(str(path), "text", "label")


class _WrappedTaskError(Exception):
    """What a Ray Data task's error is by the time it reaches the driver: one of Ray's wrappers,
    whose original ``OSError`` survives only as text."""

    __module__ = "ray.exceptions"


class _Bug(Exception):
    """Not Ray's: whatever its text or cause, it keeps its traceback."""


def test_a_full_disk_inside_a_ray_task_is_one_line(capsys):
    error = _WrappedTaskError("ray::MapWorker(...)\nOSError: [Errno 28] No space left on device")
    assert failed(error, ["out"]) == 1
    assert capsys.readouterr().err == ("error: no space left on the device of the output: free "
                                       "space, then rerun the command\n")


def test_a_full_disk_names_the_file(capsys):
    error = OSError(errno.ENOSPC, "No space left on device", "/tmp/out/x.parquet")
    assert failed(error) == 1
    assert "no space left on the device of /tmp/out/x.parquet" in capsys.readouterr().err


def test_other_errors_of_ray_tasks_and_bugs_keep_their_traceback():
    with pytest.raises(_WrappedTaskError):
        failed(_WrappedTaskError("ray::task\nZeroDivisionError: division by zero"))
    with pytest.raises(_Bug):
        failed(_Bug("OSError: [Errno 28] No space left on device"))
    bug = _Bug("a bug")
    bug.__cause__ = ValueError("raised from a ValueError")
    with pytest.raises(_Bug):
        failed(bug)


@pytest.mark.usefixtures("ray_session")
def test_sigterm_to_a_job_is_an_interrupt():
    """A job (console configured, then Ray) stopped by SIGTERM raises KeyboardInterrupt, which
    every command reports as "interrupted" (130): Ray's handler exited with status 15 and no
    word, or dumped its native stack."""
    from procs import joined_env

    code = ("import os, signal, time\n"
            "from swe.raysetup import configure_console, init_ray\n"
            "configure_console(); init_ray()\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=joined_env(), cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "interrupted", done.stderr[-2000:]


@pytest.mark.parametrize("name, target", [("u16.txt", "u16.utf8.txt"),
                                          ("u16.txt.gz", "u16.utf8.txt"),
                                          ("noext", "noext.utf8.txt")])
def test_the_utf16_fix_writes_a_file_swe_reads_outside_the_input_folder(tmp_path, name, target):
    path = str(tmp_path / "inputs" / name)
    with pytest.raises(ValueError) as e:
        refuse_utf16(path, "hi".encode("utf-16"))
    assert f"> {target})" in str(e.value)  # into the current folder, its format still named


def test_a_symbolic_link_loop_is_named(tmp_path, capsys):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    assert main(["encode", "--model", str(_model(tmp_path / "m")), "--input",
                 str(tmp_path / "a"), "--output", str(tmp_path / "out")]) == 2
    assert "is a symbolic link to nothing (a link loop" in capsys.readouterr().err


def test_analyze_refuses_a_spec_given_twice(tmp_path, capsys):
    speed = tmp_path / "speed.json"
    row = {"spec": "m1", "threads": 1, "sentences_per_s": 10.0}
    speed.write_text(json.dumps({"results": [row]}))
    assert main(["analyze", "--speed", str(speed), "--quality", "m1=50", "--quality", "m1=60",
                 "--png", str(tmp_path / "a.png")]) == 2
    assert "--quality names m1 twice (50 and 60)" in capsys.readouterr().err
    speed.write_text(json.dumps({"results": [{**row, "sentences_per_s": "bad"}, row]}))
    assert main(["analyze", "--speed", str(speed), "--quality", "m1=50",
                 "--png", str(tmp_path / "a.png")]) == 2
    assert "holds two results for m1 at threads 1" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()


def test_an_export_that_fails_halfway_leaves_no_folder_in_the_reruns_way(tmp_path, monkeypatch):
    """A full disk after the first file (checked for real on a 64 KiB tmpfs, and for
    ``swe quantize`` on a 16 KiB one: the closing note of issue 42)."""
    from swe import storage
    from swe.export import export

    model, real, calls = str(_model(tmp_path / "m")), storage.write_bytes, []

    def full_after_one(url, data):
        calls.append(url)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", url)
        real(url, data)

    monkeypatch.setattr(storage, "write_bytes", full_after_one)
    with pytest.raises(OSError, match="No space left"):
        export(model, "model2vec", tmp_path / "x", report=None,
               measure=False, table_lines=0)
    assert len(calls) == 2 and not (tmp_path / "x").exists()
    (tmp_path / "given").mkdir()  # an empty folder given as the output stays
    calls.clear()
    with pytest.raises(OSError, match="No space left"):
        export(model, "model2vec", tmp_path / "given", report=None, measure=False,
               table_lines=0)
    assert (tmp_path / "given").is_dir() and not list((tmp_path / "given").iterdir())


def test_a_model_url_nobody_answers_is_not_called_missing(capsys):
    """An endpoint that does not answer (here: nothing listens on port 1) is named as such, not
    as a model whose config.json is missing (was the save interrupted?)."""
    assert main(["info", "http://127.0.0.1:1/m"]) == 1
    err = capsys.readouterr().err
    assert "Cannot connect to host 127.0.0.1:1" in err and "missing" not in err


@pytest.mark.parametrize("path", ["", "  "])
def test_an_empty_model_path_is_named_not_called_an_interrupted_save(path, capsys):
    with pytest.raises(ValueError, match=r"no model path given"):
        StaticModel.load(path)
    assert main(["reseal", path]) == 2
    assert "no model path given" in capsys.readouterr().err


def test_a_0d_numpy_array_of_text_is_a_clear_type_error(tmp_path):
    model = StaticModel.load(str(_model(tmp_path / "m")))
    with pytest.raises(TypeError, match=r"0-d array: pass texts.item\(\) for one text"):
        model.encode(np.array("the first"))
    assert model.encode(np.array(["the first", "a"])).shape == (2, 4)


@pytest.mark.parametrize("where", ["model", "model/sub", "enc", "enc/x"])
def test_a_build_into_a_saved_model_or_encode_output_is_refused(tmp_path, where):
    """Every other command refused these outputs; a build added its work/ folder inside."""
    from swe.build import ConfigError, load_config

    _model(tmp_path / "model")
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "_manifest.json").write_text('{"format": "swe-bulk-encode"}')
    kind = "saved model" if where.startswith("model") else "swe encode output"
    with pytest.raises(ConfigError, match=f"lies in the {kind} {tmp_path / where.split('/')[0]}"):
        load_config("quickstart", [], output=str(tmp_path / where))


def test_another_tools_config_json_above_the_output_is_not_a_model(tmp_path):
    from swe.build import load_config

    (tmp_path / "config.json").write_text('{"format": "something-else"}')
    os.mkfifo(tmp_path / "_manifest.json")  # never opened: a pipe would block
    load_config("quickstart", [], output=str(tmp_path / "out"))
