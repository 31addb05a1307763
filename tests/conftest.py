"""Shared fixtures: real data from ../shared/data, the real MiniLM teacher, a moto S3 server on
loopback, and one real Ray instance per test session."""

from __future__ import annotations

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
BUCKET = "swe-test"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        pytest.fail(f"shared data not found at {DATA}; set SWE_DATA")
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
    session's in-process Ray exists."""
    items.sort(key=lambda item: item.get_closest_marker("own_ray_cluster") is None)


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


@pytest.fixture(scope="session")
def ray_session(s3):
    """One local Ray for the whole session (started after S3 so workers inherit its env)."""
    import ray
    from ray.data import DataContext

    from swe.raysetup import init_ray

    init_ray(num_cpus=2, object_store_memory=1 << 30)
    ctx = DataContext.get_current()
    ctx.execution_no_progress_timeout_s = 300
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()
