"""Hostile round 20's cases: signals that reached a command where none was expected (one test
each; the finetune case is in tests/test_finetune.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hostile import tiny_model
from procs import joined_env, own_env

from swe import StaticModel
from swe.cli import main
from swe.ensemble import EnsembleModel

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, *args: str, env: dict | None = None,
            timeout: int = 120) -> subprocess.CompletedProcess:
    """``python -c code args…`` from the repository root, its output captured."""
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)


def test_a_second_ctrl_c_while_reseal_puts_configs_back_changes_nothing(tmp_path, monkeypatch,
                                                                         capsys):
    """Round 20: Ctrl-C in ``swe reseal`` of an ensemble, sent to the process group of
    ``timeout … swe reseal``, reaches swe twice; the second cut the putting back, leaving 29
    of 30 members resealed and "nothing was changed" printed."""
    model = StaticModel.load(str(tiny_model(tmp_path / "m")))
    EnsembleModel([model] * 3).save(str(tmp_path / "ens"))
    configs = [*sorted(tmp_path.glob("ens/**/config.json")), tmp_path / "ens/ensemble.json"]
    for path in configs:  # an edit, so that a reseal changes every config
        path.write_text(path.read_text().replace('"format"', '"edited": 1, "format"', 1))
    before = {p: p.read_bytes() for p in configs}
    from swe import modelfiles, storage

    real_reseal, real_write = modelfiles.reseal, storage.write_bytes_atomic
    calls, putting_back = [], []

    def reseal_then_ctrl_c(path, *args, **kwargs):
        names = real_reseal(path, *args, **kwargs)
        if path.endswith("member_2"):
            putting_back.append(True)
            raise KeyboardInterrupt  # the first Ctrl-C: after every member, before the top
        return names

    def write_with_a_second_ctrl_c(url, data):
        if putting_back:
            if not calls:  # the second Ctrl-C, while the first config goes back
                os.kill(os.getpid(), signal.SIGINT)
            calls.append(url)
        return real_write(url, data)

    monkeypatch.setattr("swe.modelfiles.reseal", reseal_then_ctrl_c)
    monkeypatch.setattr("swe.storage.write_bytes_atomic", write_with_a_second_ctrl_c)
    ambient = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's Ctrl-C
    try:
        assert main(["reseal", str(tmp_path / "ens")]) == 130
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # as before
    finally:
        signal.signal(signal.SIGINT, ambient)
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: interrupted; nothing was changed; rerun the same command to resume"]
    assert len(calls) == len(configs)
    assert {p: p.read_bytes() for p in configs} == before


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("when", ["before Ray", "inside ray.init"])
def test_sigterm_before_or_while_ray_starts_is_an_interrupt(when):
    """Round 20: SIGTERM before a job reached Ray killed it with status 143 and no word; inside
    ``ray.init``, Ray's handler exited with status 15 (no word), or the driver's native handler
    dumped 17 lines of stack. Now each is a ``KeyboardInterrupt``, which every command reports
    in one line (130)."""
    code = ("import os, signal, time\n"
            "import ray._private.utils as utils\n"
            "from swe.raysetup import configure_console, init_ray\n"
            "configure_console()\n"
            "real = utils.set_sigterm_handler\n"
            "def then_sigterm(handler):\n"  # Ray's own handler in place: the signal lands in
            "    real(handler); os.kill(os.getpid(), signal.SIGTERM)\n"  # ray.init
            "utils.set_sigterm_handler = then_sigterm\n"
            "try:\n"
            f"    if {when == 'before Ray'}:\n"
            "        os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)\n"
            "    init_ray(); time.sleep(30)\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted')\n")
    done = _python(code, env=joined_env())
    assert done.stdout.strip() == "interrupted", (done.returncode, done.stderr[-2000:])
    assert "SIGTERM received" not in done.stderr


@pytest.mark.slow
def test_sigterm_while_ray_shuts_down_at_exit_is_ignored():
    """Round 20: SIGTERM in the second after "build finished", while Ray shut down (its
    ``atexit`` handler), printed a ``KeyboardInterrupt`` traceback and the driver died of a
    segmentation fault (139). The result is in by then: the signal is ignored, exit 0.
    A local Ray (the driver stops its processes at exit, which takes a while)."""
    code = ("import os, signal, threading, time\n"
            "from swe.raysetup import configure_console, init_ray\n"
            "configure_console(); init_ray(num_cpus=1)\n"
            "def sigterms():\n"  # from the moment the main thread is done until the end
            "    while threading.main_thread().is_alive():\n"
            "        time.sleep(0.002)\n"
            "    time.sleep(0.02)\n"
            "    while True:\n"
            "        os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.005)\n"
            "threading.Thread(target=sigterms, daemon=True).start()\n"
            "print('done', flush=True)\n")
    done = _python(code, env=own_env(), timeout=180)
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_sigterm_while_a_job_loads_is_one_line(tmp_path):
    """Round 20: SIGTERM in a job's first second (its modules loading, before its own handler
    of interrupts) killed it with status 143 and no word, or printed 60 lines of traceback."""
    code = ("import importlib, os, signal, sys\n"
            "from swe.cli import main\n"
            "real = importlib.import_module\n"
            "def loading(name, *a):\n"
            "    if name.startswith('swe.commands.'):\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return real(name, *a)\n"
            "importlib.import_module = loading\n"
            "sys.exit(main(['build', '--config', 'quickstart', '--output', sys.argv[1]]))\n")
    done = _python(code, str(tmp_path / "out"))
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "error: interrupted; rerun the same command to resume"]
    assert not (tmp_path / "out").exists()


def test_an_interrupt_says_kept_only_what_exists(tmp_path, monkeypatch, capsys):
    """Round 21: a build interrupted in its first seconds said "the finished stages and shards
    under OUT/work are kept" with no OUT at all; a finetune interrupted before its first
    checkpoint said "the last checkpoint … is kept" of a work/ holding Ray's storage marker
    only."""
    from swe.commands import kept

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("swe.build.build", interrupted)
    out = tmp_path / "out"
    assert main(["build", "--config", "quickstart", "--output", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: interrupted; nothing was written; rerun the same command to resume")
    (out / "work/corpus").mkdir(parents=True)
    (out / "work/corpus/_DONE.json").write_text("{}")
    assert main(["build", "--config", "quickstart", "--output", str(out)]) == 130
    assert f"the finished stages and shards under {out}/work are kept" in capsys.readouterr().err
    run = tmp_path / "ft/work/runs/finetune-0123456789ab"
    run.mkdir(parents=True)
    (run / ".validate_storage_marker").write_text("")
    args = (str(tmp_path / "ft/work"), "the last checkpoint is kept")
    assert kept(*args, pattern="runs/*/checkpoint_*") == "nothing was written"
    (run / "checkpoint_2026-11-28_18-00-00.000000").mkdir()
    (run / "checkpoint_2026-11-28_18-00-00.000000/state.json").write_text("{}")
    assert kept(*args, pattern="runs/*/checkpoint_*") == "the last checkpoint is kept"
