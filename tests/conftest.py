"""Shared fixtures: real data from ../shared/data, the real MiniLM teacher, a moto S3 server on
loopback, and one real Ray instance per test session."""

from __future__ import annotations

import compileall
import os
import socket
from pathlib import Path

import pytest
from procs import WARM_WORKERS

from swe.eval.data import data_root

for _key, _value in WARM_WORKERS.items():  # before any Ray starts (tests/procs.py says why)
    os.environ.setdefault(_key, _value)

ROOT = Path(__file__).resolve().parents[1]
DATA = data_root()

# Where PYTHONDONTWRITEBYTECODE=1 is set (this box's shell sets it), no process caches bytecode
# for the editable checkout: every Ray worker and subprocess driver compiled swe/ from source
# again (0.1-0.3 s each, hundreds of them). pip compiled the installed packages at install; this
# does the same for the checkout's code, once per session (about 1 s; stale files are ignored).
for _folder in ("swe", "pipelines", "benchmarks"):
    compileall.compile_dir(ROOT / _folder, quiet=1)
BUCKET = "swe-test"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data (``$SWE_DATA``, default ``../shared/data``). Without it the tests that
    read it are skipped, with one line naming ``SWE_DATA``; under ``CI=true`` it must be there."""
    if not DATA.is_dir():
        message = (f"the shared data is not at {DATA}: set SWE_DATA to the folder that holds "
                   "corpora/, parallel/ and eval/ (docs/install.md)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return DATA


@pytest.fixture(scope="session")
def minilm() -> Path:
    from swe.build.teacher import minilm_dir

    return minilm_dir()


@pytest.fixture(scope="session")
def glove():
    from swe.eval.baselines import glove_50d

    return glove_50d()


def pytest_collection_modifyitems(config, items):
    """Tests that start their own Ray cluster (``own_ray_cluster``) run first, before the
    session's in-process Ray exists, then the modules marked ``slow`` (end to end: builds, Ray
    Train runs, benchmarks), then the rest; a module's tests stay together, so its fixtures are
    made once. The ``cluster`` fixture stops this process's session Ray if one runs (and starts
    it again after), so the order is a speed-up, not a condition.

    Under pytest-xdist (``-n 2 --dist worksteal``, the README's command) each worker is its own
    session, with its own session Ray: the tests find their own processes by ancestry
    (``tests/procs.py``), never the other worker's. Work stealing hands a worker that runs out
    half of the other's remaining tests from the end of its queue, where the quick ones are, so
    the two workers end within about one test of each other (docs/limits.md)."""
    items.sort(key=lambda item: (item.get_closest_marker("own_ray_cluster") is None,
                                 item.get_closest_marker("slow") is None))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3():
    """A real S3 endpoint (moto server on 127.0.0.1) with bucket ``swe-test``; env vars set so
    s3fs, pyarrow and Ray workers all reach it. Yields the bucket URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
    yield f"s3://{BUCKET}"
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _start_session_ray() -> None:
    from ray.data import DataContext

    from swe.raysetup import init_ray

    init_ray(num_cpus=2, object_store_memory=1 << 30)
    ctx = DataContext.get_current()
    ctx.execution_no_progress_timeout_s = 300
    ctx.enable_progress_bars = False


@pytest.fixture(scope="session")
def ray_session(s3):
    """One local Ray for the whole session (started after S3 so workers inherit its env)."""
    import ray

    _start_session_ray()
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def no_session_ray():
    """For a module whose tests connect this process to a Ray cluster of their own: the
    session's Ray, if this worker started it already, is stopped first and started again
    after."""
    import ray

    running = ray.is_initialized()
    if running:
        ray.shutdown()
    yield
    if running:
        _start_session_ray()
