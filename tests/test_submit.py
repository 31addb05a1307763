"""`ray job submit` for real: a local head on loopback, the quickstart build submitted as a job
with corpus and output on S3 (moto), the model loaded back from S3, the head stopped."""

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

from swe import StaticModel, storage

RAY = str(Path(sys.executable).with_name("ray"))
SMALL = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=3", "selection.n=4",
         "selection.candidates=40", "pca.sample=200", "pca.dim=64", "corpus.en.max_lines=2000",
         "corpus.en.shard_lines=1000", "extraction.batch_size=128"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """``ray start --head --block`` in its own process group; yields the dashboard address."""
    port, dash = _free_port(), _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           # the job's `python` is this environment's, as in an activated venv
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    temp = tempfile.mkdtemp(prefix="rh", dir="/tmp")  # short: Ray's unix sockets live here
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
         f"--temp-dir={temp}", "--disable-usage-stats"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"http://127.0.0.1:{dash}"
    deadline = time.time() + 120
    while time.time() < deadline:
        ok = subprocess.run([RAY, "job", "list", f"--address={address}"], env=env,
                            capture_output=True).returncode == 0
        if ok:
            break
        assert head.poll() is None, "ray start --head exited"
        time.sleep(2)
    else:
        pytest.fail("the Ray head's job server did not come up")
    yield address, env
    head.send_signal(signal.SIGTERM)  # --block: ray start stops the head's processes
    with contextlib.suppress(subprocess.TimeoutExpired):
        head.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGKILL)


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
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "succeeded" in run.stdout
    model = StaticModel.load(f"{out}/model")
    assert len(model) == 150 and model.dim == 64
    assert model.encode("The river flows north.").shape == (64,)
