"""The bulk output's commit protocol: it never touches what is not its own, and a fault at any
step of writing or publishing leaves the old output intact or the new one complete."""

import contextlib
import itertools
import lzma
import os
import time

import numpy as np
import pyarrow as pa
import pytest
from test_bulk import run_cli as _cli
from test_bulk import small_glove

from swe import storage
from swe.bulk import EncodeOptions, encode_files, read_manifest, read_output

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]


@pytest.fixture(scope="module")
def setup(glove, data_dir, tmp_path_factory) -> tuple[str, list[str]]:
    """The GloVe model saved as a swe model dir, and 1,200 Wikipedia sentences."""
    path = tmp_path_factory.mktemp("commit-model") / "glove"
    small_glove(glove).save(path)
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.01.txt.xz", "rt") as f:
        return str(path), [line.rstrip("\n") for line in itertools.islice(f, 1200)]


def test_refuses_what_is_not_its_own(tmp_path, setup, capsys):
    model_path, sentences = setup
    src = tmp_path / "in" / "a.txt"
    src.parent.mkdir()
    src.write_text("\n".join(sentences[:100]) + "\n")
    plain = tmp_path / "notes.txt"
    plain.write_text("keep me")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "thesis.tex").write_text("keep me too")
    for out, message in [(plain, "is a file"), (folder, "not an encode output"),
                         (model_path, "overlaps the model"),
                         (f"{model_path}/emb", "overlaps the model"),
                         (os.path.dirname(model_path), "overlaps the model"),
                         (tmp_path, "overlaps an input"),
                         (src, "overlaps an input"), (src.parent, "overlaps an input"),
                         (src.parent / "emb", "overlaps an input")]:
        assert _cli(["--model", model_path, "--input", str(src.parent), "--output",
                     str(out)]) == 2, out
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("error: ") and message in err and str(out) in err, err
    assert plain.read_text() == "keep me" and (folder / "thesis.tex").read_text() == "keep me too"
    assert "--overwrite" in (_cli(["--model", model_path, "--input", str(src), "--output",
                                   str(plain)]), capsys.readouterr().err)[1]
    # --overwrite replaces them, and removes the old content only once the new one is complete
    for out in (plain, folder):
        summary = encode_files(model_path, [str(src)], str(out), overwrite=True)
        assert summary.rows == 100 and read_output(str(out)).count_rows() == 100
        assert sorted(p.name for p in out.iterdir()) == ["_manifest.json", f"v-{summary.run}"]


def _fail_once(monkeypatch, method: str, match: str) -> list:
    """Make moto's S3 backend (serving every process, in this one) refuse the first
    ``method`` call whose key (or first deleted key) contains ``match`` with Access Denied."""
    from moto.s3.exceptions import AccessDeniedByLock
    from moto.s3.models import S3Backend

    original = getattr(S3Backend, method)
    hits: list = []

    def faulty(self, bucket_name, *args, **kwargs):
        key = args[0] if args else kwargs.get("key_name", kwargs.get("objects"))
        key = str(key[0] if isinstance(key, list) and key else key)
        if not hits and match in key:
            hits.append(key)
            raise AccessDeniedByLock()
        return original(self, bucket_name, *args, **kwargs)

    monkeypatch.setattr(S3Backend, method, faulty)
    return hits


def _assert_cpus_released(when: str) -> None:
    """A failed job's actors are gone (their CPUs free) soon after it raises, even while the
    caller keeps the error: a process that goes on does not starve its next job. (Ray Data
    logs the failure with a traceback that reaches the job's actors; pytest's log capture keeps
    that record for its report, so it is dropped here, as a process without it would.)"""
    import gc
    import logging

    import ray

    for handler in logging.getLogger().handlers:
        if type(handler).__name__ == "LogCaptureHandler":
            handler.reset()
    gc.collect()
    deadline = time.time() + 20
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"]:
        assert time.time() < deadline, f"CPUs still held after the fault at {when}"
        time.sleep(0.2)


def _check_complete(out: str, n: int, dtype: str) -> str:
    """The output at ``out`` is one whole version: n rows, ids unique and complete."""
    table = read_output(out).to_table()
    assert table.num_rows == n
    keys = sorted(zip(table.column("file").to_pylist(), table.column("row").to_pylist(),
                      strict=True))
    assert len(set(keys)) == n and sorted(r for _, r in keys) == sorted(
        list(range(n // 2)) * 2)
    assert table.schema.field("embedding").type.value_type == pa.from_numpy_dtype(np.dtype(dtype))
    return read_manifest(out)["run"]


def test_faults_at_every_step_on_s3(s3, setup, monkeypatch):
    model_path, sentences = setup
    data = ("\n".join(sentences[:600]) + "\n").encode()
    storage.write_bytes(f"{s3}/commit-in/a.txt.zst", __import__("zstandard").compress(data))
    storage.write_bytes(f"{s3}/commit-in/b.txt", data)
    inputs, out = [f"{s3}/commit-in/"], f"{s3}/commit-out"
    old = EncodeOptions(part_rows=250)
    new = EncodeOptions(part_rows=250, dtype="float16")
    old_run = encode_files(model_path, inputs, out, options=old).run
    # a fault at each write of the new version: the job stops, the old version is untouched
    for method, match in [("put_object", "/_run.json"), ("put_object", ".parquet"),
                          ("put_object", "/_receipts/"), ("put_object", "_manifest.json")]:
        with monkeypatch.context() as m:
            hits = _fail_once(m, method, match)
            with pytest.raises(PermissionError) as raised:
                encode_files(model_path, inputs, out, options=new)
        assert hits, match
        assert _check_complete(out, 1200, "float32") == old_run, match
        _assert_cpus_released(match)  # while the caller still holds the error
        del raised
    # the parts written before the manifest fault are reused: the rerun only publishes
    with monkeypatch.context() as m:  # ... and removing the old version fails: new is complete
        hits = _fail_once(m, "delete_objects", f"v-{old_run}")
        summary = encode_files(model_path, inputs, out, options=new)
    assert hits and summary.resumed_parts == summary.parts == 6
    assert _check_complete(out, 1200, "float16") == summary.run
    fs, path = storage.filesystem(out)
    fs.invalidate_cache()
    assert fs.exists(f"{path}/v-{old_run}")  # left behind by the failed delete ...
    encode_files(model_path, inputs, out, options=new)
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(path)) == ["_manifest.json",
                                                                f"v-{summary.run}"]


def test_local_manifest_fault_keeps_old(tmp_path, setup, monkeypatch):
    model_path, sentences = setup
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sentences[:300]) + "\n")
    out = str(tmp_path / "out")
    first = encode_files(model_path, [str(src)], out)
    real = storage.write_bytes_atomic

    def faulty(url, data):
        if url.endswith("_manifest.json"):
            raise OSError(f"disk full writing {url}")
        real(url, data)

    with monkeypatch.context() as m, contextlib.suppress(OSError):
        m.setattr(storage, "write_bytes_atomic", faulty)
        encode_files(model_path, [str(src)], out, options=EncodeOptions(dim=8))
    assert read_manifest(out)["run"] == first.run and read_output(out).count_rows() == 300
    assert not [p for p in (tmp_path / "out").iterdir() if ".tmp-" in p.name]
