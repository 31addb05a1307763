"""Every benchmark runs: ``main(["--smoke"])`` of each script in benchmarks/, in this process and
on the session's Ray, so a benchmark cannot rot unnoticed (a changed import, option or path)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The scripts, not their shared smoke helper (benchmarks/_smoke.py), which they import from
# their own folder: on sys.path for the whole session, as it is for `python benchmarks/X.py`.
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))
sys.path.insert(0, str(ROOT / "benchmarks"))

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_runs_its_smoke_mode(path, tmp_path, monkeypatch, capsys):
    """One test per script, so pytest-xdist spreads them over its workers."""
    monkeypatch.chdir(tmp_path)  # the scripts find their inputs without the repository as cwd
    env = dict(os.environ)
    try:
        rc = _load(path).main(["--smoke"])
    finally:
        os.environ.clear()  # a script's thread settings must not reach the next test
        os.environ.update(env)
    out = capsys.readouterr().out
    assert rc in (0, None), f"{path.name} returned {rc!r}"
    assert out.strip(), f"{path.name} printed nothing"


def test_every_benchmark_has_smoke_and_a_plain_help(capsys):
    assert len(SCRIPTS) >= 13, SCRIPTS
    for path in SCRIPTS:
        module = _load(path)
        assert module.parser().parse_args(["--smoke"]).smoke, path.name
        with pytest.raises(SystemExit) as exit_:
            module.main(["--help"])  # prints the help and stops: runs nothing
        assert exit_.value.code == 0, path.name
        assert "--smoke" in capsys.readouterr().out, path.name
    # Importing a script and building its parser is cheap: no torch, no Ray (the docs checker
    # imports every script to check documented flags).
    code = ("import importlib.util, sys\n"
            "for path in sys.argv[1:]:\n"
            "    spec = importlib.util.spec_from_file_location('m', path)\n"
            "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "    m.parser()\n"
            "heavy = sorted({'torch', 'ray', 'transformers'} & set(sys.modules))\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code, *map(str, SCRIPTS)], check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "benchmarks")})


def test_grid_refuses_a_work_folder_it_would_clobber_and_a_missing_report(capsys):
    grid = _load(ROOT / "benchmarks/bench_grid.py")
    for bad in (["--work", "/"], ["--work", "."], ["--report", "/no/such/grid.json"]):
        assert grid.main(bad) == 2, bad
        assert "error:" in capsys.readouterr().err
