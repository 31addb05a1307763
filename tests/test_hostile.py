"""A hostile user's mistakes, each one a clear one-line error or a correct result: no hang, no
traceback, nothing changed outside the output. One test per case found by probing the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swe.build import build, load_config
from swe.cli import main as swe
from swe.model import StaticModel
from swe.modelfiles import ModelFileError, sealed
from swe.resources import Request, check_grantable

ROOT = Path(__file__).resolve().parent.parent
QUICK = str(ROOT / "pipelines/configs/quickstart.toml")
NODE = {"CPU": 2.0, "memory": 8 * 2**30}


def test_a_request_no_node_can_grant_is_refused_saying_what_the_nodes_have():
    check_grantable([Request("actors", "lower x", count=4, cpus=0.5)], [NODE])
    with pytest.raises(ValueError, match=r"actors: 4 CPUs asked, but the one node has 2 CPUs, "
                                         r"8\.0 GiB: lower x"):
        check_grantable([Request("actors", "lower x", cpus=4)], [NODE])
    with pytest.raises(ValueError, match="1 GPU asked, but the largest of 2 nodes has 2 CPUs, "
                                         "0 GPUs"):
        check_grantable([Request("actors", "lower y", gpus=1)], [NODE, NODE])
    # each fits a node, but not all of them together
    with pytest.raises(ValueError, match=r"3 × 1 CPUs asked, but the one node has 2 CPUs.*holds 2"):
        check_grantable([Request("workers", "lower z", count=3, cpus=1)], [NODE])
    check_grantable([Request("workers", "lower z", count=4, cpus=1)], [NODE, NODE])


def test_waiting_for_an_autoscaler_can_be_chosen(monkeypatch):
    monkeypatch.setenv("SWE_WAIT_FOR_RESOURCES", "1")
    check_grantable([Request("actors", "lower x", cpus=64)], [NODE])


@pytest.fixture
def tiny_model(tmp_path, minilm) -> Path:
    StaticModel.from_vectors(["a", "b"], np.eye(2, 4, dtype=np.float32),
                             tokenizer=minilm).save(tmp_path / "m")
    return tmp_path / "m"


def test_encoder_actors_larger_than_any_node_are_refused_not_waited_for(
        ray_session, tmp_path, tiny_model, capsys):
    from swe.commands.encode import main as encode

    (tmp_path / "in.txt").write_text("a b\n")
    status = encode(["--model", str(tiny_model), "--input", str(tmp_path / "in.txt"),
                     "--output", str(tmp_path / "out"), "--cpus-per-actor", "64"])
    err = capsys.readouterr().err
    assert status == 2 and "encoder actors: 64 CPUs asked" in err and "--cpus-per-actor" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("setting, named", [
    ("extraction.cpus_per_actor=64", "teacher actors: (2 × )?64 CPUs asked"),
    ("extraction.gpus_per_actor=1",
     "teacher actors: (2 × )?0.5 CPUs, 1 GPU asked, but the one node has 2 CPUs, 0 GPUs"),
    ("refine.workers=64", "refine's Ray Train workers: 64 × 1 CPUs")])
def test_build_actors_or_workers_no_node_can_grant_stop_before_the_first_stage(
        ray_session, tmp_path, setting, named):
    cfg = load_config(QUICK, [setting, "refine.objective=distill", "refine.batch_size=128"],
                      output=str(tmp_path / "out"))
    with pytest.raises(ValueError, match=named):
        build(cfg)
    assert not (tmp_path / "out" / "work" / "corpus").exists()



# -- a model folder is what its save wrote, config.json included ------------------------------


def _edit_config(folder: Path, **changes) -> None:
    conf = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None and key != "tokenizer":
            conf.pop(key, None)
        else:
            conf[key] = value
    (folder / "config.json").write_text(json.dumps(conf))


@pytest.mark.parametrize("changes", [
    {"dim": 999}, {"vocab_size": 10**12}, {"tokenizer": None}, {"lowercase": False},
    {"format_version": 1, "files": None, "config_sha256": None}])
def test_an_edited_config_json_refuses_to_load_whatever_version_it_claims(
        tiny_model, changes, capsys):
    if "files" in changes:  # the downgrade: no checksums, and two vocabulary lines swapped
        (tiny_model / "vocab.txt").write_text("b\na\n")
    _edit_config(tiny_model, **changes)
    with pytest.raises(ModelFileError, match=r"config\.json (was changed after the save|carries "
                                             r"no checksum of itself)"):
        StaticModel.load(tiny_model)
    assert swe(["info", str(tiny_model)]) == 2  # a corrupt model: a wrong input
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "swe reseal" in err


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_info_checks_the_files_it_reports(tiny_model, damage, capsys):
    matrix = tiny_model / "model.safetensors"
    if damage == "missing":
        matrix.unlink()
    else:
        matrix.write_bytes(matrix.read_bytes()[:-8])
    assert swe(["info", str(tiny_model)]) == 2  # a corrupt model: a wrong input
    assert "model.safetensors" in capsys.readouterr().err


def test_info_refuses_claims_the_matrix_contradicts(tiny_model, capsys):
    conf = json.loads((tiny_model / "config.json").read_text())
    conf.pop("config_sha256")
    (tiny_model / "config.json").write_text(json.dumps(sealed({**conf, "dim": 999})))
    assert swe(["info", str(tiny_model)]) == 2  # a corrupt model: a wrong input
    assert "dim = 999 but the model holds 4" in capsys.readouterr().err


def test_reseal_trusts_a_deliberate_edit(tiny_model, capsys):
    _edit_config(tiny_model, provenance={"note": "edited by hand"})
    assert swe(["info", str(tiny_model)]) == 2  # a corrupt model: a wrong input
    assert swe(["reseal", str(tiny_model)]) == 0
    assert StaticModel.load(tiny_model).provenance == {"note": "edited by hand"}
    assert swe(["reseal", str(tiny_model.parent / "nothing")]) == 2  # a wrong input
    assert "no such file or folder" in capsys.readouterr().err


def test_a_build_folder_given_as_the_model_points_to_its_model(tmp_path, tiny_model, capsys):
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    tiny_model.rename(build_dir / "model")
    with pytest.raises(FileNotFoundError, match=rf"{build_dir} is a build folder, not a model: "
                                                rf"its model is {build_dir}/model"):
        StaticModel.load(build_dir)


# -- bulk input: values that are not text -----------------------------------------------------


def test_non_string_json_texts_are_zero_vectors_counted_and_warned_about(
        ray_session, tmp_path, tiny_model, capsys):
    from swe.bulk import encode_files, read_output

    src = tmp_path / "in.jsonl"
    values = ["a b", 5, True, ["a", "b"], {"x": "y"}, None, "b"]
    src.write_text("\n".join(json.dumps({"id": i, "text": v}) for i, v in enumerate(values)))
    summary = encode_files(str(tiny_model), [str(src)], str(tmp_path / "out"))
    assert summary.rows == 7 and summary.non_text_values == 4 and summary.null_texts == 1
    err = capsys.readouterr().err
    assert "warning: 4 text values were not strings" in err and f"first is at {src}:2" in err
    vectors = read_output(str(tmp_path / "out")).to_table().column("embedding").to_pylist()
    norms = [float(np.linalg.norm(v)) for v in vectors]
    assert norms[0] > 0.99 and norms[6] > 0.99 and not any(norms[1:6])


def test_a_dim_larger_than_the_model_is_refused(ray_session, tmp_path, tiny_model, capsys):
    from swe.commands.encode import main as encode

    (tmp_path / "in.txt").write_text("a b\n")
    assert encode(["--model", str(tiny_model), "--input", str(tmp_path / "in.txt"),
                   "--output", str(tmp_path / "out"), "--dim", "1000"]) == 2
    assert "--dim 1000 exceeds the 4 dimensions" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_progress_lines_give_the_rate_since_the_start(ray_session, monkeypatch, capsys):
    import ray

    from swe.bulk import job

    clock = iter([5.0, 30.0, 30.001, 35.0, 41.0])  # parts land in bursts
    monkeypatch.setattr(job.time, "perf_counter", lambda: next(clock))
    last, counts = [0.0, 0.0, 0], [ray.put(2400)]
    for rows in (100, 1200, 1300, 1500, 2050):
        job._progress(rows, counts, last)
    assert capsys.readouterr().err == ("1,200 rows encoded, 40 rows/s, 50% of 2,400, ETA 30s\n"
                                       "2,050 rows encoded, 50 rows/s, 85% of 2,400, ETA 7s\n")


# -- one huge line: bounded memory in every stage that reads raw text --------------------------


def test_a_huge_line_is_split_a_piece_at_a_time():
    from swe.text import SPLIT_PIECE, split_pieces, split_sentences

    line = "The cat sat on the mat. " * (3 * SPLIT_PIECE // 24)
    pieces = split_pieces(line, SPLIT_PIECE)
    assert len(pieces) >= 3 and all(len(p) <= SPLIT_PIECE for p in pieces)
    assert " ".join(pieces).split() == line.split()
    sentences = split_sentences(line)
    assert len(sentences) >= line.count(".") - len(pieces) and set(sentences) >= {"The cat sat "
                                                                                   "on the mat."}
    assert split_pieces("x" * (2 * SPLIT_PIECE + 5), SPLIT_PIECE) == \
        ["x" * SPLIT_PIECE] * 2 + ["xxxxx"]


def test_a_line_too_long_for_the_window_is_dropped_before_tokenising(tmp_path, minilm,
                                                                       monkeypatch):
    import pyarrow as pa

    from swe import storage
    from swe.build.stages import sentences

    huge = "word " * 400_000  # 2 MB, far beyond 128 tokens × 50 characters
    storage.write_parquet(str(tmp_path / "in.parquet"),
                          pa.table({"text": [huge, "a short sentence of five words"]}))
    seen = []
    real = storage.load_tokenizer

    def spy(path):
        tok = real(path)
        encode = tok.encode_batch
        monkeypatch.setattr(tok, "encode_batch", lambda texts, **kw: seen.extend(texts) or
                            encode(texts, **kw), raising=False)
        return tok

    monkeypatch.setattr(storage, "load_tokenizer", spy)
    out = sentences.sentence_shard(str(tmp_path / "in.parquet"), str(tmp_path / "out.parquet"),
                                   0, str(minilm), False, 3, 128)
    assert out["sentences"] == 1 and out["dropped_by_length"] == 1
    assert max(map(len, seen)) < 100


# -- resume: a finished stage's files are checked, a damaged one is redone ----------------------


def test_a_damaged_work_file_of_a_finished_stage_is_redone_not_trusted(
        ray_session, tmp_path, data_dir, caplog):
    import lzma

    from tests.test_build import SMALL

    corpus = tmp_path / "en.txt"
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.03.txt.xz", "rt") as f:
        corpus.write_text("".join(next(f) for _ in range(2400)))
    cfg = load_config(QUICK, [*SMALL, f"corpus.en.paths=['{corpus}']"],
                      output=str(tmp_path / "out"))
    first = build(cfg, until="vocab")
    shard = sorted((tmp_path / "out/work/sentences").rglob("*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    caplog.clear()
    again = build(cfg, until="vocab")
    assert f"its work file {shard} changed" in caplog.text and "redoing the stage" in caplog.text
    assert again["sentences"].sentences == first["sentences"].sentences
    assert again["vocab"].sizes == first["vocab"].sizes
    shard.unlink()  # a missing file: the same
    caplog.clear()
    build(cfg, until="sentences")
    assert f"its work file {shard} is missing" in caplog.text and shard.exists()


# -- build corpus files: one line naming the file (and line) and the setting -------------------


def _jsonl(path: Path, records: list) -> None:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")


@pytest.mark.parametrize("name, make, needle", [
    ("bad.jsonl", lambda p: _jsonl(p, [{"text": "fine"}] * 20 + ['{"text": "broken']),
     r"bad\.jsonl:21: not valid JSON"),
    ("list.jsonl", lambda p: _jsonl(p, [{"text": "fine"}, [1, 2]]),
     r"list\.jsonl:2: a JSON list, not an object with a 'text' field"),
    ("field.jsonl", lambda p: _jsonl(p, [{"body": "fine"}]),
     r"field\.jsonl:1: no 'text' field \(it has 'body'\); set corpus\.<lang>\.text_column"),
    ("nocol.parquet", lambda p: pq.write_table(pa.table({"body": ["x"]}), p),
     r"nocol\.parquet: no column 'text' \(it has body\)"),
    ("int.parquet", lambda p: pq.write_table(pa.table({"text": [1, 2]}), p),
     r"int\.parquet: column 'text' is int64, not text"),
    ("cut.parquet", lambda p: pq.write_table(pa.table({"text": ["a"] * 100}), p) or
     p.write_bytes(p.read_bytes()[:-30]), r"cut\.parquet: .*re-create or re-download it"),
])
def test_bad_corpus_files_name_the_file_line_and_setting(tmp_path, name, make, needle):
    from swe.build.stages.corpus import shard_file

    make(tmp_path / name)
    with pytest.raises(ValueError, match=needle):
        shard_file(str(tmp_path / name), "auto", "text", str(tmp_path / "shard"), 0, 100)


def test_non_string_corpus_texts_are_skipped_counted_and_named(tmp_path):
    from swe.build.stages.corpus import shard_file

    _jsonl(tmp_path / "c.jsonl", [{"text": "one"}, {"text": 5}, {"text": ["a"]}, {"text": None},
                                  {"text": "two"}])
    stats = shard_file(str(tmp_path / "c.jsonl"), "auto", "text", str(tmp_path / "s"), 0, 100)
    assert stats["lines"] == 2 and stats["non_text"] == 2
    assert stats["first_non_text"] == f"{tmp_path / 'c.jsonl'}:2"


def test_a_corpus_file_of_unknown_format_is_refused_naming_the_build_setting(tmp_path):
    from swe.build.config import ConfigError

    (tmp_path / "unknown.dat").write_text("text\n")
    with pytest.raises(ConfigError, match=r"unknown\.dat from its extension; set "
                                          r"corpus\.en\.format to parquet, jsonl or text"):
        load_config(QUICK, [f"corpus.en.paths=['{tmp_path / 'unknown.dat'}']"],
                    output=str(tmp_path / "out"))


# -- config files that are not TOML text ---------------------------------------------------------


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 10), "is not UTF-8 text"),
    (lambda p: p.write_bytes('name = "x"\n'.encode("utf-16")), "is not UTF-8 text"),
    (lambda p: p.mkdir(), "is a directory; name a TOML file in it"),
    (lambda p: p.write_bytes(b'name = "a\x00b"\n'), "is not valid TOML"),
])
def test_a_config_that_is_not_toml_text_is_one_line(tmp_path, make, needle, capsys):
    from swe.commands.build import main as build_main

    make(tmp_path / "cfg.toml")
    assert build_main(["--config", str(tmp_path / "cfg.toml"), "--output",
                       str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and not (tmp_path / "out").exists()


# -- object storage: no credentials, an endpoint nobody answers ----------------------------------


@pytest.mark.parametrize("env, needle", [
    ({"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_ENDPOINT_URL":
      "http://127.0.0.1:9"}, "cannot reach the object store at http://127.0.0.1:9 (bucket "
                             "nobucket): AWS_ENDPOINT_URL is http://127.0.0.1:9"),
    ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
     "no credentials for the object store (bucket nobucket): set AWS_ACCESS_KEY_ID"),
])
@pytest.mark.parametrize("command", ["info", "encode"])
def test_object_store_failures_are_one_line_naming_the_bucket(tmp_path, monkeypatch, env,
                                                              needle, command, capsys):
    from swe.commands.encode import main as encode

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()  # none made with the session's settings
    try:
        if command == "info":
            status = swe(["info", "s3://nobucket/prefix/model"])
        else:
            (tmp_path / "in.txt").write_text("a\n")
            status = encode(["--model", "s3://nobucket/prefix/model", "--input",
                             str(tmp_path / "in.txt"), "--output", str(tmp_path / "out")])
    finally:
        fsspec.filesystem("s3").clear_instance_cache()  # nor kept with these
    err = capsys.readouterr().err
    assert status == 1 and needle in err and "Traceback" not in err, err


def test_a_bad_line_in_bulk_input_is_one_error_line_without_ray_data_tracebacks(
        ray_session, tmp_path, tiny_model, capfd):
    from swe.commands.encode import main as encode

    (tmp_path / "bad.jsonl").write_text('{"text": "a b"}\n' * 10 + '{"text": broken\n')
    assert encode(["--model", str(tiny_model), "--input", str(tmp_path / "bad.jsonl"),
                   "--output", str(tmp_path / "out")]) == 2
    err = capfd.readouterr().err
    assert f"error: {tmp_path / 'bad.jsonl'}:11: not valid JSON" in err
    assert "Traceback" not in err and len(err.splitlines()) <= 3, err


def test_ids_of_different_types_are_refused_before_publishing(ray_session, tmp_path, tiny_model,
                                                              capsys):
    from swe.commands.encode import main as encode

    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"]}), tmp_path / "ints.parquet")
    pq.write_table(pa.table({"id": ["c", "d"], "text": ["a", "b"]}), tmp_path / "strs.parquet")
    _jsonl(tmp_path / "mixed.jsonl", [{"id": 1, "text": "a"}, {"id": "x", "text": "b"}])
    _jsonl(tmp_path / "chunks.jsonl", [{"id": 1, "text": "a"}, {"id": "x", "text": "b"}])
    cases = [(["ints.parquet", "strs.parquet"], [], "strs.parquet: column 'id' is string but "),
             (["mixed.jsonl"], [], "mixed.jsonl: column 'id' mixes int and str values"),
             (["chunks.jsonl"], ["--part-rows", "1"], "column 'id' is string but ")]
    for names, extra, needle in cases:
        out = tmp_path / f"out-{names[0]}"
        status = encode(["--model", str(tiny_model), "--input", *[str(tmp_path / n) for n in names],
                         "--output", str(out), "--id-column", "id", *extra])
        err = capsys.readouterr().err
        assert status == 2 and needle in err, err
        assert not (out / "_manifest.json").exists()


def test_a_vocabulary_holding_unk_exports_a_loadable_model(tmp_path, minilm):
    from model2vec import StaticModel as Model2Vec

    from swe.export import export

    words = ["the", "cat", "[UNK]", "sat", "mat"]
    model = StaticModel.from_vectors(words, np.eye(5, 8, dtype=np.float32), tokenizer=minilm)
    loaded = Model2Vec.from_pretrained(export(model, "model2vec", tmp_path / "m2v",
                                              measure=False))
    vectors = loaded.encode(["the cat sat", "an unknown zebra"])
    np.testing.assert_allclose(vectors[0], model.encode("the cat sat"), atol=1e-6)
    assert not vectors[1].any()  # unknown words stay zero rows, not the word [UNK]'s
