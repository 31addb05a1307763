"""The bulk encoder on real Ray: formats, compression, counts, atomic replacement, S3."""

import gzip
import json
import lzma
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swe import StaticModel
from swe.bulk import encode_files

pytestmark = pytest.mark.usefixtures("ray_session")


@pytest.fixture(scope="module")
def sentences(data_dir):
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.01.txt.xz", "rt") as f:
        return [next(f).rstrip("\n") for _ in range(3000)]


@pytest.fixture(scope="module")
def model_path(glove, tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "glove"
    glove.save(path)
    return str(path)


@pytest.fixture(scope="module")
def model(model_path):
    return StaticModel.load(model_path)


def _read(output, fs=None):
    return pq.read_table(output, filesystem=fs).to_pandas()


def _matrix(df):
    return np.stack(df["embedding"].to_numpy()).astype(np.float32)


def test_text_gz_with_empty_and_invalid_lines(tmp_path, sentences, model, model_path):
    lines = [s.encode() for s in sentences[:1000]]
    lines[10] = b""
    lines[11] = b"   "
    lines[12] = b"caf\xe9 au lait"  # latin-1, not UTF-8
    src = tmp_path / "in.txt.gz"
    src.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    summary = encode_files(model_path, [str(src)], str(tmp_path / "out"))
    assert summary.rows == 1000 and summary.empty_texts == 2 and summary.invalid_utf8_rows == 1
    df = _read(tmp_path / "out").sort_values("row")
    assert df["row"].tolist() == list(range(1000))
    assert set(df["file"]) == {str(src)}
    texts = [ln.decode("utf-8", errors="replace") for ln in lines]
    np.testing.assert_allclose(_matrix(df), model.encode(texts), atol=1e-6)
    assert not _matrix(df)[10].any() and not _matrix(df)[11].any()
    assert json.loads((tmp_path / "out" / "_SUCCESS").read_text())["rows"] == 1000


def test_jsonl_xz_with_ids_nulls_and_float16(tmp_path, sentences, model, model_path):
    recs = [{"id": f"doc-{i}", "body": s} for i, s in enumerate(sentences[:500])]
    recs[3]["body"] = None
    src = tmp_path / "in.jsonl.xz"
    src.write_bytes(lzma.compress("\n".join(json.dumps(r) for r in recs).encode()))
    summary = encode_files(model_path, [str(src)], str(tmp_path / "out"), text_column="body",
                           id_column="id", dtype="float16")
    assert summary.rows == 500 and summary.null_texts == 1
    table = pq.read_table(tmp_path / "out")
    assert table.schema.field("embedding").type == pa.list_(pa.float16(), 50)
    df = table.to_pandas().set_index("id").loc[[r["id"] for r in recs]]
    expect = model.encode([r["body"] for r in recs])
    np.testing.assert_allclose(_matrix(df), expect, atol=2e-3)
    assert not _matrix(df)[3].any()


def test_parquet_glob_row_groups_and_rerun_replaces(tmp_path, sentences, model, model_path):
    src = tmp_path / "pq"
    src.mkdir()
    for k in range(3):
        part = sentences[k * 700 : (k + 1) * 700]
        pq.write_table(pa.table({"text": part, "n": list(range(len(part)))}),
                       src / f"part-{k}.parquet", row_group_size=256, compression="zstd")
    out = tmp_path / "out"
    encode_files(model_path, [str(src / "*.parquet")], str(out))
    (out / "stale-part.parquet").write_bytes(b"left over from an older run")
    summary = encode_files(model_path, [str(src)], str(out))
    assert summary.rows == 2100 and summary.files == 3
    assert not (out / "stale-part.parquet").exists()
    assert sorted(os.listdir(out)) == sorted([*summary.output_files, "_SUCCESS"])
    assert not [p for p in os.listdir(tmp_path) if ".staging-" in p or ".old-" in p]
    df = _read(out)
    for k in range(3):
        part = df[df["file"] == str(src / f"part-{k}.parquet")].sort_values("row")
        assert part["row"].tolist() == list(range(700))
        np.testing.assert_allclose(_matrix(part),
                                   model.encode(sentences[k * 700 : (k + 1) * 700]), atol=1e-6)


def test_s3_in_and_out(s3, sentences, model, model_path):
    from swe import storage

    data = ("\n".join(sentences[:800]) + "\n").encode()
    storage.write_bytes(f"{s3}/bulk-corpus/a.txt.zst", __import__("zstandard").compress(data))
    storage.write_bytes(f"{s3}/bulk-corpus/b.txt", data)
    summary = encode_files(model_path, [f"{s3}/bulk-corpus/*"], f"{s3}/emb")
    assert summary.rows == 1600
    fs, path = storage.filesystem(f"{s3}/emb")
    assert fs.exists(f"{path}/_SUCCESS")
    with fs.open(f"{path}/{summary.output_files[0]}", "rb") as f:
        first = pq.read_table(f)
    df = pa.concat_tables(
        [first] + [pq.read_table(fs.open(f"{path}/{p}", "rb")) for p in summary.output_files[1:]]
    ).to_pandas()
    assert len(df) == 1600
    b = df[df["file"] == f"{s3}/bulk-corpus/b.txt"].sort_values("row")
    np.testing.assert_allclose(_matrix(b), model.encode(sentences[:800]), atol=1e-6)


def test_cli(tmp_path, sentences, model_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "encode_cli", os.path.join(os.path.dirname(__file__), "..", "pipelines", "encode.py"))
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sentences[:50]))  # no trailing newline: still 50 rows
    assert cli.main(["--model", model_path, "--input", str(src), "--output",
                     str(tmp_path / "o")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"] == 50
    assert cli.main(["--model", model_path, "--input", str(tmp_path / "missing.txt"),
                     "--output", str(tmp_path / "o2")]) == 2
    assert "input not found" in capsys.readouterr().err


def test_errors_are_clear_and_leave_output_alone(tmp_path, model_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.parquet").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="input not found"):
        encode_files(model_path, [str(tmp_path / "nope.txt")], str(out))
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="--format"):
        encode_files(model_path, [str(tmp_path / "data.csv")], str(out))
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
    with pytest.raises(ValueError, match="no column 'text'"):
        encode_files(model_path, [str(tmp_path / "t.parquet")], str(out))
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": broken\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not valid JSON"):
        encode_files(model_path, [str(tmp_path / "bad.jsonl")], str(out))
    with pytest.raises(FileNotFoundError, match="no swe model"):
        encode_files(str(tmp_path), [str(tmp_path / "t.parquet")], str(out))
    assert os.listdir(out) == ["keep.parquet"]
    assert not [p for p in os.listdir(tmp_path) if ".staging-" in p]
