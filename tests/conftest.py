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


# Modules whose tests start Ray (the session's, a cluster of their own, or a build, encode or
# job in a subprocess). Under pytest-xdist they all run on one worker, one after another, as the
# suite ran before: two Rays at once on this 2-core box starve each other (the suite took 20 min
# on two workers that each ran a Ray, against 11-13 min on one). The other worker takes every
# test that needs no Ray (the teacher, models, readers, metrics, configs, docs), beside them.
RAY_MODULES = {
    "test_benchmarks", "test_build", "test_bulk", "test_bulk_commit", "test_bulk_resume",
    "test_cli", "test_cluster", "test_cluster_config", "test_doc_commands", "test_failures",
    "test_hostile", "test_lease", "test_logs", "test_model", "test_output_paths",
    "test_pairs_build", "test_refine", "test_reliability_fetch", "test_runtime",
    "test_stage_contract", "test_store", "test_submit",
}


def pytest_collection_modifyitems(config, items):
    """Tests that start their own Ray cluster (``own_ray_cluster``) run first, before the
    session's in-process Ray exists; every test that starts Ray is in the xdist group ``ray``
    (above). The ``cluster`` fixture stops this process's session Ray if one runs (and starts
    it again after), so the order is a speed-up, not a condition."""
    items.sort(key=lambda item: item.get_closest_marker("own_ray_cluster") is None)
    for item in items:
        if (item.module.__name__ in RAY_MODULES or "ray_session" in item.fixturenames
                or item.get_closest_marker("own_ray_cluster")):
            item.add_marker(pytest.mark.xdist_group("ray"))


_ROLE: dict[str, bool] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Under pytest-xdist, the worker whose first test is not in the ``ray`` group is the one
    the Ray tests run beside: it lowers its own priority to nice 19 for the rest of the run, so
    it uses only the CPU they leave idle (the ``ray`` group, the largest scope, is the first
    work unit of the other worker)."""
    if "PYTEST_XDIST_WORKER" in os.environ and not _ROLE:
        _ROLE["ray"] = item.get_closest_marker("xdist_group") is not None
        if not _ROLE["ray"]:
            os.nice(19)


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
