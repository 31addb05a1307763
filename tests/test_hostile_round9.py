"""The ninth hostile round (issue 42): empty model paths read as the current folder, outputs
written inside a teacher store, an encode output or a build's ``work/``, a Parquet file told to
rename itself to what it is called, an infinite STS score and evaluate specs counted twice. (A
model deep inside an ``encode --overwrite`` target: tests/test_hostile_round8.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from swe.cli import main
from swe.inputs import refuse_parquet
from swe.model import StaticModel


def _model(path: Path) -> Path:
    StaticModel.from_vectors(["the", "cat", "sat", "dog"], np.eye(4, dtype=np.float32)).save(
        str(path))
    return path


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv", [["export", "", "--to", "model2vec", "OUT"],
                                  ["quantize", "", "--clusters", "2", "--output", "OUT"],
                                  ["evaluate", "--model", "", "--tasks", "stsb-dev"],
                                  ["evaluate", "--model", "gem:", "--tasks", "stsb-dev"]])
def test_an_empty_model_path_is_named_not_read_as_the_current_folder(tmp_path, capsys, argv):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    err = _refused(capsys, argv)
    assert "empty path" in err or "names no model" in err or "no model path given" in err
    assert not (tmp_path / "out").exists()


def _store(path: Path) -> Path:
    path.mkdir()
    (path / "_SWE_STORE.json").write_text('{"format": "swe-teacher-store"}')
    return path


@pytest.mark.parametrize("command", ["export", "quantize", "encode"])
@pytest.mark.parametrize("where", ["store", "encode output", "build work"])
def test_no_command_writes_inside_a_store_an_encode_output_or_a_builds_work(
        tmp_path, capsys, command, where):
    model = _model(tmp_path / "m")
    if where == "store":
        inside = _store(tmp_path / "store") / "x"
    elif where == "encode output":
        (tmp_path / "enc").mkdir()
        (tmp_path / "enc" / "_manifest.json").write_text('{"format": "swe-encode"}')
        inside = tmp_path / "enc" / "x"
    else:
        (tmp_path / "b" / "work" / "corpus").mkdir(parents=True)
        inside = tmp_path / "b" / "work" / "x"
    (tmp_path / "in.txt").write_text("the cat\n")
    argv = {"export": ["export", str(model), "--to", "model2vec", str(inside)],
            "quantize": ["quantize", str(model), "--clusters", "2", "--output", str(inside)],
            "encode": ["encode", "--model", str(model), "--input", str(tmp_path / "in.txt"),
                       "--output", str(inside)]}[command]
    err = _refused(capsys, argv)
    assert "lies in the" in err and not inside.exists()


def test_finetune_never_writes_inside_a_store(tmp_path):
    from swe.finetune.job import finetune

    (tmp_path / "d.csv").write_text("text,label\nthe cat,x\nsat dog,y\n")
    out = _store(tmp_path / "store") / "ft"
    with pytest.raises(ValueError, match="lies in the teacher-output store"):
        finetune(str(_model(tmp_path / "m")), str(tmp_path / "d.csv"), str(out))


def test_an_encode_output_beside_a_builds_model_is_still_allowed(tmp_path):
    from swe.artifacts import refuse_inside

    (tmp_path / "b" / "work" / "corpus").mkdir(parents=True)
    refuse_inside(str(tmp_path / "b" / "emb"))  # a build's top level is the user's


def test_a_parquet_file_read_as_text_is_told_to_change_the_format_not_its_name():
    head = b"PAR1\x15\x04\x15"
    with pytest.raises(ValueError, match=r"x.parquet holds Parquet data, not text: set --format"):
        refuse_parquet("x.parquet", head)
    with pytest.raises(ValueError, match=r"rename it to end in \.parquet"):
        refuse_parquet("x.txt", head)


def test_an_infinite_sts_score_is_refused(tmp_path, capsys):
    sts = tmp_path / "inf.tsv"
    sts.write_text("sentence1\tsentence2\tscore\nthe cat\tdog\tinf\nsat\tthe\t1\ncat\tsat\t2\n")
    err = _refused(capsys, ["evaluate", "--model", str(_model(tmp_path / "m")), "--tasks",
                            f"sts:{sts}"])
    assert "not a finite number" in err


def test_evaluate_refuses_a_task_or_model_given_twice(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, sts = _model(tmp_path / "m"), tmp_path / "s.tsv"
    sts.write_text("sentence1\tsentence2\tscore\nthe cat\tdog\t3\nsat\tthe\t1\ncat\tsat\t2\n")
    err = _refused(capsys, ["evaluate", "--model", "m", "--tasks", "sts:s.tsv", "sts:./s.tsv"])
    assert "names sts:s.tsv twice" in err
    err = _refused(capsys, ["evaluate", "--model", "m", "--model", f"{model}/", "--tasks",
                            "sts:s.tsv"])
    assert "--model names m twice" in err
