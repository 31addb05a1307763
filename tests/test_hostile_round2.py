"""Hostile input, second round (issue 42): what used to lose data (a prune filter that matched
every namespace), be silently wrong (a truncated zstd input read as a short one, an input read
twice, an empty --output, a column lost to the output's own, a dtype taken from the config's
claim), hang (named pipes, a RAY_ADDRESS where nothing listens) or end in a traceback; each now
ends in one clear line or a correct result."""

from __future__ import annotations

from pathlib import Path

import pytest

from swe.build.teacher.store import descriptor, list_store, open_namespace
from swe.cli import main


@pytest.fixture
def store(tmp_path) -> str:
    url = str(tmp_path / "store")
    open_namespace(url, descriptor("c" * 64, "onnx", 512, 384))
    open_namespace(url, descriptor("d" * 64, "torch", 512, 384))
    return url


@pytest.mark.parametrize("args, needle", [
    (["--teacher", ""], "an empty value would match every namespace"),
    (["--teacher", "A B"], "give hex digits of its sha256"),
    (["--teacher", "not-hex!"], "give hex digits of its sha256"),
    (["--older-than-days", "nan"], "must be a finite number of days, at least"),
    (["--older-than-days", "-1"], "must be a finite number of days, at least"),
    (["--older-than-days", "0"], "must be a finite number of days, at least"),
    (["--older-than-days", "inf"], "must be a finite number of days, at least"),
    (["--runtime", ""], "is not a runtime"),
    (["--runtime", "tensorrt"], "is not a runtime"),
    ([], "prune needs --teacher, --runtime or --older-than-days"),
])
def test_a_prune_filter_that_could_match_everything_is_refused(store, args, needle, capsys):
    assert main(["store", "prune", store, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1, err
    assert len(list_store(store)) == 2  # nothing removed


def test_dry_run_lists_what_prune_would_remove_and_removes_nothing(store, capsys):
    assert main(["store", "prune", store, "--runtime", "onnx", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would remove ns-") and "onnx" in out and "torch" not in out
    assert len(list_store(store)) == 2
    assert main(["store", "prune", store, "--teacher", "cccc"]) == 0
    assert capsys.readouterr().out.startswith("removed ns-")
    assert [ns["runtime"] for ns in list_store(store)] == ["torch"]


@pytest.mark.parametrize("damage", [b"{not json", b"[]", b'{"teacher_sha256": "x"}', b"\xff\xfe"])
def test_a_damaged_namespace_file_is_one_line_naming_it(store, damage, capsys):
    from pathlib import Path

    files = sorted(Path(store).glob("ns-*/_NAMESPACE.json"))
    files[0].write_bytes(damage)
    assert main(["store", "list", store]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(files[0]) in err and err.count("\n") == 1, err
    assert "Traceback" not in err


# -- paths: empty, NUL, named twice, not a regular file, the root ----------------------------

ROOT = Path(__file__).resolve().parents[1]
QUICK = str(ROOT / "pipelines/configs/quickstart.toml")


def _corpus(tmp_path: Path, name: str = "en.txt", text: str = "A man plays a guitar.\n") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _config_errors(overrides: list[str], output: str | None = "out",
                   tmp_path: Path | None = None) -> str:
    from swe.build import ConfigError, load_config

    if output is not None and tmp_path is not None:
        output = str(tmp_path / output)
    with pytest.raises(ConfigError) as e:
        load_config(QUICK, overrides, output=output)
    return str(e.value)


def test_an_empty_output_is_refused_not_replaced_by_the_config_s_own(tmp_path):
    corpus = _corpus(tmp_path)
    errors = _config_errors([f"corpus.en.paths=['{corpus}']"], output="")
    assert "no output: pass --output PATH" in errors


def test_a_nul_byte_or_an_empty_corpus_path_is_one_line(tmp_path):
    for bad in ('"a\\u0000b.txt"', "''"):  # TOML: a NUL byte, an empty string
        errors = _config_errors([f"corpus.en.paths=[{bad}]"], tmp_path=tmp_path)
        assert "is not a path (empty, or holding a NUL byte)" in errors, errors


def test_refine_storage_gets_the_checks_every_output_path_gets(tmp_path):
    corpus = _corpus(tmp_path)
    base = [f"corpus.en.paths=['{corpus}']", "refine.objective='distill'"]
    for bad, needle in (("'/'", "the filesystem root"),
                        (f"'{tmp_path / 'out'}'", "overlaps the output"),
                        ('"a\\u0000b"', "NUL byte")):
        errors = _config_errors([*base, f"refine.storage={bad}"], tmp_path=tmp_path)
        assert "refine.storage" in errors and needle in errors, (bad, errors)


def test_a_named_pipe_is_refused_before_anything_reads_it(tmp_path):
    import os

    from swe.build import ConfigError, load_config

    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is a named pipe"):  # would block on open
        load_config(str(fifo), output=str(tmp_path / "out"))
    fifo_corpus = tmp_path / "en.txt"
    os.mkfifo(fifo_corpus)
    errors = _config_errors([f"corpus.en.paths=['{fifo_corpus}']"], tmp_path=tmp_path)
    assert "is a named pipe" in errors


def test_an_input_named_twice_is_read_once_with_a_warning(tmp_path, caplog):
    from swe.inputs import expand_inputs

    folder = tmp_path / "in"
    folder.mkdir()
    a, b = _corpus(folder, "a.txt"), _corpus(folder, "b.txt")
    assert expand_inputs([str(a), str(a)]) == [str(a)]
    assert expand_inputs([str(folder), str(b)]) == [str(a), str(b)]
    assert expand_inputs([str(a), str(tmp_path / "in" / ".." / "in" / "a.txt")]) == [str(a)]
    assert sum("named twice" in r.message for r in caplog.records) == 3


# -- compressed files cut short, or not what their name says ---------------------------------

def _broken_files(tmp_path: Path) -> dict[str, Path]:
    import bz2
    import gzip
    import lzma

    import zstandard

    text = "".join(f"Sentence number {i} is here.\n" for i in range(20_000)).encode()
    made = {"gz": gzip.compress(text)[:30], "xz": lzma.compress(text)[:40],
            "bz2": bz2.compress(text)[:40], "zst": zstandard.ZstdCompressor().compress(text)[:40],
            "gzip-named-xz": gzip.compress(text)}
    out = {}
    for kind, data in made.items():
        suffix = "xz" if kind == "gzip-named-xz" else kind
        out[kind] = tmp_path / f"{kind}.txt.{suffix}"
        out[kind].write_bytes(data)
    return out


def test_a_truncated_or_mislabelled_corpus_is_one_line_at_validation(tmp_path):
    for kind, path in _broken_files(tmp_path).items():
        errors = _config_errors([f"corpus.en.paths=['{path}']"], tmp_path=tmp_path)
        assert f"{path}: truncated or corrupt compressed file" in errors, (kind, errors)
        assert "Traceback" not in errors and "add text" not in errors, (kind, errors)


def test_a_truncated_zstd_stream_is_an_error_not_a_short_file(tmp_path):
    import zstandard

    from swe.bulk.read import count_rows
    from swe.inputs import iter_lines, open_input

    data = zstandard.ZstdCompressor().compress(b"a line\n" * 5000)
    (tmp_path / "whole.txt.zst").write_bytes(data + zstandard.ZstdCompressor().compress(b"x\n"))
    (tmp_path / "cut.txt.zst").write_bytes(data[:-9])
    with open_input(str(tmp_path / "whole.txt.zst")) as f:
        assert len(list(iter_lines(f))) == 5001  # two frames, both read
    with pytest.raises(ValueError, match=r"cut\.txt\.zst: cannot read it .*truncated or corrupt"):
        count_rows(str(tmp_path / "cut.txt.zst"), "text")


def test_cr_only_line_endings_are_lines():
    import io

    from swe.inputs import iter_lines

    data = b"one\rtwo\r\nthree\nfour\r"
    assert list(iter_lines(io.BytesIO(data), universal=True)) == [b"one", b"two", b"three",
                                                                  b"four"]
    assert list(iter_lines(io.BytesIO(data))) == [b"one\rtwo\r", b"three", b"four\r"]


def test_a_categorical_parquet_text_column_is_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe.build import load_config

    texts = pa.array(["A man plays a guitar.", "A woman reads.", "A man plays a guitar."])
    pq.write_table(pa.table({"text": texts.dictionary_encode()}), tmp_path / "c.parquet")
    cfg = load_config(QUICK, [f"corpus.en.paths=['{tmp_path / 'c.parquet'}']"],
                      output=str(tmp_path / "out"))
    assert cfg.corpus["en"].paths == [str(tmp_path / "c.parquet")]


# -- models, teachers and evaluation ------------------------------------------------------------

def test_swe_info_reads_the_matrix_not_the_config_s_claim(tmp_path, capsys):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from swe import StaticModel
    from swe.modelfiles import reseal

    StaticModel.from_vectors(["a", "b"], np.eye(2, 4, dtype=np.float32)).save(tmp_path / "m")
    tensors = load_file(tmp_path / "m" / "model.safetensors")
    tensors["embeddings"] = tensors["embeddings"].astype(np.float64)
    save_file(tensors, tmp_path / "m" / "model.safetensors")
    reseal(str(tmp_path / "m"))
    assert main(["info", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "the matrix is float64 but config.json records dtype 'float32'" in err, err


def test_a_teacher_that_is_not_a_folder_never_reaches_for_the_network(tmp_path, capsys,
                                                                       monkeypatch):
    from swe.commands.evaluate import main as evaluate

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert evaluate(["--model", "teacher:no-such-teacher", "--tasks", "stsb-dev"]) == 2
    err = capsys.readouterr().err
    assert "teacher not found: no-such-teacher is not a folder" in err, err
    assert "never downloads" in err and "Traceback" not in err


@pytest.mark.parametrize("args, needle", [
    (["--threads", "0"], "--threads 0: must be at least 1"),
    (["--speed", "-5"], "--speed -5: must be at least 0"),
    (["--json", "DIR"], "is a folder; name a file in it"),
    (["--markdown", ""], "is not a path"),
])
def test_evaluate_checks_its_numbers_and_report_paths_before_any_work(tmp_path, args, needle,
                                                                      capsys):
    from swe.commands.evaluate import main as evaluate

    args = [str(tmp_path) if a == "DIR" else a for a in args]
    assert evaluate(["--model", "glove-50d", "--tasks", "stsb-dev", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_a_ray_address_where_nothing_listens_fails_fast_naming_it():
    import socket
    import time

    from swe.raysetup import check_reachable

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"nothing answers at RAY_ADDRESS=127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}", timeout=2)
    assert time.monotonic() - start < 10
    with pytest.raises(ConnectionError, match="is not HOST:PORT"):
        check_reachable("no-port-here")


def test_keep_columns_never_lose_a_user_s_column_to_the_output_s_own(tmp_path, capsys):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe import StaticModel
    from swe.commands.encode import main as encode

    StaticModel.from_vectors(["a", "b"], np.eye(2, 4, dtype=np.float32)).save(tmp_path / "m")
    pq.write_table(pa.table({"text": ["a b"], "embedding": ["mine"], "row": ["r"]}),
                   tmp_path / "in.parquet")
    for keep in (["embedding"], ["row"]):
        assert encode(["--model", str(tmp_path / "m"), "--input", str(tmp_path / "in.parquet"),
                       "--output", str(tmp_path / "out"), "--keep-columns", *keep]) == 2
        err = capsys.readouterr().err
        assert f"the output's own column {keep[0]!r} would replace the input's" in err, err
    assert not (tmp_path / "out").exists()


def test_an_interrupt_is_one_line_saying_what_is_kept_and_how_to_resume(capsys):
    from swe.commands import failed

    assert failed(KeyboardInterrupt(), kept="the finished stages under out/work are kept") == 130
    err = capsys.readouterr().err
    assert err == ("error: interrupted; the finished stages under out/work are kept; rerun the "
                   "same command to resume\n")


@pytest.mark.parametrize("cpus", ["nan", "0", "-1", "inf"])
def test_encode_refuses_a_cpu_share_that_is_not_a_positive_number(tmp_path, capsys, cpus):
    import numpy as np

    from swe import StaticModel
    from swe.commands.encode import main as encode

    StaticModel.from_vectors(["a", "b"], np.eye(2, 4, dtype=np.float32)).save(tmp_path / "m")
    (tmp_path / "in.txt").write_text("a b\n")
    assert encode(["--model", str(tmp_path / "m"), "--input", str(tmp_path / "in.txt"),
                   "--output", str(tmp_path / "out"), "--cpus-per-actor", cpus]) == 2
    assert "--cpus-per-actor must be a number of at least 0.0001" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
