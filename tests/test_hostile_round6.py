"""What the sixth hostile round (issue 42) left: a ``--dev`` that is a copy of ``--data``, a
finetune or refine run stopped by Ctrl-C that ended with no word, help written to a full disk
that exited 0, and two ``swe quantize`` options that were ignored or misreported. Each test fails
on the code before its fix."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from swe.clustering import quantize_model
from swe.finetune.job import finetune
from swe.model import StaticModel
from swe.raysetup import fit

ROWS = [("a good film", "x"), ("a bad film", "y"), ("so so", "x")]


def _model(path: Path) -> Path:
    StaticModel.from_vectors(["a", "good", "film"], np.eye(3, dtype=np.float32)).save(str(path))
    return path


def _csv(path: Path, rows) -> Path:
    data = ("text,label\n" + "".join(f"{t},{label}\n" for t, label in rows)).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("copy", ["copy.csv", "copy.csv.gz", "reordered.csv"])
def test_a_dev_file_with_the_same_rows_as_the_data_is_refused(tmp_path, copy):
    """The rows are compared, not the path: a byte copy, a compressed copy, the rows shuffled."""
    data = _csv(tmp_path / "train.csv", ROWS)
    dev = _csv(tmp_path / copy, ROWS[::-1] if copy.startswith("re") else ROWS)
    with pytest.raises(ValueError, match=r"holds the same rows as --data .*\(a copy\)"):
        finetune(str(_model(tmp_path / "m")), str(data), str(tmp_path / "out"), dev=str(dev))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("code", [0, 1, None])
def test_a_training_run_ended_by_a_signal_is_an_interrupt(code):
    """Ray Train's SIGINT handler ends the driver's wait with ``SystemExit`` (status 1 here,
    0 in its other branch); every command reports a ``KeyboardInterrupt`` as "interrupted"
    (exit 130). Checked for real: ``timeout --preserve-status -s INT 40 swe finetune …``
    prints that line and exits 130, and the rerun resumes (closing note of issue 42)."""

    class Stopped:
        def fit(self):
            raise SystemExit(code)

    with pytest.raises(KeyboardInterrupt):
        fit(Stopped())


def test_a_training_error_is_not_an_interrupt():
    class Failing:
        def fit(self):
            raise RuntimeError("worker died")

    with pytest.raises(RuntimeError, match="worker died"):
        fit(Failing())


@pytest.mark.parametrize("argv", [["--help"], ["build", "--help"], ["info", "--help"],
                                  ["quantize", "--help"]])
def test_help_that_cannot_be_written_is_not_a_success(argv):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "swe.cli", *argv], stdout=full,
                              stderr=subprocess.PIPE, text=True)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == ("error: cannot write the output (No space left on device): "
                                   "free space where it goes")


def test_quantize_refuses_a_scale_its_dtype_does_not_have(tmp_path):
    with pytest.raises(ValueError, match=r"--scale global applies to --dtype int8 only"):
        quantize_model(str(_model(tmp_path / "m")), str(tmp_path / "q"), 2, dtype="float16",
                       scale="global")


def test_quantize_names_an_output_that_is_a_file(tmp_path):
    (tmp_path / "q").write_text("keep")
    with pytest.raises(ValueError, match=r"--output .*q is an existing file, not a folder"):
        quantize_model(str(_model(tmp_path / "m")), str(tmp_path / "q"), 2)
    assert (tmp_path / "q").read_text() == "keep"
