"""Failures and bad input: a killed extraction actor, a killed driver, object-storage errors and
malformed corpora. Each either finishes with the same model as an undisturbed build, continues
with a recorded warning, or stops with a message naming the path and the fix — and never leaves
a stage marked complete over partial output."""

from __future__ import annotations

import contextlib
import json
import logging
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from procs import joined_env, own_ray_pids
from procs import kill_session as _kill_session

from swe import StaticModel
from swe.build import ConfigError, build, load_config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
QUICK = "pipelines/configs/quickstart.toml"
SMALL = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=2", "selection.n=4",
         "selection.candidates=40", "pca.sample=200", "pca.dim=64", "corpus.en.max_lines=1600",
         "corpus.en.shard_lines=800", "extraction.batch_size=64",
         "extraction.job_sentences=1000", "extraction.actors=1"]


@pytest.fixture(scope="module")
def lines(data_dir) -> list[str]:
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.01.txt.xz", "rt") as f:
        return [next(f) for _ in range(1600)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, lines) -> Path:
    path = tmp_path_factory.mktemp("fail-corpus") / "en.txt"
    path.write_text("".join(lines))
    return path


def _overrides(corpus, extra=()) -> list[str]:
    return [*SMALL, f"corpus.en.paths=['{corpus}']", *extra]


def _cfg(output, corpus, extra=()):
    return load_config(QUICK, _overrides(corpus, extra), output=str(output))


def _same_model(a: Path, b: Path) -> None:
    ma, mb = StaticModel.load(a / "model"), StaticModel.load(b / "model")
    assert ma.words == mb.words
    np.testing.assert_allclose(ma.vectors, mb.vectors, rtol=1e-4, atol=1e-5)


def _done(out: Path, stage: str) -> dict | None:
    marker = out / "work" / stage / "_DONE.json"
    return json.loads(marker.read_text()) if marker.exists() else None


@pytest.fixture(scope="module")
def reference(ray_session, tmp_path_factory, corpus) -> Path:
    """An undisturbed build of the small config."""
    out = tmp_path_factory.mktemp("fail-ref") / "build"
    build(_cfg(out, corpus))
    return out


# -- processes ---------------------------------------------------------------------------------


# -- 1. a killed extraction actor ----------------------------------------------------------------


def test_killed_extraction_actor_gives_the_same_model(reference, tmp_path, corpus):
    """SIGKILL a teacher actor of the extraction pool while it runs a batch: Ray Data restarts
    the actor and retries its task (``max_restarts``/``max_task_retries`` = -1, its defaults
    for actor pools), and the model equals the undisturbed one."""
    out = tmp_path / "build"
    shutil.copytree(reference, out)  # everything up to selection is done ...
    for p in ("work/extraction", "work/pca", "step1", "step2", "model"):
        shutil.rmtree(out / p)  # ... extraction onwards is not
    killed: list[tuple[int, bool]] = []

    def kill_a_busy_actor():
        deadline = time.time() + 240
        while time.time() < deadline:
            busy = own_ray_pids(b"ray::MapWorker(MapBatches(Extractor)).submit")
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append((busy[0], (out / "work/extraction/_DONE.json").exists()))
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_busy_actor)
    killer.start()
    report = build(_cfg(out, corpus, ["extraction.actors=2"]))  # one of two; the reference: 1
    killer.join()
    assert len(killed) == 1, "no busy extraction actor was found and killed"
    assert killed[0][1] is False  # killed mid-stage
    assert report["extraction"].sentences == _done(reference, "extraction")["stats"][
        "sentences"]
    _same_model(reference, out)


# -- 2. a killed driver ------------------------------------------------------------------------


def _driver(out: Path, corpus: Path, log: Path, extra: list[str] = ()) -> subprocess.Popen:
    """``pipelines/build.py`` in its own session, joined to the test session's Ray."""
    env = joined_env()
    args = [sys.executable, "pipelines/build.py", "--config", QUICK, "--output", str(out)]
    for item in [*_overrides(corpus), *extra]:
        args += ["--set", item]
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _kill_driver_inside(out: Path, corpus: Path, log: Path, marker: str, stage: str,
                        extra: list[str]) -> None:
    """Run the driver and SIGKILL it once a task marker matching ``marker`` exists while
    ``stage`` is still unfinished: a kill inside the stage."""
    proc = _driver(out, corpus, log, extra)
    try:
        deadline = time.time() + 300
        while not list(out.glob(marker)):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.time() < deadline, f"no {marker} appeared"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # the driver dies mid-stage (Ray ends its job)
        proc.wait()
    finally:
        _kill_session(proc.pid)
    assert not _done(out, stage), f"{stage} finished before the kill"


