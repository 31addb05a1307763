"""Outputs that a job would empty or fill with its own files are refused before any work:
the filesystem root, a bucket's root, home, the current directory and any folder above it, and
a build output that overlaps its corpus. The data-loss case: ``--output /`` once resolved to the
current directory and ``--overwrite`` deleted everything in it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swe import storage
from swe.build.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent
QUICK = str(ROOT / "pipelines/configs/quickstart.toml")


@pytest.mark.parametrize("out", ["/", "//", "/./", ".", "./", "", " ", "..", "HOME", "s3://bucket",
                                 "s3://bucket/", "s3://"])
def test_dangerous_outputs_are_refused_naming_the_flag(out, tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    monkeypatch.setenv("HOME", str(tmp_path / "a"))
    with pytest.raises(ValueError, match="--output"):
        storage.output_url(str(tmp_path / "a") if out == "HOME" else out)


def test_a_symlink_to_the_current_directory_is_refused(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "work")
    monkeypatch.chdir(tmp_path / "work")
    with pytest.raises(ValueError, match="current directory"):
        storage.output_url(str(tmp_path / "link"))


def test_ordinary_outputs_are_accepted_and_normalised(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.output_url("out/run1/") == str(tmp_path / "out" / "run1")
    assert storage.output_url(f"file://{tmp_path}/x") == str(tmp_path / "x")
    assert storage.output_url("s3://bucket/prefix/") == "s3://bucket/prefix"
    sibling = str(tmp_path.parent / "sibling")  # beside the current directory, not above it
    assert storage.output_url(sibling) == os.path.realpath(sibling)


def test_overlaps():
    assert storage.overlaps("s3://b/x", "s3://b/x/y") and storage.overlaps("/a/b/", "/a")
    assert storage.overlaps("/a/b", "/a/b/*.txt") and not storage.overlaps("/a/bc", "/a/b")


def test_build_config_refuses_root_and_an_output_over_its_corpus(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="--output / resolves to the filesystem root"):
        load_config(QUICK, output="/", check_paths=False)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with pytest.raises(ConfigError, match=r"overlaps corpus\.en\.paths"):
        load_config(QUICK, [f"corpus.en.paths=['{corpus}/*.txt']"], output=str(corpus / "out"),
                    check_paths=False)


@pytest.mark.parametrize("script", ["encode", "build"])
def test_the_cli_with_output_root_leaves_the_current_directory_alone(script, tmp_path):
    """The issue's exact command, run from a folder holding a file: exit 2, one line, no loss."""
    (tmp_path / "keep.txt").write_text("keep me")
    src = tmp_path / "in.txt"
    src.write_text("a sentence\n")
    if script == "encode":
        args = ["--model", str(tmp_path / "no-model"), "--input", str(src), "--output", "/",
                "--overwrite"]
    else:
        args = ["--config", QUICK, "--output", "/"]
    p = subprocess.run([sys.executable, str(ROOT / f"pipelines/{script}.py"), *args],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: "), p.stderr
    assert "--output / resolves to the filesystem root" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "keep.txt"]
    assert (tmp_path / "keep.txt").read_text() == "keep me"
