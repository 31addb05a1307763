"""The build's console: one line per stage end, progress only for long passes, Ray's noise out."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swe import raysetup
from swe.build.stage import describe
from swe.build.tasks import Progress, duration, rate

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("stage", "summary", "text", "unit"), [
    ("sentences", {"sentences": 58574, "dropped_by_length": 1426, "sentences_per_s": 16383},
     "58,574 sentences (1,426 dropped by length)", "sentences"),
    ("corpus", {"lines": 60000, "invalid_utf8_lines": 0}, "60,000 lines", "lines"),
    ("vocab", {"sizes": {"en": 3000}, "min_count_kept": {"en": 43}},
     "3,000 words (min count 43)", None),
    ("vocab", {"sizes": {"en": 3000, "de": 2000}, "min_count_kept": {"en": 43, "de": 7}},
     "en 3,000 / de 2,000 words (min count en 43 / de 7)", None),
    ("pca", {"fitted_on": 2721, "dropped_top": 3, "dim": 256, "level": "sentence",
             "top_variances": [0.38], "sif_a": None},
     "fitted on 2,721 sentences (top 3 components dropped, 256 dimensions)", "sentences"),
    # a result whose LOG names none of its fields: its first count leads, floats read
    # "name value"
    (None, {"rounds": 12, "best_loss": 0.25, "early_stopped": True},
     "12 rounds (best loss 0.25, early stopped)", "rounds"),
    (None, {}, "nothing new", None),
])
def test_a_result_reads_as_one_short_line(stage, summary, text, unit):
    """Each stage's result says how it reads (its ``Result.LOG``); the runner names none."""
    import importlib

    log = importlib.import_module(f"swe.build.stages.{stage}").Result.LOG if stage else {}
    got, got_unit, _ = describe(summary, log)
    assert (got, got_unit) == (text, unit)
    assert "{" not in got and "_" not in got


def test_durations_and_rates_read_naturally():
    assert [duration(3.61), duration(41.7), duration(252), duration(7500)] == [
        "3.6 s", "42 s", "4 min 12 s", "2 h 05 min"]
    assert rate(58574, 3.58, "sentences") == "16,361 sentences/s"
    assert rate(10, 4, "steps") == "2.5 steps/s"


def test_progress_is_silent_for_a_short_pass_and_periodic_for_a_long_one(monkeypatch, caplog):
    monkeypatch.setitem(raysetup.console(), "tty", False)
    monkeypatch.setitem(raysetup.console(), "verbose", False)
    with caplog.at_level(logging.INFO, logger="swe.build"):
        short = Progress("quick", 3)
        for _ in range(3):
            short.add()
        short.close()
        assert caplog.text == ""
        monkeypatch.setattr(Progress, "LOG_EVERY_S", 0.0)
        long = Progress("slow", 4, "sentences")
        long.add(1)  # the first unit: no rate yet (start-up is not work)
        time.sleep(0.01)
        long.add(1)
        long.close()
    first, second = caplog.text.splitlines()
    assert first.endswith("[slow] 1/4 sentences (25%)")
    assert "[slow] 2/4 sentences (50%), " in second and "sentences/s, ETA " in second


def test_the_filter_drops_only_the_harmless_core_worker_and_raylet_lines():
    out_r, out_w = os.pipe()
    data = (b"[E] core_worker.cc:2465: Actor 'MapWorker(X)' " + raysetup.HARMLESS[0]
            + b". If ...\n\x1b[33m(raylet)\x1b[0m WARNING: 14 " + raysetup.HARMLESS[1]
            + b": 7051 with address: 192.0.2.2, which is 7x the maximum expected startup "
            b"concurrency (2).\nerror: something real\npartial")
    rest = raysetup._write_lines(data, out_w, raysetup.HARMLESS)
    os.close(out_w)
    assert os.read(out_r, 1000) == b"error: something real\n" and rest == b"partial"
    os.close(out_r)


_SCRIPT = """
import os, sys
from swe.raysetup import HARMLESS, configure_console
configure_console(verbose=sys.argv[1] == "-v")
os.write(2, b"[E] core_worker.cc:2465: Actor X " + HARMLESS[0] + b". See ...\\n")
print("still here", file=sys.stderr)
raise SystemExit("error: the last words")
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_the_driver_stderr_loses_the_core_worker_line_but_nothing_else(verbose):
    run = subprocess.run([sys.executable, "-c", _SCRIPT, "-v" if verbose else "-q"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.endswith("still here\nerror: the last words\n")
    assert ("max_restarts > 0" in run.stderr) is verbose


def test_ray_data_is_quiet_unless_verbose(monkeypatch):
    import ray.data

    ctx = ray.data.DataContext.get_current()
    console = [h for h in logging.getLogger("ray.data").handlers if h.name == "console"]
    monkeypatch.setattr(ctx, "enable_progress_bars", True)
    for handler in console:
        monkeypatch.setattr(handler, "level", logging.INFO)
    monkeypatch.setitem(raysetup.console(), "verbose", True)
    raysetup._quiet_ray_data()
    assert ctx.enable_progress_bars
    monkeypatch.setitem(raysetup.console(), "verbose", False)
    raysetup._quiet_ray_data()
    assert not ctx.enable_progress_bars
    assert console and all(h.level == logging.CRITICAL for h in console)


def test_build_and_encode_take_verbose():
    for job in ("build", "encode"):
        run = subprocess.run([sys.executable, f"pipelines/{job}.py", "--help"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=True)
        assert "-v, --verbose" in run.stdout
