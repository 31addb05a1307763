"""The bulk encoder on real Ray: formats, compression, counts, dtypes, resume, S3, bad input."""

import gzip
import json
import logging
import lzma
import os
import socket

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swe import StaticModel
from swe.bulk import EncodeOptions, encode_files, read_manifest, read_output

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]


@pytest.fixture(scope="module")
def sentences(data_dir):
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.01.txt.xz", "rt") as f:
        return [next(f).rstrip("\n") for _ in range(3000)]


def small_glove(glove, words: int = 20_000) -> StaticModel:
    """GloVe's 20k most frequent words (with the OOV rule): loads in a fraction of the full
    400k-word model's time, in the driver and in every encoder actor."""
    return StaticModel.from_vectors(glove.words[:words], glove.vectors[:words], lowercase=True,
                                    tokenizer=glove.tokenizer)


@pytest.fixture(scope="module")
def model_path(glove, tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "glove"
    small_glove(glove).save(path)
    return str(path)


@pytest.fixture(scope="module")
def model(model_path):
    return StaticModel.load(model_path)


def _read(output):
    return read_output(str(output)).to_table().to_pandas()


def _matrix(df):
    return np.stack(df["embedding"].to_numpy()).astype(np.float32)


def test_text_gz_with_empty_and_invalid_lines(tmp_path, sentences, model, model_path):
    lines = [s.encode() for s in sentences[:1000]]
    lines[10] = b""
    lines[11] = b"   "
    lines[12] = b"caf\xe9 au lait"  # latin-1, not UTF-8
    src = tmp_path / "in.txt.gz"
    src.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    summary = encode_files(model_path, [str(src)], str(tmp_path / "out"),
                           options=EncodeOptions(part_rows=300))
    assert summary.rows == 1000 and summary.empty_texts == 2 and summary.invalid_utf8_rows == 1
    assert summary.parts == 4
    df = _read(tmp_path / "out").sort_values("row")
    assert df["row"].tolist() == list(range(1000))
    assert set(df["file"]) == {str(src)}
    texts = [ln.decode("utf-8", errors="replace") for ln in lines]
    np.testing.assert_allclose(_matrix(df), model.encode(texts), atol=1e-6)
    assert not _matrix(df)[10].any() and not _matrix(df)[11].any()
    manifest = read_manifest(str(tmp_path / "out"))
    assert manifest["rows"] == 1000 and [p["rows"] for p in manifest["parts"]] == [300] * 3 + [100]
    assert [p["path"].rsplit("/", 1)[1] for p in manifest["parts"]] == [
        "0-0.parquet", "0-1.parquet", "0-2.parquet", "0-3.parquet"]


def test_tokens_write_each_rows_units_and_vectors(tmp_path, sentences, model, model_path):
    """``--tokens``: one row per input row (empty and null texts included); each row's units
    and vectors are ``encode_tokens``' (float16, first 32 dims); the embedding is unchanged."""
    texts = [*sentences[:700], "", "!!!"]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": [*texts, None]}), src)
    opts = EncodeOptions(part_rows=250, tokens=True, dtype="float16", dim=32)
    assert encode_files(model_path, [str(src)], str(tmp_path / "out"), options=opts).rows == 703
    df = _read(tmp_path / "out").sort_values("row")
    assert df["row"].tolist() == list(range(703))
    for i, want in enumerate(model.encode_tokens([*texts, None])):
        assert list(df["tokens"].iloc[i]) == want.units
        got = np.array([np.asarray(v) for v in df["token_vectors"].iloc[i]]).reshape(-1, 32)
        np.testing.assert_allclose(got, want.vectors[:, :32].astype(np.float16))
    plain = EncodeOptions(part_rows=250, dtype="float16", dim=32)
    encode_files(model_path, [str(src)], str(tmp_path / "plain"), options=plain)
    plain_rows = _read(tmp_path / "plain").sort_values("row")
    np.testing.assert_array_equal(_matrix(df), _matrix(plain_rows))
    with pytest.raises(ValueError, match="--tokens writes float32 or float16"):
        encode_files(model_path, [str(src)], str(tmp_path / "int8"),
                     options=EncodeOptions(tokens=True, dtype="int8"))
    with pytest.raises(ValueError, match="'tokens' would replace"):
        encode_files(model_path, [str(src)], str(tmp_path / "clash"),
                     options=EncodeOptions(tokens=True, keep_columns=("tokens",)))


def test_jsonl_xz_ids_nulls_kept_columns_float16(tmp_path, sentences, model, model_path):
    recs = [{"id": f"doc-{i}", "body": s, "lang": "en", "n": i}
            for i, s in enumerate(sentences[:500])]
    recs[3]["body"] = None
    src = tmp_path / "in.jsonl.xz"
    src.write_bytes(lzma.compress("\n".join(json.dumps(r) for r in recs).encode()))
    opts = EncodeOptions(text_column="body", id_column="id", dtype="float16",
                         keep_columns=("lang", "n"), part_rows=128)
    summary = encode_files(model_path, [str(src)], str(tmp_path / "out"), options=opts)
    assert summary.rows == 500 and summary.null_texts == 1
    table = read_output(str(tmp_path / "out")).to_table()
    assert table.schema.names == ["id", "lang", "n", "embedding"]
    assert table.schema.field("embedding").type == pa.list_(pa.float16(), 50)
    df = table.to_pandas().set_index("id").loc[[r["id"] for r in recs]]
    assert df["n"].tolist() == list(range(500)) and set(df["lang"]) == {"en"}
    np.testing.assert_allclose(_matrix(df), model.encode([r["body"] for r in recs]), atol=2e-3)
    assert not _matrix(df)[3].any()


def test_parquet_row_groups_resume_and_changed_option(tmp_path, sentences, model, model_path,
                                                      caplog):
    caplog.set_level(logging.INFO, logger="swe.bulk")
    src = tmp_path / "pq"
    src.mkdir()
    for k in range(3):
        part = sentences[k * 700 : (k + 1) * 700]
        pq.write_table(pa.table({"text": part, "n": list(range(len(part)))}),
                       src / f"part-{k}.parquet", row_group_size=256, compression="zstd")
    out = tmp_path / "out"
    opts = EncodeOptions(part_rows=100)  # row groups of 256 rows: parts of 100, 100, 56
    first = encode_files(model_path, [str(src / "*.parquet")], str(out), options=opts)
    assert first.rows == 2100 and first.files == 3 and first.parts == 3 * 8  # 256+256+188
    assert first.nodes == 1
    again = encode_files(model_path, [str(src / "*.parquet")], str(out), options=opts)
    assert again.run == first.run and again.resumed_parts == again.parts == first.parts
    assert "resuming run" in caplog.text
    changed = encode_files(model_path, [str(src)], str(out),
                           options=EncodeOptions(part_rows=100, dtype="float16"))
    assert changed.run != first.run and changed.resumed_parts == 0
    assert "--dtype" in caplog.text and "starting a new run" in caplog.text
    assert "--keep-columns" not in caplog.text  # () then, () now (a list in the manifest)
    assert sorted(os.listdir(out)) == ["_manifest.json", f"v-{changed.run}"]
    df = _read(out)
    for k in range(3):
        part = df[df["file"] == str(src / f"part-{k}.parquet")].sort_values("row")
        assert part["row"].tolist() == list(range(700))
        np.testing.assert_allclose(_matrix(part),
                                   model.encode(sentences[k * 700 : (k + 1) * 700]), atol=2e-3)


def run_cli(args: list[str]) -> int:
    """``swe encode``'s ``main`` (what pipelines/encode.py runs) as the user runs it, in this
    process."""
    from swe.commands.encode import main

    return main(args)


def test_cli_int8_and_dim(tmp_path, sentences, model, model_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sentences[:200]))  # no trailing newline: still 200 rows
    out = str(tmp_path / "o")
    assert run_cli(["--model", model_path, "--input", str(src), "--output", out, "--dtype",
                    "int8", "--dim", "16", "--actors", "1", "--max-actors", "2"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"] == 200
    got = _matrix(_read(out).sort_values("row")) * read_manifest(out)["scale"]
    want = model.encode(sentences[:200])[:, :16]
    want /= np.maximum(np.linalg.norm(want, axis=1, keepdims=True), 1e-12)
    assert got.shape == (200, 16) and np.abs(got - want).max() <= 0.5 / 127 + 1e-6


def test_bad_input_is_one_line_and_leaves_output_alone(tmp_path, sentences, model_path, capsys):
    """Each bad input: exit 2 with one line naming the file; the previous output unchanged."""
    out = str(tmp_path / "out")
    good = tmp_path / "good.txt"
    good.write_text("\n".join(sentences[:100]) + "\n")
    encode_files(model_path, [str(good)], out)
    before = (tmp_path / "out" / "_manifest.json").read_bytes()
    (tmp_path / "trunc.txt.xz").write_bytes(lzma.compress("\n".join(sentences).encode())[:-500])
    (tmp_path / "junk.txt.gz").write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(300))
    (tmp_path / "data.csv").write_text("a,b\n")
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
    (tmp_path / "wrong.jsonl").write_text('{"body": "x"}\n')
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": broken\n')
    cases = {"trunc.txt.xz": "truncated or corrupt", "junk.txt.gz": "truncated or corrupt",
             "data.csv": "--format", "t.parquet": "no column 'text'",
             "wrong.jsonl": "wrong.jsonl:1: no 'text' field",
             "bad.jsonl": "bad.jsonl:2: not valid JSON",
             "missing.txt": "input not found"}
    for name, message in cases.items():
        assert run_cli(["--model", model_path, "--input", str(tmp_path / name),
                         "--output", out]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and message in err[-1], (name, err[-3:])
        assert not any("Traceback" in line for line in err), name
        assert name == "missing.txt" or name in err[-1]
    assert (tmp_path / "out" / "_manifest.json").read_bytes() == before
    assert len(_read(out)) == 100


def test_empty_file_gives_empty_output(tmp_path, model_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "empty.jsonl.gz").write_bytes(gzip.compress(b""))
    summary = encode_files(model_path, [str(tmp_path / "empty.txt"),
                                        str(tmp_path / "empty.jsonl.gz")], str(tmp_path / "out"))
    assert summary.rows == 0 and summary.parts == 0
    table = read_output(str(tmp_path / "out")).to_table()
    assert table.num_rows == 0 and table.schema.names == ["file", "row", "embedding"]


def test_a_second_encode_into_a_held_output_stops_naming_the_holder(tmp_path, sentences,
                                                                     model_path, capsys):
    """Issue 18: an encode takes the output's lease; a second one into the same output stops at
    once (exit 2, one line naming the holder) and the first's output is untouched; the lease is
    given back when the encode ends, and a killed encode's lease never blocks a resume."""
    from swe.lease import LEASE_FILE, Lease

    out = tmp_path / "out"
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sentences[:200]) + "\n")
    encode_files(model_path, [str(src)], str(out))
    assert not (out / LEASE_FILE).exists() and not list(out.glob("*.lock"))
    before = (out / "_manifest.json").read_bytes()
    with Lease(str(out), purpose="encode elsewhere"):
        code = run_cli(["--model", model_path, "--input", str(src), "--output", str(out),
                        "--dim", "8"])
    err = capsys.readouterr().err.strip().splitlines()
    # the environment, not the input: another run holds the output (swe.commands)
    assert code == 1 and err[-1].startswith(f"error: {out} is in use by"), err[-3:]
    assert "(encode elsewhere" in err[-1] and not any("Traceback" in ln for ln in err)
    assert (out / "_manifest.json").read_bytes() == before
    # A lease left by a process that is gone (a killed encode) is taken over at once.
    (out / LEASE_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": 2**22 + 7,
                                              "heartbeat": 1e12, "token": "dead"}))
    summary = encode_files(model_path, [str(src)], str(out), options=EncodeOptions(dim=8))
    assert summary.rows == 200 and summary.dim == 8 and not (out / LEASE_FILE).exists()


def test_a_run_keeps_its_name_while_tokens_and_predict_are_off():
    """Runs were named before ``tokens`` and ``predict`` existed: off, they are not hashed (a
    rerun of an earlier command resumes its run)."""
    from dataclasses import asdict

    before = {k: v for k, v in asdict(EncodeOptions()).items() if k not in ("tokens", "predict")}
    assert EncodeOptions().hashed() == before
    assert EncodeOptions(tokens=True).hashed() == {**before, "tokens": True}
    assert EncodeOptions(predict=True).hashed() == {**before, "predict": True}
