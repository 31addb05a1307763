"""Hostile input, third round (a second review of issue 42's kinds): what used to lose data
(`swe evaluate` writing its report over a model file or its own input; `swe finetune` deleting a
build's work/ folder it took for its own), hang (a device or a pipe as `languages_file`), walk the
filesystem (`teacher = "/"`), read the working directory for `--input ''`, or take a filter that
matches nearly everything; each now ends in one clear line before any work."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from swe.build.teacher.store import descriptor, list_store, open_namespace
from swe.cli import main
from swe.model import StaticModel

ROOT = Path(__file__).resolve().parents[1]
QUICK = str(ROOT / "pipelines/configs/quickstart.toml")


def _model(path: Path) -> Path:
    StaticModel.from_vectors(["a", "b", "c"], np.eye(3, dtype=np.float32)).save(str(path))
    return path


def _sts(path: Path) -> Path:
    path.write_text("sentence1\tsentence2\tscore\na\tb\t1\nb\tc\t2\na\tc\t3\n")
    return path


@pytest.mark.parametrize("where", ["model", "task", "both"])
def test_evaluate_never_writes_its_report_over_an_input(tmp_path, where, capsys):
    from swe.commands.evaluate import main as evaluate

    model, sts = _model(tmp_path / "m"), _sts(tmp_path / "sts.tsv")
    before = {p: p.read_bytes() for p in (model / "config.json", sts)}
    out = {"model": ["--json", str(model / "config.json")], "task": ["--markdown", str(sts)],
           "both": ["--json", str(tmp_path / "r"), "--markdown", str(tmp_path / "r")]}[where]
    assert evaluate(["--model", str(model), "--tasks", f"sts:{sts}", *out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("an input of this evaluation" in err
                                     or "one would overwrite the other" in err), err
    assert {p: p.read_bytes() for p in before} == before


def test_finetune_refuses_an_output_whose_work_folder_is_a_build_s(tmp_path):
    from swe.finetune.job import finetune

    out = tmp_path / "build"
    (out / "work/vocab").mkdir(parents=True)
    (out / "work/vocab/_DONE.json").write_text("{}")
    model, data = str(_model(tmp_path / "m")), str(tmp_path / "d.jsonl")
    with pytest.raises(FileExistsError, match="not a killed swe finetune run's"):
        finetune(model, data, str(out))
    assert (out / "work/vocab/_DONE.json").exists()
    (out / "work/vocab/_DONE.json").unlink()
    (out / "work/vocab").rmdir()
    (out / "work/runs").mkdir()  # what a killed finetune leaves: past the output check, it
    with pytest.raises(Exception, match="no-such-model") as e:  # stops at the missing model
        finetune(str(tmp_path / "no-such-model"), data, str(out))
    assert not isinstance(e.value, FileExistsError)


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_pipe_as_languages_file_is_one_line_not_a_hang(tmp_path, special):
    from swe.build import ConfigError, load_config

    if special == "fifo":
        special = str(tmp_path / "langs.tsv")
        os.mkfifo(special)
    with pytest.raises(ConfigError, match=r"languages_file.*(not a regular file|named pipe)"):
        load_config(QUICK, [f"languages_file='{special}'"], output=str(tmp_path / "out"))


def test_a_folder_without_config_json_is_not_a_teacher(tmp_path, capsys):
    from swe.build import ConfigError, load_config
    from swe.commands.evaluate import main as evaluate

    with pytest.raises(ConfigError, match=r"holds no config\.json"):
        load_config(QUICK, ["teacher='/'"], output=str(tmp_path / "out"))
    assert evaluate(["--model", f"teacher:{tmp_path}", "--tasks", "stsb-dev"]) == 2
    assert "holds no config.json" in capsys.readouterr().err


def test_an_empty_input_is_not_the_working_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.txt").write_text("not for encoding\n")
    model = _model(tmp_path / "m")
    assert main(["encode", "--model", str(model), "--input", "", "--output",
                 str(tmp_path / "o")]) == 2
    assert "--input '' is not a path" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_prune_refuses_an_age_under_an_hour_and_list_refuses_prune_s_filters(tmp_path, capsys):
    store = str(tmp_path / "store")
    open_namespace(store, descriptor("c" * 64, "onnx", 512, 384))
    for age in ("1e-300", "0.00001", "0.04"):
        assert main(["store", "prune", store, "--older-than-days", age, "--dry-run"]) == 2
        assert "at least 0.04167 (an hour)" in capsys.readouterr().err
    assert main(["store", "prune", store, "--older-than-days", "0.05", "--dry-run"]) == 0
    assert main(["store", "list", store, "--teacher", "zz", "--older-than-days", "-5"]) == 2
    err = capsys.readouterr().err
    assert "--teacher, --older-than-days: prune's options" in err and err.count("\n") == 1
    assert len(list_store(store)) == 1


@pytest.mark.parametrize("field, value, needle", [
    ("teacher_sha256", 123, "its teacher_sha256 is not a string"),
    ("runtime", None, "its runtime is not a string"),
    ("dim", "384", "its dim is not an integer"),
])
def test_a_namespace_file_with_wrong_types_is_one_line(tmp_path, field, value, needle, capsys):
    import json

    store = str(tmp_path / "store")
    open_namespace(store, descriptor("c" * 64, "onnx", 512, 384))
    path = next(Path(store).glob("ns-*/_NAMESPACE.json"))
    desc = json.loads(path.read_text())
    path.write_text(json.dumps({**desc, field: value}))
    for args in (["list", store], ["prune", store, "--teacher", "cd", "--dry-run"]):
        assert main(["store", *args]) == 2
        err = capsys.readouterr().err
        assert "is damaged" in err and needle in err and err.count("\n") == 1, err


def test_a_negative_seed_is_one_line_before_ray(tmp_path, capsys):
    from swe.clustering import quantize_model
    from swe.finetune.job import finetune

    with pytest.raises(ValueError, match="--seed must be"):
        finetune(str(_model(tmp_path / "f")), str(tmp_path / "d.jsonl"), str(tmp_path / "o"),
                 seed=-1)
    with pytest.raises(ValueError, match="--seed must be"):
        quantize_model(str(_model(tmp_path / "m")), str(tmp_path / "q"), 2, seed=-1)


@pytest.mark.parametrize("out", ["", "   "])
def test_export_refuses_a_blank_output(tmp_path, out, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(_model(tmp_path / "m")), "--to", "model2vec", out]) == 2
    assert "the output is empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


@pytest.mark.parametrize("name", ["e.txt.gz", "e.jsonl.gz", "e.txt.zst", "e.txt.xz"])
def test_a_zero_byte_compressed_input_is_truncated_not_empty(tmp_path, name):
    import gzip

    from swe.bulk.read import count_rows

    (tmp_path / name).write_bytes(b"")
    with pytest.raises(ValueError, match=r"cannot read it .*truncated or corrupt"):
        count_rows(str(tmp_path / name), "text")
    (tmp_path / "ok.txt.gz").write_bytes(gzip.compress(b""))  # an empty stream is empty text
    assert count_rows(str(tmp_path / "ok.txt.gz"), "text") == 0


@pytest.mark.parametrize("line, needle", [
    ('{"text": "a", "id": 123456789012345678901234567890}', "an integer beyond 64 bits"),
    ('{"text": "a", "id": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
])
def test_a_jsonl_id_too_big_or_too_deep_is_one_line_naming_the_file(tmp_path, line, needle,
                                                                    ray_session):
    from swe.bulk.options import EncodeOptions
    from swe.bulk.read import plan, read_task

    path = tmp_path / "ids.jsonl"
    path.write_text(line + "\n")
    opts = EncodeOptions(id_column="id")
    with pytest.raises(ValueError, match=needle) as e:
        descs, _ = plan([str(path)], "jsonl", ["text", "id"], 100)
        import pyarrow as pa

        list(read_task(pa.Table.from_pylist(descs), opts, {}))
    assert str(path) in str(e.value)


@pytest.mark.parametrize("key, value", [("pooling", "max"), ("normalize", False)])
def test_a_config_promising_what_swe_does_not_do_is_refused(tmp_path, key, value, capsys):
    import json

    model = _model(tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, key: value}))
    for command in ("info", "reseal"):  # checked before the checksum: resealing cannot pass it
        assert main([command, str(model)]) == 2
        err = capsys.readouterr().err
        assert f"{key} = " in err and "always has" in err and err.count("\n") == 1, err


def test_a_device_or_pipe_as_an_sts_set_is_named_for_what_it_is(tmp_path):
    from swe.eval.similarity import read_sts

    fifo = tmp_path / "sts.tsv"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):
        with pytest.raises(ValueError, match="is not a regular file"):
            read_sts(path)
    with pytest.raises(FileNotFoundError, match="STS file not found"):
        read_sts(tmp_path / "missing.tsv")


def test_a_non_finite_provenance_value_is_written_as_null_so_the_config_is_json(tmp_path):
    """A NaN or infinite score in provenance (a dev metric that could not be computed) made
    ``config.json`` hold ``NaN``: Python reads it, strict JSON parsers refuse the whole file."""
    import json

    def strict(text: str):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in config.json"))

    provenance = {"dev": {"score": float("nan"), "best": [1.5, float("inf")]}, "steps": 3}
    StaticModel.from_vectors(["a", "b"], np.eye(2, dtype=np.float32),
                             provenance=provenance).save(str(tmp_path / "m"))
    config = strict((tmp_path / "m" / "config.json").read_text())
    assert config["provenance"] == {"dev": {"score": None, "best": [1.5, None]}, "steps": 3}
    assert StaticModel.load(str(tmp_path / "m")).provenance == config["provenance"]


@pytest.mark.parametrize("command", ["finetune", "quantize"])
def test_a_cut_matrix_file_is_one_line_before_any_work(tmp_path, command, capsys):
    """A truncated model.safetensors: finetune's Train worker died on it with a traceback (the
    size was checked nowhere before the workers), quantize started Ray first."""
    import json

    model = tmp_path / "m"
    StaticModel.from_vectors(["good", "bad", "movie"], np.eye(3, dtype=np.float32)).save(model)
    matrix = model / "model.safetensors"
    matrix.write_bytes(matrix.read_bytes()[:40])
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"text": t, "label": t}) for t in ["good", "bad"] * 5))
    args = {"finetune": ["finetune", "--model", str(model), "--data", str(data),
                         "--text-column", "text", "--label-column", "label"],
            "quantize": ["quantize", str(model), "--clusters", "2"]}[command]
    assert main([*args, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors does not match the size" in err and "Traceback" not in err
    assert "ray:" not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_utf16_text_is_refused_by_name_before_any_work(tmp_path, encoding, ray_session):
    """UTF-16 read as UTF-8 is valid text of NUL-separated letters: it was built and encoded
    without a word (one row in three counted as invalid UTF-8 at most)."""
    from swe.build import ConfigError, load_config
    from swe.bulk.read import plan

    path = tmp_path / "u16.txt"
    path.write_bytes("A man plays a guitar.\nA woman reads a book.\n".encode(encoding))
    with pytest.raises(ConfigError, match=r"u16.txt is UTF-16 or UTF-32 text, not UTF-8"):
        load_config("quickstart", [f"corpus.en.paths=['{path}']"], output=str(tmp_path / "o"))
    for kind in ("text", "jsonl"):
        with pytest.raises(ValueError, match=r"u16.txt is UTF-16 or UTF-32 text"):
            plan([str(path)], kind, ["text"], 100)
    from swe import StaticModel
    from swe.bulk import encode_files

    model = tmp_path / "model"
    StaticModel.from_vectors(["a", "man"], np.eye(2, dtype=np.float32)).save(str(model))
    with pytest.raises(ValueError, match=r"u16.txt is UTF-16 or UTF-32 text"):
        encode_files(str(model), [str(path)], str(tmp_path / "enc"))
    assert not list((tmp_path / "enc").glob("v-*")), "a refused input left a run folder"
    utf8 = tmp_path / "ok.txt"  # UTF-8, with its own byte-order mark, is still read
    utf8.write_bytes(b"\xef\xbb\xbfA man plays a guitar.\n")
    load_config("quickstart", [f"corpus.en.paths=['{utf8}']"], output=str(tmp_path / "o"))
    plan([str(utf8)], "text", ["text"], 100)


def test_a_line_that_merely_starts_with_the_utf16_mark_is_invalid_utf8_not_utf16(tmp_path):
    from swe.inputs import peek_lines

    path = tmp_path / "c.txt"
    path.write_bytes(b"\xff\xfe broken line\nA man plays a guitar.\n")
    assert peek_lines(str(path), 2)[1] == b"A man plays a guitar."


def test_a_path_with_a_line_break_or_a_looping_link_is_one_line_before_any_work(tmp_path,
                                                                                  capsys):
    """A symbolic link that points back at itself was taken as an output (``realpath`` leaves
    it as it is) and failed later with ELOOP; a line break in a path, legal on Linux, splits
    logs, manifests and copied commands. Both are refused by name, for outputs and inputs."""
    from swe import storage
    from swe.inputs import check_path_text

    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for bad in (loop, loop / "sub"):
        with pytest.raises(ValueError, match="points back at itself"):
            storage.output_url(str(bad), "extraction.store")
    for bad in (str(tmp_path / "a\nb"), "s3://bucket/a\rb"):
        with pytest.raises(ValueError, match="line break"):
            storage.output_url(bad)
    with pytest.raises(ValueError, match=r"--input .* holds a line break"):
        check_path_text("data/a\n.txt", "--input")
    model = _model(tmp_path / "m")
    text = tmp_path / "in.txt"
    text.write_text("A man plays a guitar.\n")
    for args in (["encode", "--model", str(model), "--input", str(text), "--output", str(loop)],
                 ["encode", "--model", str(model), "--input", f"{text}\n", "--output",
                  str(tmp_path / "o")],
                 ["build", "--config", "quickstart", "--output", str(tmp_path / "q\nr")]):
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "Traceback" not in err, err
        assert "points back at itself" in err or "holds a line break" in err, err


def test_a_parquet_corpus_without_text_is_refused_in_validation(tmp_path):
    """A Parquet corpus was checked for rows only: one without the text column, with a column
    of numbers, or with only empty and null texts passed validation and failed in the corpus
    stage's tasks (or built from nothing). Each is now a line naming the file, before any work;
    a dictionary-encoded text column (a pandas categorical) is text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe.build import ConfigError, load_config

    tables = {"other": pa.table({"sentence": ["A man plays a guitar."]}),
              "numbers": pa.table({"text": [1, 2]}),
              "blank": pa.table({"text": pa.array([None, "", "  "], pa.string())}),
              "categorical": pa.table({"text": pa.array(["A man.", "A man."]).dictionary_encode()})}
    expected = {"other": r"other.parquet: no column 'text' \(it has sentence\)",
                "numbers": r"numbers.parquet: column 'text' is int64, not text",
                "blank": r"corpus.en: its files hold no text \(.*blank.parquet\)"}
    for name, table in tables.items():
        pq.write_table(table, tmp_path / f"{name}.parquet")
        overrides = [f"corpus.en.paths=['{tmp_path / name}.parquet']"]
        if name in expected:
            with pytest.raises(ConfigError, match=expected[name]):
                load_config("quickstart", overrides, output=str(tmp_path / "o"))
        else:
            load_config("quickstart", overrides, output=str(tmp_path / "o"))
