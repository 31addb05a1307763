"""`ray job submit` for real: a local head on loopback, the quickstart build submitted as a job
with corpus and output on S3 (moto), the model loaded back from S3 and checked, the head
stopped. (This is also the suite's quickstart build on S3: one build serves both.)

Marked ``own_ray_cluster``: conftest runs it before any test starts the session's in-process Ray,
so two Ray clusters never share the machine's two cores."""

from __future__ import annotations

import contextlib
import json
import lzma
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from procs import own_env

from swe import StaticModel, storage

RAY = str(Path(sys.executable).with_name("ray"))
SMALL = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=3", "selection.n=4",
         "selection.candidates=40", "pca.sample=200", "pca.dim=64", "corpus.en.max_lines=2400",
         "corpus.en.shard_lines=800", "extraction.batch_size=128", "extraction.job_sentences=250",
         "extraction.actors=1"]


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (all sockets held open until every port is picked)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def ray_head():
    """``ray start --head --block`` in its own process group; yields the dashboard address."""
    port, dash, *more = _free_ports(9)
    # Not the variables of the test session's own Ray (ray.init in this process).
    env = own_env()
    env.update({"RAY_AUTH_MODE": "disabled",
           # SIGTERM stops the head at once (Ray's default drains for up to 30 s first)
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
           # the job's `python` is this environment's, as in an activated venv
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    temp = tempfile.mkdtemp(prefix="rh", dir="/tmp")  # short: Ray's unix sockets live here
    # Every port explicit, so nothing collides with the test session's own Ray.
    ports = [f"--{name}={p}" for name, p in zip((
        "node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port",
        "ray-client-server-port"), more, strict=True)]
    log = open(os.path.join(temp, "ray-start.log"), "w")  # noqa: SIM115 (closed below)
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
         f"--temp-dir={temp}", "--disable-usage-stats", *ports],
        env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    address = f"http://127.0.0.1:{dash}"
    deadline = time.time() + 120
    while time.time() < deadline:
        ok = subprocess.run([RAY, "job", "list", f"--address={address}"], env=env,
                            capture_output=True).returncode == 0
        if ok:
            break
        if head.poll() is not None:
            log.close()
            pytest.fail("ray start --head exited:\n" + Path(log.name).read_text()[-3000:])
        time.sleep(2)
    else:
        pytest.fail("the Ray head's job server did not come up")
    yield address, env
    head.send_signal(signal.SIGTERM)  # --block: ray start stops the head's processes
    with contextlib.suppress(subprocess.TimeoutExpired):
        head.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGKILL)
    log.close()


@pytest.mark.own_ray_cluster
def test_ray_job_submit_quickstart_on_s3(ray_head, s3, data_dir, minilm):
    """The quickstart, submitted, builds from a CC-100-layout corpus on S3 (paragraphs, blank
    lines between documents, xz, a non-UTF-8 line) with the torch teacher into S3; step 1 is
    checked against the teacher's token states averaged by hand."""
    address, env = ray_head
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.03.txt.xz", "rt") as f:
        lines = [next(f) for _ in range(2400)]
    body = "".join(line if i % 50 else line + "\n" for i, line in enumerate(lines))
    corpus = f"{s3}/submit-corpus/en.txt.xz"
    storage.write_bytes(corpus, lzma.compress(b"\xff\xfe broken line\n" + body.encode()))
    out = f"{s3}/submit/quick"
    aws = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    settings = [*SMALL, f"corpus.en.paths=['{corpus}']", "corpus.en.split_sentences=true",
                "extraction.runtime='torch'"]
    cmd = [RAY, "job", "submit", f"--address={address}", "--working-dir", ".",
           "--runtime-env-json", json.dumps({"env_vars": aws}), "--",
           "python", "pipelines/build.py", "--config", "pipelines/configs/quickstart.toml",
           "--output", out, *[a for kv in settings for a in ("--set", kv)]]
    for _ in range(30):  # the job agent can come up a little after the job server
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if "No available agent" not in run.stdout + run.stderr:
            break
        time.sleep(3)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "succeeded" in run.stdout
    stats = {stage: json.loads(storage.read_bytes(f"{out}/work/{stage}/_DONE.json"))["stats"]
             for stage in ("corpus", "vocab", "selection")}
    assert stats["corpus"]["invalid_utf8_lines"] == 1
    assert stats["vocab"]["sizes"]["en"] == 150
    assert stats["selection"]["naive_encodes"] == 600
    assert 0 < stats["selection"]["unique_sentences"] < 600

    step1, final = StaticModel.load(f"{out}/step1"), StaticModel.load(f"{out}/model")
    assert step1.dim == 384 and final.dim == 64 and len(final) == len(step1) == 150
    v = final.encode(["The city is in the north of the country."])
    assert np.isclose(np.linalg.norm(v), 1.0)
    assert final.encode("The river flows north.").shape == (64,)
    _check_step1_by_hand(step1, out, minilm)


def _check_step1_by_hand(step1: StaticModel, out: str, minilm: Path) -> None:
    """One word's step-1 vector equals the teacher's token states of its 4 sentences, averaged
    by hand."""
    from swe.build.stages.extraction import align
    from swe.build.teacher import Teacher
    from swe.storage import read_parquet
    from swe.text import language, units

    word = step1.words[10]
    teacher = Teacher(str(minilm))
    fs, parts = storage.filesystem(f"{out}/work/selection/parts")
    vocab = read_parquet(f"{out}/work/vocab/en.parquet").column("word").to_pylist()
    wid = vocab.index(word)
    vecs = []
    for p in fs.find(parts):
        for row in read_parquet("s3://" + p).to_pylist():
            if wid in row["word_ids"]:
                hidden, offsets, mask = teacher.hidden_states([row["text"]])
                idx = align(units(row["text"], language("en")), [word], offsets[0], mask[0])
                vecs.append(hidden[0, idx[word]].mean(0))
    assert len(vecs) == 4
    np.testing.assert_allclose(step1.vectors[step1.words.index(word)], np.mean(vecs, 0),
                               rtol=1e-4, atol=1e-4)