def test_driver_killed_inside_stages_resumes_them_and_gives_the_same_model(reference, tmp_path,
                                                                            corpus, caplog):
    """Killed inside selection, then inside extraction: each rerun skips the finished stages
    and the finished tasks of the killed one, and the last (in this process, on the session's
    Ray: no third local Ray to start) gives the reference model."""
    out, jobs = tmp_path / "build", ["extraction.job_sentences=150"]  # several extraction jobs
    shutil.copytree(reference, out)  # corpus, sentences and vocab are done (the reference's) ...
    for p in ("work/selection", "work/extraction", "work/pca", "step1", "step2", "model"):
        shutil.rmtree(out / p)  # ... so the first driver starts in selection
    _kill_driver_inside(out, corpus, tmp_path / "run1.log", "work/selection/_shards/en-B-*",
                        "selection", jobs)
    assert list((out / "work/selection/_shards").glob("en-A-*"))
    _kill_driver_inside(out, corpus, tmp_path / "run2.log",
                        "work/extraction/_shards/wave-00000.json", "extraction", jobs)
    text = (tmp_path / "run2.log").read_text()
    assert "[vocab] start" not in text and "[selection] start" in text
    assert re.search(r"\[selection\] \d+ of \d+ shards already done", text)  # not redone
    before = {s: (out / "work" / s / "_DONE.json").stat().st_mtime_ns
              for s in ("corpus", "sentences", "vocab", "selection")}

    with caplog.at_level(logging.INFO, logger="swe.build"):
        build(_cfg(out, corpus, jobs))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "[extraction] start" in text and "[selection] start" not in text
    assert re.search(r"\[extraction\] [1-9]\d* of \d+ jobs already done", text)  # not redone
    assert {s: (out / "work" / s / "_DONE.json").stat().st_mtime_ns for s in before} == before
    _same_model(reference, out)


# -- 3. object storage errors ---------------------------------------------------------------------


def _cli(capsys, corpus_url: str, output: str, extra=()) -> tuple[int, str]:
    """``pipelines/build.py`` as the user runs it (in this process): exit code, stderr."""
    from swe.commands import build as cli

    args = ["--config", QUICK, "--output", output]
    for item in [*SMALL, f"corpus.en.paths=['{corpus_url}']", *extra]:
        args += ["--set", item]
    code = cli.main(args)
    return code, capsys.readouterr().err


@pytest.fixture
def s3_credentials(s3):
    """Set AWS credentials for this process only (Ray workers keep theirs) with moto's IAM
    authentication on: moto accepts any key unless it is on, and then only keys of its IAM
    users — so the session's ``testing`` key is "wrong credentials" here."""
    import s3fs
    from moto.core.authorization import enable_iam_authentication

    old = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    with contextlib.ExitStack() as stack:

        def use(key: str, secret: str) -> None:
            if not stack._exit_callbacks:
                stack.enter_context(enable_iam_authentication())
            os.environ.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
            s3fs.S3FileSystem.clear_instance_cache()  # s3fs caches a client per endpoint

        try:
            yield use
        finally:
            os.environ.update(old)
            s3fs.S3FileSystem.clear_instance_cache()


def test_missing_bucket(s3, tmp_path, corpus, capsys):
    import boto3

    code, err = _cli(capsys, "s3://no-such-bucket/x.txt", str(tmp_path / "out"))
    assert code == 2 and "s3://no-such-bucket/x.txt" in err
    assert "bucket 'no-such-bucket' does not exist" in err
    # A missing output bucket: an error before any work, and the bucket is not created.
    code, err = _cli(capsys, str(corpus), "s3://no-such-out-bucket/build")
    assert code == 2 and "cannot write s3://no-such-out-bucket/build/work/" in err
    assert "check the bucket name and the credentials" in err
    names = [b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]]
    assert "no-such-out-bucket" not in names
    assert not (tmp_path / "out").exists()


def test_wrong_credentials(s3, s3_credentials, tmp_path, corpus, capsys):
    from swe import storage

    storage.write_bytes(f"{s3}/fail/en.txt", corpus.read_bytes())
    s3_credentials("AKIAWRONGWRONGWRONG1", "wrong-secret")
    code, err = _cli(capsys, f"{s3}/fail/en.txt", str(tmp_path / "out"))
    assert code == 2 and f"corpus.en: cannot read {s3}/fail/en.txt" in err
    assert "Access Key Id you provided does not exist" in err and "AWS_ACCESS_KEY_ID" in err
    code, err = _cli(capsys, str(corpus), f"{s3}/fail/out")
    assert code == 1 and f"permission denied writing {s3}/fail/out/work/_write_probe" in err
    assert not (tmp_path / "out").exists()


def test_permission_denied_on_output(s3, s3_credentials, tmp_path, corpus, capsys):
    """An IAM user that may read the bucket but not write: moto enforces its policy. (A
    read-only local directory cannot be tested here: the tests run as root.)"""
    import boto3

    iam = boto3.client("iam")
    iam.create_user(UserName="swe-reader")
    iam.put_user_policy(UserName="swe-reader", PolicyName="read-only", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*",
                                                 "Action": ["s3:GetObject", "s3:ListBucket"]}]}))
    key = iam.create_access_key(UserName="swe-reader")["AccessKey"]
    s3_credentials(key["AccessKeyId"], key["SecretAccessKey"])
    code, err = _cli(capsys, str(corpus), f"{s3}/fail/denied")
    assert code == 1
    assert f"permission denied writing {s3}/fail/denied/work/_write_probe (Access Denied)" in err


