"""The `swe` command: dispatch to the pipelines/ jobs, `--help` with defaults, `swe info`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np

from swe import raysetup
from swe.cli import main
from swe.model import StaticModel


def test_import_is_light():
    code = ("import sys, swe.cli; bad = [m for m in ('torch', 'ray', 'transformers') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: swe [-h] COMMAND")
    for command in ("build", "encode", "evaluate", "export", "info"):
        assert command in out


def test_job_help_is_the_pipelines_parser_with_defaults(capsys):
    for command, default in (("encode", "(default: 65536)"), ("evaluate", "20000"),
                             ("build", "--until")):
        try:
            main([command, "--help"])
        except SystemExit as e:
            assert e.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: swe {command}"), out[:80]
        assert default in out
        assert f"swe {command} " in out or "python pipelines/" in out  # the docstring's example
        # an example's line continuation renders as written, not collapsed into spaces
        assert not re.search(r"\S {4,}--", out), out


def test_unknown_command_exits_2(capsys):
    try:
        main(["frobnicate"])
    except SystemExit as e:
        assert e.code == 2
    assert "unknown command" in capsys.readouterr().err


def test_info(tmp_path, capsys):
    model = StaticModel.from_vectors(["a", "b", "c"], np.eye(3, 4, dtype=np.float32),
                                     provenance={"teacher": "t", "step": "step1"})
    model.save(tmp_path / "m")
    assert main(["info", str(tmp_path / "m"), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["dim"] == 4 and facts["vocab_size"] == 3 and facts["languages"] == ["en"]
    assert facts["provenance"]["teacher"] == "t"
    assert set(facts["files"]) >= {"model.safetensors", "vocab.txt", "config.json"}
    assert main(["info", str(tmp_path / "m")]) == 0
    assert "vocab_size" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "missing")]) == 2  # a wrong input (swe.commands)
    assert "missing" in capsys.readouterr().err


def test_console_script_runs():
    exe = [sys.executable, "-m", "swe.cli", "info", "--help"]
    out = subprocess.run(exe, check=True, capture_output=True, text=True).stdout
    assert "example: swe info" in out


def test_build_dispatches_to_the_pipeline_job(tmp_path, capsys):
    assert main(["build", "--config", str(tmp_path / "none.toml"),
                 "--output", str(tmp_path / "out")]) == 2
    assert "none.toml" in capsys.readouterr().err


def test_a_local_ray_that_times_out_at_start_is_one_clear_line(tmp_path, capsys, monkeypatch):
    """Ray waits a fixed 30 s for a new local node's raylet; on an overloaded machine that
    wait runs out. The build says so in one line (the load, what to do) and keeps no lease on
    the output: the second try meets the same error, not a held output."""
    import ray

    def start_that_times_out(**kwargs):
        raise Exception("The current node timed out during startup. This could happen because "
                        "some of the raylet failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", start_that_times_out)
    stopped = []  # the real one would stop this test session's Ray: it was started by this PID
    monkeypatch.setattr(raysetup, "stop_leftovers", stopped.append)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    args = ["build", "--config", "quickstart", "--output", str(tmp_path / "out"),
            "--set", "extraction.runtime='torch'"]
    for _ in range(2):
        assert main(args) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: a local Ray did not start"), err
        assert "load average" in err and "RAY_ADDRESS" in err and "Traceback" not in err
    assert stopped == [os.getpid(), os.getpid()]


def test_a_failed_local_start_leaves_no_ray_agent_running(tmp_path):
    """Ray's agents outlive a raylet that never registered, with files open in the session
    folder named after the driver's PID: the failed start kills them, and nothing else."""
    driver = 9999999  # not a live PID: the test session's own Ray must not match
    folders = [tmp_path / f"session_2026-11-28_22-00-14_232828_{pid}" / "logs"
               for pid in (driver, 19999999)]
    agents = []
    for folder in folders:
        folder.mkdir(parents=True)
        with open(folder / "agent.out", "w") as out:
            agents.append(subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(60)"], stdout=out))
    try:
        raysetup.stop_leftovers(driver)
        assert agents[0].wait(timeout=10) == -signal.SIGKILL
        assert agents[1].poll() is None  # another driver's session
    finally:
        for agent in agents:
            agent.kill()
            agent.wait()


def test_ray_train_collects_reports_every_half_second_unless_the_user_says(monkeypatch):
    """A worker's next report waits until Ray Train's controller has taken the last one, every
    2 s by Ray's default: swe's runs ask for 0.5 s (a user's own setting is kept)."""
    class Trainer:
        def fit(self):
            return os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"]

    monkeypatch.delenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", raising=False)
    assert raysetup.fit(Trainer()) == raysetup.TRAIN_POLL_S == "0.5"
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "3")
    assert raysetup.fit(Trainer()) == "3"

