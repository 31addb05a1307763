"""The eighth hostile round (issue 42): metrics printed where they are undefined, a finetune dev
share of no row, sentence vectors lost to float32 overflow, report files written into pipes, object
stores and other swe folders, ``swe encode --overwrite`` over a model, a build or a store, binary
data blamed on line endings, object-store errors as tracebacks and Ray's "Unhandled error" noise.
Each fix has a test that fails on the code before it; the guards beside them check what must not
change."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swe.cli import main
from swe.commands import failed
from swe.model import StaticModel

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["the", "of", "in", "and", "cat", "dog", "sat", "ran"]


def _model(path: Path, scale: float = 1.0) -> Path:
    vectors = np.random.default_rng(0).standard_normal((len(WORDS), 8)).astype(np.float32)
    StaticModel.from_vectors(WORDS, vectors * scale).save(str(path))
    return path


def _refused(capsys, argv: list[str], status: int = 2) -> str:
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def _pairs(path: Path, src: list[str], tgt: list[str]) -> Path:
    path.mkdir()
    pq.write_table(pa.table({"src": pa.array(src, pa.string()), "tgt": pa.array(tgt, pa.string())}),
                   path / "a.parquet")
    return path


# -- metrics that are undefined on their data -----------------------------------------------

@pytest.mark.parametrize("src, tgt, says", [
    ([], [], "no pairs"),
    (["the cat"], ["the dog"], "fewer than 2 candidates"),
    (["!!", "??", "--"], ["the cat", "a dog", "sat"], "same vector"),
    (["the cat"] * 4, ["the dog"] * 4, "same vector")])
def test_pair_retrieval_where_it_is_undefined_is_one_line(tmp_path, capsys, src, tgt, says):
    model, pairs = _model(tmp_path / "m"), _pairs(tmp_path / "p", src, tgt)
    report = tmp_path / "r.json"
    err = _refused(capsys, ["evaluate", "--model", str(model), "--tasks", f"pairs:{pairs}",
                            "--json", str(report)])
    assert says in err and "undefined" in err and not report.exists()


def test_pair_retrieval_with_distinct_vectors_still_scores(tmp_path, capsys):
    model = _model(tmp_path / "m")
    pairs = _pairs(tmp_path / "p", ["the cat", "a dog ran", "sat in"], ["cat", "dog ran", "in"])
    report = tmp_path / "r.json"
    assert main(["evaluate", "--model", str(model), "--tasks", f"pairs:{pairs}", "--json",
                 str(report)]) == 0
    scores = json.loads(report.read_text())
    assert "NaN" not in report.read_text() and scores, scores


def test_sts_on_predictions_equal_but_for_rounding_is_undefined(tmp_path, capsys):
    model = _model(tmp_path / "m")
    sts = tmp_path / "same.tsv"  # each sentence with itself: every cosine is 1 up to rounding
    sts.write_text("sentence1\tsentence2\tscore\nthe\tthe\t1.0\nof\tof\t2.0\nin\tin\t3.0\n"
                   "the cat sat\tthe cat sat\t4.0\n")
    err = _refused(capsys, ["evaluate", "--model", str(model), "--tasks", f"sts:{sts}"])
    assert "spearman is undefined" in err


@pytest.mark.usefixtures("ray_session")
def test_a_dev_share_that_holds_no_row_is_refused_before_training(tmp_path):
    from swe.finetune.job import finetune

    data = tmp_path / "small.csv"
    data.write_text("text,label\nthe of,a\nin and,b\nthe cat,a\nsat ran,b\n")
    with pytest.raises(ValueError, match=r"--dev-share 0.1 of the 4 rows .* holds no row"):
        finetune(str(_model(tmp_path / "m")), str(data), str(tmp_path / "out"))
    assert not (tmp_path / "out" / "work" / "runs").exists()  # refused before Ray Train


# -- sentence vectors and float32's range ----------------------------------------------------

@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e19, 1e25])
def test_large_or_tiny_finite_vectors_give_unit_sentence_vectors(tmp_path, scale):
    plain = StaticModel.load(str(_model(tmp_path / "plain")))
    scaled = StaticModel.load(str(_model(tmp_path / "scaled", scale)))
    texts = ["the", "the cat sat in the dog"]
    got = scaled.encode(texts)
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    assert np.allclose(got, plain.encode(texts), atol=1e-5)


def test_a_matrix_whose_sums_would_overflow_is_refused():
    with pytest.raises(ValueError, match=r"'of' \(row 1\) holds a value above 1e\+30"):
        StaticModel.from_vectors(["the", "of"], np.array([[1, 0], [0, 1e31]], np.float32))


# -- model paths that are not models ---------------------------------------------------------

def test_a_missing_model_path_is_not_called_an_interrupted_save(tmp_path, capsys):
    err = _refused(capsys, ["info", str(tmp_path / "nosuch" / "deeper")])
    assert "no such file or folder" in err and "interrupted" not in err


def test_a_store_or_an_encode_output_given_as_a_model_is_named(tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    (store / "_SWE_STORE.json").write_text('{"format": "swe-teacher-store"}')
    assert "is a teacher-output store, not a model" in _refused(capsys, ["info", str(store)])
    out = tmp_path / "enc"
    out.mkdir()
    (out / "_manifest.json").write_text('{"format": "swe-encode", "parts": []}')
    assert "is a swe encode output, not a model" in _refused(capsys, ["info", str(out)])
    plain = tmp_path / "plain"  # an existing folder without config.json: the old hint stays
    plain.mkdir()
    assert "was the save interrupted" in _refused(capsys, ["info", str(plain)])


# -- report files ------------------------------------------------------------------------------

def _sts(path: Path) -> Path:
    path.write_text("sentence1\tsentence2\tscore\nthe cat\tthe dog\t1.0\nsat in\tran\t2.0\n"
                    "the of\tcat sat\t3.0\n")
    return path


@pytest.mark.parametrize("flag", ["--json", "--markdown"])
def test_evaluate_refuses_a_pipe_or_socket_report_before_any_work(tmp_path, capsys, flag):
    model, sts = _model(tmp_path / "m"), _sts(tmp_path / "s.tsv")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it to write would block for ever
    err = _refused(capsys, ["evaluate", "--model", str(model), "--tasks", f"sts:{sts}", flag,
                            str(fifo)])
    assert "not a regular file" in err and "|" not in capsys.readouterr().out
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        err = _refused(capsys, ["evaluate", "--model", str(model), "--tasks", f"sts:{sts}",
                                flag, str(tmp_path / "sock")])
    assert "not a regular file" in err


def test_evaluate_refuses_an_object_store_report(tmp_path, capsys, monkeypatch):
    model, sts = _model(tmp_path / "m"), _sts(tmp_path / "s.tsv")
    monkeypatch.chdir(tmp_path)
    err = _refused(capsys, ["evaluate", "--model", str(model), "--tasks", f"sts:{sts}",
                            "--json", "s3://bucket/r.json"])
    assert "writes local files only" in err and not (tmp_path / "s3:").exists()


@pytest.mark.parametrize("inside", ["model", "encode output", "store"])
def test_evaluate_never_writes_into_another_swe_folder(tmp_path, capsys, inside):
    other, sts = _model(tmp_path / "other"), _sts(tmp_path / "s.tsv")
    if inside == "encode output":
        other = tmp_path / "enc"
        other.mkdir()
        (other / "_manifest.json").write_text('{"format": "swe-encode"}')
    elif inside == "store":
        other = tmp_path / "store"
        other.mkdir()
        (other / "_SWE_STORE.json").write_text('{"format": "swe-teacher-store"}')
    before = {p: p.read_bytes() for p in other.iterdir()}
    target = next(iter(before))
    err = _refused(capsys, ["evaluate", "--model", str(_model(tmp_path / "m")), "--tasks",
                            f"sts:{sts}", "--json", str(target)])
    assert f"lies in the {'saved model' if inside == 'model' else ''}" in err or inside in err
    assert {p: p.read_bytes() for p in other.iterdir()} == before


# -- swe encode --overwrite ------------------------------------------------------------------

@pytest.mark.parametrize("target", ["model", "build", "store", "folder holding a build",
                                    "model three levels down"])
def test_encode_overwrite_never_replaces_a_model_build_or_store(tmp_path, capsys, target):
    model = _model(tmp_path / "m")
    (tmp_path / "in.txt").write_text("the cat\n")
    out = tmp_path / "target"
    if target == "model":
        _model(out)
    elif target == "model three levels down":  # round 9: a walk, not one level
        (out / "a" / "b").mkdir(parents=True)
        (out / "notes.txt").write_text("mine")
        _model(out / "a" / "b" / "m")
    elif target == "store":
        out.mkdir()
        (out / "_SWE_STORE.json").write_text('{"format": "swe-teacher-store"}')
        (out / "ns-1").mkdir()
    else:
        build = out / "en" if target == "folder holding a build" else out
        (build / "work" / "corpus").mkdir(parents=True)
        _model(build / "model")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    err = _refused(capsys, ["encode", "--model", str(model), "--input", str(tmp_path / "in.txt"),
                            "--output", str(out), "--overwrite"])
    assert "never replaces one, even with --overwrite" in err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_encode_overwrite_still_replaces_a_plain_folder(tmp_path):
    model = _model(tmp_path / "m")
    (tmp_path / "in.txt").write_text("the cat\n")
    out = tmp_path / "plain"
    out.mkdir()
    (out / "notes.txt").write_text("old")
    from swe.bulk.layout import check_target

    check_target(str(out), str(model), [str(tmp_path / "in.txt")], [], overwrite=True)
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        check_target(str(out), str(model), [str(tmp_path / "in.txt")], [], overwrite=False)


# -- not text ----------------------------------------------------------------------------------

def test_binary_data_in_a_text_input_is_named_as_such(tmp_path, capsys):
    junk = tmp_path / "junk.txt"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, np.uint8).tobytes())
    err = _refused(capsys, ["encode", "--model", str(_model(tmp_path / "m")), "--input", str(junk),
                            "--output", str(tmp_path / "out")])
    assert "is not UTF-8 text" in err and "carriage return" not in err
    assert not (tmp_path / "out").exists()


def test_latin1_text_is_not_called_binary():
    from swe.inputs import refuse_binary

    refuse_binary("x.txt", "café crème brûlée à la française, très bonne".encode("latin-1"))
    refuse_binary("x.txt", "Grüße aus Köln\tund München\r\n".encode())


# -- object stores -----------------------------------------------------------------------------

def test_an_object_store_url_without_a_bucket_is_named(tmp_path, capsys):
    err = _refused(capsys, ["export", "s3://", "--to", "model2vec", str(tmp_path / "x")])
    assert "s3:// names no bucket" in err
    err = _refused(capsys, ["evaluate", "--model", "gem:s3:///m", "--tasks", "stsb-dev"])
    assert "names no bucket" in err


def test_an_sts_url_is_refused_not_read_as_a_local_path(tmp_path, capsys):
    err = _refused(capsys, ["evaluate", "--model", str(_model(tmp_path / "m")), "--tasks",
                            "sts:s3://bucket/x.tsv"])
    assert "local files only" in err and "s3:/bucket" not in err


def test_missing_credentials_inside_a_ray_task_are_one_line(capsys):
    from botocore.exceptions import NoCredentialsError
    from ray.exceptions import RayTaskError

    error = RayTaskError("_inspect", "Traceback ...", NoCredentialsError()).as_instanceof_cause()
    assert failed(error, ["s3://bucket/d.csv"]) == 1
    assert "no credentials for the object store (bucket bucket)" in capsys.readouterr().err


def test_evaluate_without_credentials_is_one_line(tmp_path, capsys, monkeypatch):
    import s3fs

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    err = _refused(capsys, ["evaluate", "--model", "s3://bucket/m", "--tasks",
                            f"sts:{_sts(tmp_path / 's.tsv')}"], status=1)
    assert "no credentials for the object store (bucket bucket)" in err
    s3fs.S3FileSystem.clear_instance_cache()


# -- Ray's own noise -----------------------------------------------------------------------------

@pytest.mark.usefixtures("ray_session")
def test_several_failed_tasks_give_one_line_not_rays_unhandled_errors(tmp_path):
    from procs import joined_env

    _model(tmp_path / "m")
    (tmp_path / "in").mkdir()
    for i in range(5):
        pq.write_table(pa.table({"body": ["the cat", "a dog"]}), tmp_path / "in" / f"p{i}.parquet")
    argv = ["encode", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "in"),
            "--output", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, "-m", "swe.cli", *argv],
                          capture_output=True, text=True, env=joined_env(), cwd=ROOT, timeout=180)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "no column 'text'" in done.stderr and "Unhandled error" not in done.stderr, \
        done.stderr[-3000:]
    assert not (tmp_path / "out").exists()
    shutil.rmtree(tmp_path / "in")
