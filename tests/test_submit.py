"""`ray job submit` for real: a local head on loopback, the quickstart build submitted as a job
with corpus and output on S3 (moto), the model loaded back from S3, the head stopped.

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

import pytest
from procs import own_env

from swe import StaticModel, storage

RAY = str(Path(sys.executable).with_name("ray"))
SMALL = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=3", "selection.n=4",
         "selection.candidates=40", "pca.sample=200", "pca.dim=64", "corpus.en.max_lines=2000",
         "corpus.en.shard_lines=1000", "extraction.batch_size=128"]


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
def test_ray_job_submit_quickstart_on_s3(ray_head, s3, data_dir):
    address, env = ray_head
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.01.txt.xz", "rt") as f:
        lines = [next(f) for _ in range(2000)]
    storage.write_bytes(f"{s3}/submit-corpus/en.txt.xz", lzma.compress("".join(lines).encode()))
    out = f"{s3}/submit/quick"
    aws = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    cmd = [RAY, "job", "submit", f"--address={address}", "--working-dir", ".",
           "--runtime-env-json", json.dumps({"env_vars": aws}), "--",
           "python", "pipelines/build.py", "--config", "pipelines/configs/quickstart.toml",
           "--output", out, "--set", f"corpus.en.paths=['{s3}/submit-corpus/en.txt.xz']",
           *[a for kv in SMALL for a in ("--set", kv)]]
    for _ in range(30):  # the job agent can come up a little after the job server
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if "No available agent" not in run.stdout + run.stderr:
            break
        time.sleep(3)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "succeeded" in run.stdout
    model = StaticModel.load(f"{out}/model")
    assert len(model) == 150 and model.dim == 64
    assert model.encode("The river flows north.").shape == (64,)
