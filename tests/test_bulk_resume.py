"""A bulk job whose driver is SIGKILLed part-way resumes where it stopped: the rerun encodes only
the missing parts, and the output has exactly one row per input row (with ``--tokens``: each
row's units and vectors too)."""

from __future__ import annotations

import json
import lzma
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from procs import joined_env
from test_bulk import small_glove

from swe import StaticModel
from swe.bulk import read_manifest, read_output

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
FILES, ROWS, PART = 4, 12_000, 2_400  # 20 parts of 2,400 rows


def _kill_group(pgid: int) -> None:
    """SIGKILL the job's process group (its driver; Ray, which it joined, ends its job)."""
    for _ in range(100):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def _job(model: str, src: Path, out: Path, log: Path) -> subprocess.Popen:
    """``pipelines/encode.py`` in its own session, joined to the test session's Ray."""
    env = joined_env()
    args = [sys.executable, "pipelines/encode.py", "--model", model, "--input", str(src),
            "--output", str(out), "--part-rows", str(PART), "--max-actors", "2", "--tokens"]
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=log.open("w"), start_new_session=True, text=True)


def _check_tokens(model: StaticModel, corpus: Path, table) -> None:
    """Every 97th row's embedding, units and token vectors are the model's for its text."""
    lines = {str(p): p.read_text().split("\n") for p in corpus.iterdir()}
    rows = table.take(list(range(0, table.num_rows, 97))).to_pylist()
    texts = [lines[r["file"]][r["row"]] for r in rows]
    np.testing.assert_allclose([r["embedding"] for r in rows], model.encode(texts), atol=1e-6)
    for r, want in zip(rows, model.encode_tokens(texts), strict=True):
        assert r["tokens"] == want.units
        np.testing.assert_allclose(np.reshape(r["token_vectors"], (-1, model.dim)), want.vectors)


@pytest.fixture(scope="module")
def corpus(data_dir, tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("resume-in")
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.01.txt.xz", "rt") as f:
        for k in range(FILES):
            (src / f"part-{k}.txt").write_text("".join(next(f) for _ in range(ROWS)))
    return src


def test_killed_driver_resumes(ray_session, glove, corpus, tmp_path):
    model, out = str(tmp_path / "glove"), tmp_path / "out"
    small_glove(glove).save(model)
    t0 = time.perf_counter()
    proc = _job(model, corpus, out, tmp_path / "run1.log")
    try:
        while len(list(out.glob("v-*/_receipts/*.json"))) < 6:
            assert proc.poll() is None, (tmp_path / "run1.log").read_text()[-3000:]
            assert time.perf_counter() - t0 < 240, "no part was written in 240 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        _kill_group(proc.pid)
    killed_after = time.perf_counter() - t0
    written = len(list(out.glob("v-*/_receipts/*.json")))
    assert read_manifest(str(out)) is None and written < FILES * ROWS // PART

    t1 = time.perf_counter()
    proc = _job(model, corpus, out, tmp_path / "run2.log")
    try:
        stdout, _ = proc.communicate(timeout=300)
    finally:
        _kill_group(proc.pid)
    resumed_in = time.perf_counter() - t1
    assert proc.returncode == 0, (tmp_path / "run2.log").read_text()[-3000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["rows"] == FILES * ROWS and summary["resumed_parts"] >= written
    assert "resuming run" in (tmp_path / "run2.log").read_text()
    table = read_output(str(out)).to_table(columns=["file", "row"])
    keys = set(zip(table.column("file").to_pylist(), table.column("row").to_pylist(), strict=True))
    assert table.num_rows == len(keys) == FILES * ROWS  # no duplicates, none missing
    assert keys == {(str(corpus / f"part-{k}.txt"), r) for k in range(FILES) for r in range(ROWS)}
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.json", f"v-{summary['run']}"]
    _check_tokens(StaticModel.load(model), corpus, read_output(str(out)).to_table())
    print(f"killed after {killed_after:.1f}s with {written} of {summary['parts']} parts written; "
          f"the rerun resumed {summary['resumed_parts']} and took {resumed_in:.1f}s")