def test_truncated_xz_names_the_file(ray_session, tmp_path, lines):
    good, bad = tmp_path / "a.txt.xz", tmp_path / "b.txt.xz"
    good.write_bytes(lzma.compress("".join(lines[:400]).encode()))
    data = lzma.compress("".join(lines[400:]).encode())
    bad.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    cfg = load_config(QUICK, [*SMALL, f"corpus.en.paths=['{good}', '{bad}']"], output=str(out))
    with pytest.raises(ValueError, match="truncated or corrupt compressed file") as e:
        build(cfg)
    assert str(bad) in str(e.value) and "re-download" in str(e.value)
    assert _done(out, "corpus") is None


# -- 4. bad input -------------------------------------------------------------------------------


def test_bad_input_continues_with_recorded_warnings(ray_session, tmp_path, lines):
    """Non-UTF-8 bytes, an empty file, a 5 MB line and a vocabulary larger than the corpus
    gives: the build goes on, each problem logged and recorded in its stage's _DONE.json."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.txt").write_bytes(b"".join(x.encode() for x in lines[:500])
                              + b"caf\xe9 au lait is \xff\xfe not UTF-8\n")
    (d / "b.txt").write_bytes(b"")
    long_line = " ".join(x.strip() for x in lines[500:])
    long_line = (long_line + " ") * (5_000_000 // len(long_line) + 1)
    (d / "c.txt").write_text("".join(lines[500:800]) + long_line[:5_000_000] + "\n")
    out = tmp_path / "out"
    extra = ["vocab.size=5000", "corpus.en.max_lines=0"]
    cfg = _cfg(out, d, extra)
    report = build(cfg, until="vocab")
    corpus_warn = report["corpus"].warnings
    assert report["corpus"].invalid_utf8_lines == 1
    assert report["corpus"].lines == 500 + 300 + 1
    assert any(f"{d / 'b.txt'}: no non-blank lines" in w for w in corpus_warn)
    assert any(f"{d / 'a.txt'}: 1 line(s) not valid UTF-8, skipped" in w for w in corpus_warn)
    assert report["sentences"].dropped_by_length >= 1  # the 5 MB line (> max_tokens)
    longest = max(len(t) for s in report["sentences"].shards["en"]
                  for t in _texts(s["path"]))
    assert longest < 2000
    size = report["vocab"].sizes["en"]
    assert size < 5000
    assert report["vocab"].warnings == [
        f"en: only {size} words occur 3+ times, fewer than vocab.size = 5000; add corpus, or "
        "lower vocab.size or vocab.min_count"]
    assert _done(out, "vocab")["stats"]["warnings"] == report["vocab"].warnings

    # ... or stops, per config: vocab.on_short = 'error' (corpus and sentences are reused).
    cfg = _cfg(out, d, [*extra, "vocab.on_short='error'"])
    with pytest.raises(ValueError, match=r"fewer than vocab.size = 5000.*on_short = 'warn'"):
        build(cfg, until="vocab")
    assert _done(out, "sentences") and _done(out, "vocab") is None


def _texts(url: str) -> list[str]:
    from swe.storage import read_parquet

    return read_parquet(url, ["text"]).column("text").to_pylist()


def test_bad_bytes_policy(ray_session, tmp_path, lines):
    src = tmp_path / "a.txt"
    src.write_bytes(b"".join(x.encode() for x in lines[:300]) + b"bad \xff byte here\n")
    report = build(_cfg(tmp_path / "replace", src, ["corpus.en.on_bad_bytes='replace'"]),
                       until="corpus")
    assert report["corpus"].lines == 301 and report["corpus"].invalid_utf8_lines == 1
    assert "decoded with U+FFFD" in report["corpus"].warnings[0]
    out = tmp_path / "error"
    with pytest.raises(ValueError, match=re.escape(f"{src}: line 301 is not valid UTF-8")):
        build(_cfg(out, src, ["corpus.en.on_bad_bytes='error'"]), until="corpus")
    assert _done(out, "corpus") is None
    with pytest.raises(ConfigError, match=r"corpus\.en\.on_bad_bytes = 'drop'; use skip, replace"):
        _cfg(out, src, ["corpus.en.on_bad_bytes='drop'"])
    with pytest.raises(ConfigError, match=r"vocab\.on_short = 'stop'; use 'warn'"):
        _cfg(out, src, ["vocab.on_short='stop'"])


def test_no_sentence_in_the_length_window(ray_session, tmp_path, lines):
    src = tmp_path / "short.txt"
    src.write_text("".join(" ".join(x.split()[:4]) + "\n" for x in lines[:300]))
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="no en sentence has 30–64 teacher tokens: widen"):
        build(_cfg(out, src, ["sentences.min_tokens=30"]))
    assert _done(out, "corpus") and _done(out, "sentences") is None


def test_all_input_files_empty(ray_session, tmp_path):
    src = tmp_path / "empty.txt"
    src.write_text("\n\n  \n")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"corpus\.en: its files hold no text .*empty\.txt"):
        build(_cfg(out, src))  # refused by validation, before any work
    assert _done(out, "corpus") is None
